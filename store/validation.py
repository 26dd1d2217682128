"""Argument checks at the store boundary, run by the ports' checked layer (store/checked.py).

Each raises before any statement runs: a TypeError/ValueError (BoundsError for a value
out of the limits in domain/bounds.py) naming the argument, so a refused call writes
nothing and never reaches the driver as a DataError or an OverflowError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TypeVar

from planq.domain.availability import MAX_GAP, check_sweep
from planq.domain.bounds import (
    ID_LENGTH,
    INT32_MAX,
    INT64_MAX,
    MAX_BATCH,
    MAX_DURATION_SECONDS,
    MAX_LIST_LIMIT,
    check_int,
    check_number,
    check_text,
    describe,
)
from planq.domain.clock import as_utc
from planq.domain.errors import BoundsError, WrongTypeError
from planq.domain.jobs import (
    TERMINAL_STATUSES,
    AsyncJob,
    AsyncJobStatus,
    check_checkpoint_json,
    check_error_message,
    check_error_traceback,
    check_job_fields,
    check_progress,
    check_worker_id,
)
from planq.domain.pipeline import MAX_ACTOR_LENGTH, MAX_NOTE_LENGTH, PlanEvent
from planq.domain.plans import Plan
from planq.domain.ports import Finish
from planq.domain.webhooks import Delivery

_T = TypeVar("_T")

__all__ = [
    "check_batch_size",
    "check_cap",
    "check_checkpoint_json",
    "check_error_message",
    "check_error_traceback",
    "check_finishes",
    "check_flag",
    "check_fresh_jobs",
    "check_id",
    "check_ids",
    "check_job",
    "check_job_id",
    "check_list_limit",
    "check_moment",
    "check_page",
    "check_plan",
    "check_progress",
    "check_sighting",
    "check_status",
    "check_terminal_status",
    "check_worker_id",
]


def check_job(job: object) -> None:
    """TypeError unless job is an AsyncJob; BoundsError if a field is out of its bounds."""
    if not isinstance(job, AsyncJob):
        raise WrongTypeError("job", "must be an AsyncJob", describe(job))
    check_job_fields(job)


def check_plan(plan: object) -> None:
    """TypeError unless plan is a Plan; BoundsError if a field is out of its bounds."""
    if not isinstance(plan, Plan):
        raise WrongTypeError("plan", "must be a Plan", describe(plan))
    plan.check_fields()


def check_deliveries(items: object) -> list[Delivery]:
    """A batch of webhook outbox rows (1 to MAX_BATCH, each a Delivery)."""

    def one(item: object) -> None:
        if not isinstance(item, Delivery):
            raise WrongTypeError("deliveries", "must be a list of Delivery", describe(item))

    return _check_batch("deliveries", items, Delivery, "deliver", one)


def _check_batch(
    field: str, items: object, kind: type[_T], verb: str, check_each: Callable[[object], None]
) -> list[_T]:
    """A batch: a list (not a string) of 1 to MAX_BATCH items, each checked; as a typed list."""
    if isinstance(items, str | bytes) or not isinstance(items, Sequence):
        raise WrongTypeError(field, f"must be a list of {kind.__name__}", describe(items))
    if not items:
        raise ValueError(f"nothing to {verb}: no {field} given")
    if len(items) > MAX_BATCH:
        raise BoundsError(field, f"at most {MAX_BATCH} per call", str(len(items)))
    for item in items:
        check_each(item)
    return [item for item in items if isinstance(item, kind)]


def check_new_plans(plans: object) -> list[Plan]:
    """A batch of new plans (1 to MAX_BATCH, each checked, no id twice); as a list."""
    typed = _check_batch("plans", plans, Plan, "add", check_plan)
    if len({p.plan_id for p in typed}) != len(typed):
        raise ValueError("a plan id appears twice in the batch")
    return typed


def check_event(event: object) -> None:
    """TypeError unless event is a PlanEvent; BoundsError if its ids or texts do not fit."""
    if not isinstance(event, PlanEvent):
        raise WrongTypeError("event", "must be a PlanEvent", describe(event))
    check_id("plan_id", event.plan_id)
    if event.job_id is not None:
        check_id("job_id", event.job_id)
    check_pipeline_text(event)


def check_pipeline_text(event: PlanEvent) -> None:
    """An event's actor and note fit their columns (the domain bounds them the same way)."""
    if event.actor is not None:
        check_text("actor", event.actor, MAX_ACTOR_LENGTH)
    if event.note is not None:
        check_text("note", event.note, MAX_NOTE_LENGTH)


def check_id(field: str, value: object) -> str:
    """An id argument: a non-empty string that fits a String(26) id column, no NUL."""
    return check_text(field, value, ID_LENGTH)


def check_job_id(job_id: object) -> None:
    """ValueError for an empty, non-string, over-long or NUL-carrying job id."""
    check_id("job_id", job_id)


