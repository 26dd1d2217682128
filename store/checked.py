"""The job and plan ports' argument checks, run once, before a backend sees the call.

Both backends (store/memory.py, store/sql_jobs.py, store/sql_plans.py) subclass these. Each
public method of the port checks its arguments (store/validation.py, domain/bounds.py) and
then calls the backend's `_method` of the same name, so a backend holds no checks and a
refused call reaches no backend: nothing is read or written. A backend implements the
`_methods` only; tests/integration/test_port_checks.py enumerates the ports to prove that
every method refuses a bad argument on every backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime

from planq.domain.availability import Availability, check_sweep
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.pipeline import GateSummary, PlanEvent
from planq.domain.plans import Plan
from planq.domain.ports import CancelOutcome, Claimed, Finish, Ledger
from planq.domain.webhooks import MAX_ERROR_LENGTH, Delivery
from planq.store.validation import (
    check_at_most,
    check_batch_size,
    check_cap,
    check_checkpoint_json,
    check_deliveries,
    check_error_message,
    check_error_traceback,
    check_event,
    check_finishes,
    check_flag,
    check_fresh_jobs,
    check_id,
    check_ids,
    check_job,
    check_job_id,
    check_list_limit,
    check_moment,
    check_new_plans,
    check_page,
    check_plan,
    check_progress,
    check_sighting,
    check_status,
    check_terminal_status,
    check_worker_id,
)


def _optional_status(status: object) -> None:
    if status is not None:
        check_status(status)


def _optional_plan_id(plan_id: object) -> None:
    if plan_id is not None:
        check_id("plan_id", plan_id)


class CheckedJobStore(ABC):
    """The JobStore port (domain/ports.py): checks here, storage in the `_methods`."""

    @property
    @abstractmethod
    def ledger(self) -> Ledger:
        """The ledger this store writes in; see `domain.ports.one_ledger`."""

    @abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """Group the calls inside into one atomic unit (shared with the plan store)."""

    # -- plain rows ------------------------------------------------------------------
    def add(self, job: AsyncJob) -> None:
        """Insert a new row; a duplicate id (or a second retry of one job) is refused."""
        check_job(job)
        self._add(job)

    def get(self, job_id: str) -> AsyncJob | None:
        """The row, or None."""
        check_job_id(job_id)
        return self._get(job_id)

    def update(self, job: AsyncJob) -> None:
        """Overwrite an existing row (not for workers: they use the CAS operations)."""
        check_job(job)
        self._update(job)

    def remove(self, job_id: str) -> bool:
        """Delete a row; whether it existed."""
        check_job_id(job_id)
        return self._remove(job_id)

    def list_by_status(self, status: AsyncJobStatus, limit: int | None = None) -> list[AsyncJob]:
        """Rows in one status, oldest first."""
        check_status(status)
        check_list_limit(limit)
        return self._list_by_status(status, limit)

    def list_all(self, limit: int | None = None) -> list[AsyncJob]:
        """All rows, oldest first."""
        check_list_limit(limit)
        return self._list_all(limit)

    def list_by_plan(self, plan_id: str) -> list[AsyncJob]:
        """A plan's jobs, oldest first."""
        check_id("plan_id", plan_id)
        return self._list_by_plan(plan_id)

    def count(
        self,
        status: AsyncJobStatus | None = None,
        plan_id: str | None = None,
        at_most: int | None = None,
    ) -> int:
        """How many rows (in one status, of one plan), counting no further than at_most."""
        _optional_status(status)
        _optional_plan_id(plan_id)
        check_at_most(at_most)
        return self._count(status, plan_id, at_most)

    def list_recent(
        self,
        status: AsyncJobStatus | None = None,
        plan_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
        after: str | None = None,
    ) -> list[AsyncJob]:
        """One page of rows, newest first, optionally after a job (keyset); as count()."""
        _optional_status(status)
        check_page(limit, offset, plan_id)
        if after is not None:
            check_id("after", after)
        return self._list_recent(status, plan_id, limit, offset, after)

    # -- the worker operations -----------------------------------------------------------
    def queue(self, jobs: Sequence[AsyncJob], now: datetime) -> list[Plan] | None:
        """Every job's plan into its phase and every job row, all or nothing."""
        check_fresh_jobs(jobs)
        now = check_moment("now", now)
        return self._queue(jobs, now)

    def claim(
        self, job_id: str, worker_id: str, now: datetime, *, follow_plan: bool = False
    ) -> Claimed | None:
        """CAS queued -> running (refused if a cancel was requested), the plan with it."""
        check_job_id(job_id)
        check_worker_id(worker_id)
        now = check_moment("now", now)
        check_flag("follow_plan", follow_plan)
        return self._claim(job_id, worker_id, now, follow_plan=follow_plan)

    def finish(
        self,
        job_id: str,
        status: AsyncJobStatus,
        now: datetime,
        error: str | None = None,
        *,
        worker_id: str | None = None,
        follow_plan: bool = False,
        traceback: str | None = None,
    ) -> bool:
        """CAS running (under worker_id, if given) -> terminal, the plan with it; who won.

        A failed job's error and traceback are written by the same statement (kept only
        when the status is failed).
        """
        check_job_id(job_id)
        check_terminal_status(status)
        now = check_moment("now", now)
        check_error_message(error)
        check_worker_id(worker_id, optional=True)
        check_flag("follow_plan", follow_plan)
        check_error_traceback(traceback)
        return self._finish(
            job_id,
            status,
            now,
            error,
            worker_id=worker_id,
            follow_plan=follow_plan,
            traceback=traceback,
        )

    def claim_many(
        self, job_ids: Sequence[str], worker_id: str, now: datetime, *, follow_plan: bool = False
    ) -> list[Claimed | None]:
        """Many claims at once: per id, in order, what `claim` returns alone."""
        ids = [job_id.upper() for job_id in check_ids("job_ids", job_ids)]
        check_worker_id(worker_id)
        now = check_moment("now", now)
        check_flag("follow_plan", follow_plan)
        if len(set(ids)) != len(ids):
            raise ValueError("job_ids: an id appears twice in the batch")
        return self._claim_many(ids, worker_id, now, follow_plan=follow_plan) if ids else []

    def finish_many(
        self, finishes: Sequence[Finish], now: datetime, *, follow_plan: bool = False
    ) -> set[str]:
        """Many finishes at once, each fenced on its own worker_id; the ids that won."""
        items = check_finishes(finishes)
        now = check_moment("now", now)
        check_flag("follow_plan", follow_plan)
        cleared = [  # as finish: an error is kept only on a failed row
            f if f.status is AsyncJobStatus.failed else f._replace(error=None, traceback=None)
            for f in items
        ]
        return self._finish_many(cleared, now, follow_plan=follow_plan) if cleared else set()

    def cancel_queued(self, job_id: str, now: datetime) -> bool:
        """Cancel a job only if it is still queued; whether this call ended it."""
        check_job_id(job_id)
        now = check_moment("now", now)
        return self._cancel_queued(job_id, now)

    def cancel(self, job_id: str, now: datetime) -> CancelOutcome:
        """Cancel a queued job at once, or record the request on a running one."""
        check_job_id(job_id)
        now = check_moment("now", now)
        return self._cancel(job_id, now)

    def heartbeat(
        self, job_ids: Iterable[str], now: datetime, worker_id: str | None = None
    ) -> set[str]:
        """Stamp many running jobs at once; the ids whose work must stop."""
        ids = check_ids("job_ids", job_ids)
        now = check_moment("now", now)
        check_worker_id(worker_id, optional=True)
        return self._heartbeat(ids, now, worker_id)

    def save_progress(
        self,
        job_id: str,
        progress: float | None,
        checkpoint_json: str | None,
        worker_id: str | None = None,
    ) -> bool:
        """Record progress and (optionally) a checkpoint on a running job (fenced by worker)."""
        check_job_id(job_id)
        check_progress(progress)
        checkpoint = check_checkpoint_json(checkpoint_json)
        check_worker_id(worker_id, optional=True)
        return self._save_progress(job_id, progress, checkpoint, worker_id)

    def sight_ledger(
        self, sweep: str, max_gap: float, recovered_ago: float | None = None
    ) -> Availability:
        """Record a sweep's sighting of the ledger; since when it has been available."""
        check_sighting(sweep, max_gap, recovered_ago)
        return self._sight_ledger(sweep, max_gap, recovered_ago)

    def last_sighting(self, sweep: str) -> datetime | None:
        """When sweep last reached the ledger; None if never."""
        check_sweep(sweep)
        return self._last_sighting(sweep)

    def list_stuck(self, cutoff: datetime, limit: int = 100) -> list[AsyncJob]:
        """Running jobs whose last heartbeat is older than cutoff."""
        cutoff = check_moment("cutoff", cutoff)
        check_list_limit(limit)
        return self._list_stuck(cutoff, limit)

    def expire(self, job_id: str, cutoff: datetime, now: datetime, error: str) -> bool:
        """CAS running (heartbeat still older than cutoff) -> failed."""
        check_job_id(job_id)
        cutoff = check_moment("cutoff", cutoff)
        now = check_moment("now", now)
        check_error_message(error)
        return self._expire(job_id, cutoff, now, error)

    def fail_queued(self, job_id: str, now: datetime, error: str) -> bool:
        """CAS queued -> failed: a row no worker ever picked up."""
        check_job_id(job_id)
        now = check_moment("now", now)
        check_error_message(error)
        return self._fail_queued(job_id, now, error)

    def delete_terminal_before(self, cutoff: datetime, batch_size: int = 500) -> int:
        """Delete terminal rows finished before cutoff, in bounded batches; how many."""
        cutoff = check_moment("cutoff", cutoff)
        check_batch_size(batch_size)
        return self._delete_terminal_before(cutoff, batch_size)

    def mark_dispatched(self, job_ids: Sequence[str], now: datetime) -> int:
        """Stamp live or claimed rows as published (again); how many were stamped."""
        ids = check_ids("job_ids", job_ids)
        now = check_moment("now", now)
        return self._mark_dispatched(ids, now)

    def list_dispatch_due(
        self, never_sent_before: datetime, resent_before: datetime, limit: int = 100
    ) -> list[AsyncJob]:
        """Queued rows never published (created before never_sent_before) or possibly lost."""
        never_sent_before = check_moment("never_sent_before", never_sent_before)
        resent_before = check_moment("resent_before", resent_before)
        check_list_limit(limit)
        return self._list_dispatch_due(never_sent_before, resent_before, limit)

    # -- what a backend implements (arguments already checked) ---------------------------
    @abstractmethod
    def _add(self, job: AsyncJob) -> None: ...

    @abstractmethod
    def _get(self, job_id: str) -> AsyncJob | None: ...

    @abstractmethod
    def _update(self, job: AsyncJob) -> None: ...

    @abstractmethod
    def _remove(self, job_id: str) -> bool: ...

    @abstractmethod
    def _list_by_status(self, status: AsyncJobStatus, limit: int | None) -> list[AsyncJob]: ...

    @abstractmethod
    def _list_all(self, limit: int | None) -> list[AsyncJob]: ...

    @abstractmethod
    def _list_by_plan(self, plan_id: str) -> list[AsyncJob]: ...

    @abstractmethod
    def _count(
        self, status: AsyncJobStatus | None, plan_id: str | None, at_most: int | None
    ) -> int: ...

    @abstractmethod
    def _list_recent(
        self,
        status: AsyncJobStatus | None,
        plan_id: str | None,
        limit: int,
        offset: int,
        after: str | None,
    ) -> list[AsyncJob]: ...

    @abstractmethod
    def _queue(self, jobs: Sequence[AsyncJob], now: datetime) -> list[Plan] | None: ...

    @abstractmethod
    def _claim(
        self, job_id: str, worker_id: str, now: datetime, *, follow_plan: bool
    ) -> Claimed | None: ...

    @abstractmethod
    def _finish(
        self,
        job_id: str,
        status: AsyncJobStatus,
        now: datetime,
        error: str | None,
        *,
        worker_id: str | None,
        follow_plan: bool,
        traceback: str | None,
    ) -> bool: ...

    @abstractmethod
    def _claim_many(
        self, job_ids: list[str], worker_id: str, now: datetime, *, follow_plan: bool
    ) -> list[Claimed | None]: ...

    @abstractmethod
    def _finish_many(
        self, finishes: list[Finish], now: datetime, *, follow_plan: bool
    ) -> set[str]: ...

    @abstractmethod
    def _cancel_queued(self, job_id: str, now: datetime) -> bool: ...

    @abstractmethod
    def _cancel(self, job_id: str, now: datetime) -> CancelOutcome: ...

    @abstractmethod
    def _heartbeat(self, job_ids: list[str], now: datetime, worker_id: str | None) -> set[str]: ...

    @abstractmethod
    def _save_progress(
        self,
        job_id: str,
        progress: float | None,
        checkpoint_json: str | None,
        worker_id: str | None,
    ) -> bool: ...

    @abstractmethod
    def _sight_ledger(
        self, sweep: str, max_gap: float, recovered_ago: float | None
    ) -> Availability: ...

    @abstractmethod
    def _last_sighting(self, sweep: str) -> datetime | None: ...

    @abstractmethod
    def _list_stuck(self, cutoff: datetime, limit: int) -> list[AsyncJob]: ...

    @abstractmethod
    def _expire(self, job_id: str, cutoff: datetime, now: datetime, error: str) -> bool: ...

    @abstractmethod
    def _fail_queued(self, job_id: str, now: datetime, error: str) -> bool: ...

    @abstractmethod
    def _delete_terminal_before(self, cutoff: datetime, batch_size: int) -> int: ...

    @abstractmethod
    def _mark_dispatched(self, job_ids: list[str], now: datetime) -> int: ...

    @abstractmethod
    def _list_dispatch_due(
        self, never_sent_before: datetime, resent_before: datetime, limit: int
    ) -> list[AsyncJob]: ...


class CheckedPlanStore(ABC):
    """The PlanStore port (domain/ports.py): checks here, storage in the `_methods`."""

    @property
    @abstractmethod
    def ledger(self) -> Ledger:
        """The ledger this store writes in; see `domain.ports.one_ledger`."""

    @abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """Group the calls inside into one atomic unit (shared with the job store)."""

    def add(self, plan: Plan) -> None:
        """Insert a new plan; a duplicate id is a ValueError."""
        check_plan(plan)
        self._add(plan)

    def add_many(self, plans: Sequence[Plan]) -> None:
        """Insert new plans, all or nothing (one statement on SQL); a duplicate is a ValueError."""
        self._add_many(check_new_plans(plans))

    def get(self, plan_id: str) -> Plan | None:
        """The plan, or None."""
        check_id("plan_id", plan_id)
        return self._get(plan_id)

    def update(self, plan: Plan) -> None:
        """Save a plan read earlier and bump its version; ConcurrentUpdateError if stale."""
        check_plan(plan)
        self._update(plan)

    def list_all(self, limit: int | None = None) -> list[Plan]:
        """Plans, oldest first."""
        check_list_limit(limit)
        return self._list_all(limit)

    def list_recent(self, limit: int = 50, offset: int = 0, after: str | None = None) -> list[Plan]:
        """One page of plans, newest first (listings for people), after a plan (keyset)."""
        check_page(limit, offset)
        if after is not None:
            check_id("after", after)
        return self._list_recent(limit, offset, after)

    def count(self, at_most: int | None = None) -> int:
        """How many plans, counting no further than at_most."""
        check_at_most(at_most)
        return self._count(at_most)

    def remove(self, plan_id: str) -> bool:
        """Delete a plan; whether it existed."""
        check_id("plan_id", plan_id)
        return self._remove(plan_id)

    @abstractmethod
    def _add(self, plan: Plan) -> None: ...

    @abstractmethod
    def _add_many(self, plans: list[Plan]) -> None: ...

    @abstractmethod
    def _get(self, plan_id: str) -> Plan | None: ...

    @abstractmethod
    def _update(self, plan: Plan) -> None: ...

    @abstractmethod
    def _list_all(self, limit: int | None) -> list[Plan]: ...

    @abstractmethod
    def _list_recent(self, limit: int, offset: int, after: str | None) -> list[Plan]: ...

    @abstractmethod
    def _count(self, at_most: int | None) -> int: ...

    @abstractmethod
    def _remove(self, plan_id: str) -> bool: ...

    def list_awaiting(self, limit: int = 100) -> list[Plan]:
        """Plans waiting at their gate with an approval timeout, longest waiting first."""
        check_list_limit(limit)
        return self._list_awaiting(limit)

    def gate_summary(self, at_most: int = 10_000) -> GateSummary:
        """How many plans wait at a gate (counting no further than at_most), the oldest since."""
        return self._gate_summary(check_cap(at_most))

    def add_event(self, event: PlanEvent) -> None:
        """Append one event to its plan's trail (PlanNotFoundError if the plan is gone)."""
        check_event(event)
        self._add_event(event)

    def list_events(self, plan_id: str, limit: int = 500) -> list[PlanEvent]:
        """A plan's events, oldest first."""
        check_id("plan_id", plan_id)
        check_list_limit(limit)
        return self._list_events(plan_id, limit)

    def delete_events_before(self, cutoff: datetime, batch_size: int = 500) -> int:
        """Delete events older than cutoff, in bounded batches; how many."""
        cutoff = check_moment("cutoff", cutoff)
        check_batch_size(batch_size)
        return self._delete_events_before(cutoff, batch_size)

    def add_deliveries(self, deliveries: Sequence[Delivery]) -> None:
        """Insert outbox rows, in the caller's transaction."""
        self._add_deliveries(check_deliveries(deliveries))

    def claim_deliveries(
        self, now: datetime, lease_until: datetime, limit: int = 50
    ) -> list[Delivery]:
        """Lease the due rows until lease_until, counting the attempt; the rows leased."""
        now, lease_until = check_moment("now", now), check_moment("lease_until", lease_until)
        check_list_limit(limit)
        return self._claim_deliveries(now, lease_until, limit or 0)

    def delivered(self, delivery_id: str) -> bool:
        """Drop a delivered row."""
        check_id("delivery_id", delivery_id)
        return self._delivered(delivery_id)

    def delivery_failed(self, delivery_id: str, error: str, retry_at: datetime | None) -> bool:
        """Note a failed try: due again at retry_at, or given up (None)."""
        check_id("delivery_id", delivery_id)
        when = None if retry_at is None else check_moment("retry_at", retry_at)
        text = check_error_message(error[:MAX_ERROR_LENGTH] if isinstance(error, str) else error)
        return self._delivery_failed(delivery_id, text or "", when)

    def list_deliveries(self, plan_id: str | None = None, limit: int = 100) -> list[Delivery]:
        """Outbox rows, oldest first."""
        if plan_id is not None:
            check_id("plan_id", plan_id)
        check_list_limit(limit)
        return self._list_deliveries(plan_id, limit or 0)

    def delete_deliveries_before(self, cutoff: datetime, batch_size: int = 500) -> int:
        """Delete given-up rows made before cutoff, in bounded batches; how many."""
        cutoff = check_moment("cutoff", cutoff)
        check_batch_size(batch_size)
        return self._delete_deliveries_before(cutoff, batch_size)

    @abstractmethod
    def _add_deliveries(self, deliveries: list[Delivery]) -> None: ...

    @abstractmethod
    def _claim_deliveries(
        self, now: datetime, lease_until: datetime, limit: int
    ) -> list[Delivery]: ...

    @abstractmethod
    def _delivered(self, delivery_id: str) -> bool: ...

    @abstractmethod
    def _delivery_failed(self, delivery_id: str, error: str, retry_at: datetime | None) -> bool: ...

    @abstractmethod
    def _list_deliveries(self, plan_id: str | None, limit: int) -> list[Delivery]: ...

    @abstractmethod
    def _delete_deliveries_before(self, cutoff: datetime, batch_size: int) -> int: ...

    @abstractmethod
    def _list_awaiting(self, limit: int | None) -> list[Plan]: ...

    @abstractmethod
    def _gate_summary(self, at_most: int) -> GateSummary: ...

    @abstractmethod
    def _add_event(self, event: PlanEvent) -> None: ...

    @abstractmethod
    def _list_events(self, plan_id: str, limit: int) -> list[PlanEvent]: ...

    @abstractmethod
    def _delete_events_before(self, cutoff: datetime, batch_size: int) -> int: ...