def check_ids(field: str, ids: Iterable[object]) -> list[str]:
    """A batch of ids (at most MAX_BATCH), each a valid id argument; as a list."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise WrongTypeError(field, "must be a list of ids", describe(ids))
    items = list(ids)
    if len(items) > MAX_BATCH:
        raise BoundsError(field, f"must hold at most {MAX_BATCH} ids", str(len(items)))
    return [check_id(field, item) for item in items]


def check_finishes(finishes: object) -> list[Finish]:
    """A batch of finishes (0 to MAX_BATCH, each a Finish of valid fields, no job twice)."""
    if isinstance(finishes, str | bytes) or not isinstance(finishes, Sequence):
        raise WrongTypeError("finishes", "must be a list of Finish", describe(finishes))
    if len(finishes) > MAX_BATCH:
        raise BoundsError("finishes", f"at most {MAX_BATCH} per call", str(len(finishes)))
    checked: list[Finish] = []
    for item in finishes:
        if not isinstance(item, Finish):
            raise WrongTypeError("finishes", "must be a list of Finish", describe(item))
        check_job_id(item.job_id)
        check_terminal_status(item.status)
        check_error_message(item.error)
        check_error_traceback(item.traceback)
        check_worker_id(item.worker_id, optional=True)
        checked.append(item)
    if len({f.job_id for f in checked}) != len(checked):
        raise ValueError("finishes: a job id appears twice in the batch")
    return checked


def check_list_limit(limit: object) -> int | None:
    """A listing's limit: None (all) or an int from 0 to MAX_LIST_LIMIT."""
    return None if limit is None else check_int("limit", limit, 0, MAX_LIST_LIMIT)


def check_at_most(at_most: object) -> int | None:
    """A bounded count's cap: None (count all) or an int from 1 to MAX_LIST_LIMIT + 1."""
    return None if at_most is None else check_cap(at_most)


def check_cap(at_most: object) -> int:
    """A cap a count must have: an int from 1 to MAX_LIST_LIMIT + 1."""
    return check_int("at_most", at_most, 1, MAX_LIST_LIMIT + 1)


def check_batch_size(batch_size: object) -> int:
    """A delete batch: an int from 1 to INT32_MAX."""
    return check_int("batch_size", batch_size, 1, INT32_MAX)


def check_moment(field: str, value: object) -> datetime:
    """A timestamp argument is a datetime; it goes on as aware UTC (naive is taken as UTC).

    The hot path's statements hand it to the driver as it is, and PostgreSQL would read a
    naive one in the session's time zone: so every store sees it normalised here, once.
    """
    if not isinstance(value, datetime):
        raise WrongTypeError(field, "must be a datetime", describe(value))
    return as_utc(value)


def check_status(status: object) -> AsyncJobStatus:
    """WrongTypeError (a TypeError) unless status is an AsyncJobStatus."""
    if not isinstance(status, AsyncJobStatus):
        raise WrongTypeError("status", "must be an AsyncJobStatus", describe(status))
    return status


def check_terminal_status(status: object) -> AsyncJobStatus:
    """A status a job may finish in (succeeded, failed, cancelled)."""
    checked = check_status(status)
    if checked not in TERMINAL_STATUSES:
        raise ValueError(f"finish needs a terminal status, got {checked.value}")
    return checked


def check_flag(field: str, value: object) -> bool:
    """A keyword switch is a bool (a truthy object is a caller's mistake, not a yes)."""
    if not isinstance(value, bool):
        raise WrongTypeError(field, "must be a bool", describe(value))
    return value


def check_sighting(sweep: object, max_gap: object, recovered_ago: object) -> None:
    """A sweep's sighting: a known sweep, a finite gap, and how long ago an outage ended."""
    check_sweep(sweep)
    check_number("max_gap", max_gap, 0.0, MAX_GAP)
    if recovered_ago is not None:
        check_number("recovered_ago", recovered_ago, 0.0, MAX_DURATION_SECONDS)


def check_fresh_jobs(jobs: Sequence[object]) -> None:
    """ValueError unless jobs are new queued first attempts of one phase, one per plan."""
    typed = _check_batch("jobs", jobs, AsyncJob, "queue", check_job)
    if len({j.phase for j in typed}) != 1:
        raise ValueError("one queue call queues one phase")
    if len({j.plan_id for j in typed}) != len(typed):
        raise ValueError("a plan can be queued once per call")
    for job in typed:
        if job.status is not AsyncJobStatus.queued or job.attempt != 1 or job.retry_of:
            raise ValueError(f"job {job.job_id} is not a new first attempt")


def check_page(limit: object, offset: object, plan_id: object = None) -> None:
    """A newest-first page: limit 0..MAX_LIST_LIMIT, offset 0..int64, an optional plan id."""
    check_int("limit", limit, 0, MAX_LIST_LIMIT)
    check_int("offset", offset, 0, INT64_MAX)
    if plan_id is not None:
        check_id("plan_id", plan_id)
