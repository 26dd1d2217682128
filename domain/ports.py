"""The ledger's ports: small protocols with an in-memory and a SQL implementation each.

At the end, `LedgerParts`: the ports one ledger writes through and what it calls after a
commit, shared by `JobLedger` (the job path) and `PipelineLedger` (a plan's pipeline), so
the pipeline half writes through the stores it is given, not through a pointer back to the
job half: neither module imports the other's class.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple, Protocol, runtime_checkable

from planq.domain.availability import Availability
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.pipeline import GateSummary, PlanEvent
from planq.domain.plans import Plan
from planq.domain.principals import Principal
from planq.domain.redaction import BUILTIN, Redactor
from planq.domain.webhooks import NO_WEBHOOKS, Delivery, WebhookPolicy

_logger = logging.getLogger("planq.ledger")


class CancelOutcome(StrEnum):
    """What a cancel request did to the ledger row."""

    cancelled = "cancelled"  #: was queued; now cancelled and will never start
    requested = "requested"  #: is running; the request is recorded, the token must trip
    already_requested = "already_requested"  #: running, and a request was already recorded
    already_terminal = "already_terminal"
    not_found = "not_found"

    @property
    def accepted(self) -> bool:
        """Whether the cancel took (or was already on its way)."""
        return self in {
            CancelOutcome.cancelled,
            CancelOutcome.requested,
            CancelOutcome.already_requested,
        }


class Claimed(NamedTuple):
    """A claimed job and its plan as the claim left it (None without plans, or if gone)."""

    job: AsyncJob
    plan: Plan | None


class Finish(NamedTuple):
    """One job's finish in a batch (`JobStore.finish_many`): what `finish` takes for one job.

    worker_id None: unfenced, as `finish(worker_id=None)`. error and traceback are kept
    only when the status is failed.
    """

    job_id: str
    status: AsyncJobStatus
    error: str | None = None
    traceback: str | None = None
    worker_id: str | None = None


class Ledger(Protocol):
    """The transaction scope a store writes in (a database, or a memory ledger's lock).

    A job store and a plan store whose `ledger` is the same object are ONE ledger: the job
    store's queue() moves those plans in the same statement. Stores built apart (the
    spec's `InMemoryPlanStore()` beside a job store) are two, and are composed through
    their own operations instead (domain/lifecycle.py).
    """

    def transaction(self) -> AbstractContextManager[None]:
        """Group the calls of every store on this ledger into one atomic unit."""


def one_ledger(jobs: JobStore, plans: PlanStore) -> bool:
    """Whether jobs and plans are one ledger (the job store moves these plans itself)."""
    return jobs.ledger is plans.ledger


@runtime_checkable
class JobStore(Protocol):
    """The job ledger. On SQL every worker operation is one statement."""

    @property
    def ledger(self) -> Ledger:
        """The ledger this store writes in; see `one_ledger`."""

    def transaction(self) -> AbstractContextManager[None]:
        """Group the calls inside into one atomic unit (shared with the plan store)."""

    def add(self, job: AsyncJob) -> None:
        """Insert a new row; a duplicate id is a ValueError."""

    def get(self, job_id: str) -> AsyncJob | None:
        """The row, or None."""

    def update(self, job: AsyncJob) -> None:
        """Overwrite an existing row (not for workers: they use the CAS operations)."""

    def remove(self, job_id: str) -> bool:
        """Delete a row; whether it existed."""

    def list_by_status(self, status: AsyncJobStatus, limit: int | None = None) -> list[AsyncJob]:
        """Rows in one status, oldest first."""

    def list_all(self, limit: int | None = None) -> list[AsyncJob]:
        """All rows, oldest first."""

    def list_by_plan(self, plan_id: str) -> list[AsyncJob]:
        """A plan's jobs, oldest first."""

    def count(
        self,
        status: AsyncJobStatus | None = None,
        plan_id: str | None = None,
        at_most: int | None = None,
    ) -> int:
        """How many rows (in one status, of one plan), counting no further than at_most.

        With at_most the count reads at most that many index entries (a bounded total for
        a listing: "more than 10,000"); without it, every matching row is counted.
        """

    def list_recent(
        self,
        status: AsyncJobStatus | None = None,
        plan_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
        after: str | None = None,
    ) -> list[AsyncJob]:
        """One page of rows, newest first by (created_at, job_id); filters as count().

        after (a job id) pages by key: only rows older than that job in the listing's
        order (none if it is gone). A row the domain cannot read (a corrupt payload) is
        listed as an `UnreadableJob` naming why, so one bad row never hides the page.
        """

    def queue(self, jobs: Sequence[AsyncJob], now: datetime) -> list[Plan] | None:
        """Move each job's plan to <phase>/QUEUED (domain.transitions) and insert the jobs.

        All or nothing, one statement on PostgreSQL: None (nothing written) if any plan is
        missing or not in a state its phase may be queued from.
        """

    def claim(
        self, job_id: str, worker_id: str, now: datetime, *, follow_plan: bool = False
    ) -> Claimed | None:
        """CAS queued -> running (refused if a cancel was requested), the plan with it.

        None if this caller lost (another delivery owns it, it ended, or it is unknown).
        """

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

        A failed job keeps error and traceback, written by the same statement.
        """

    def claim_many(
        self, job_ids: Sequence[str], worker_id: str, now: datetime, *, follow_plan: bool = False
    ) -> list[Claimed | None]:
        """Many claims at once (group commit): per id, in order, what `claim` returns alone.

        Each row is its own compare-and-set (the single claim's WHERE); one statement on
        PostgreSQL, one transaction on SQLite. An id may appear once.
        """

    def finish_many(
        self, finishes: Sequence[Finish], now: datetime, *, follow_plan: bool = False
    ) -> set[str]:
        """Many finishes at once (group commit); the ids that won, as `finish` each alone.

        Each row is fenced on its own worker_id (only a row still running under it moves);
        one statement on PostgreSQL, one transaction on SQLite. A job id may appear once.
        """

    def cancel_queued(self, job_id: str, now: datetime) -> bool:
        """Cancel a job only if it is still queued; whether this call ended it."""

    def cancel(self, job_id: str, now: datetime) -> CancelOutcome:
        """Cancel a queued job at once, or record the request on a running one."""

    def heartbeat(
        self, job_ids: Iterable[str], now: datetime, worker_id: str | None = None
    ) -> set[str]:
        """Stamp many running jobs at once; the ids whose work must stop.

        That is those with a cancel request and, given worker_id, those no longer running
        under it (expired, taken over): the fenced process learns it lost them.
        """

    def save_progress(
        self,
        job_id: str,
        progress: float | None,
        checkpoint_json: str | None,
        worker_id: str | None = None,
    ) -> bool:
        """Record progress and (optionally) a checkpoint on a running job (fenced by worker)."""

    def sight_ledger(
        self, sweep: str, max_gap: float, recovered_ago: float | None = None
    ) -> Availability:
        """Record a sweep's sighting of the ledger, atomically (two sweepers queue on it).

        Returns the ledger's now and since when it has been available by the rule of
        `domain.availability.next_availability` (max_gap: the sweep's allowed gap).
        """

    def last_sighting(self, sweep: str) -> datetime | None:
        """When sweep last reached the ledger (its last run that could); None if never."""

    def list_stuck(self, cutoff: datetime, limit: int = 100) -> list[AsyncJob]:
        """Running jobs whose last heartbeat is older than cutoff."""

    def expire(self, job_id: str, cutoff: datetime, now: datetime, error: str) -> bool:
        """CAS running (heartbeat still older than cutoff) -> failed."""

    def fail_queued(self, job_id: str, now: datetime, error: str) -> bool:
        """CAS queued -> failed: a row no worker ever picked up."""

    def delete_terminal_before(self, cutoff: datetime, batch_size: int = 500) -> int:
        """Delete terminal rows finished before cutoff, in bounded batches; how many."""

    def mark_dispatched(self, job_ids: Sequence[str], now: datetime) -> int:
        """Stamp rows as published (again), one statement; how many were stamped.

        Live rows, and ended rows a worker claimed (the stamp may trail a fast worker); not
        a row that ended unclaimed.
        """

    def list_dispatch_due(
        self, never_sent_before: datetime, resent_before: datetime, limit: int = 100
    ) -> list[AsyncJob]:
        """Queued rows never published (created before never_sent_before) or possibly lost."""


@runtime_checkable
class PlanStore(Protocol):
    """Plans, updated with optimistic concurrency."""

    @property
    def ledger(self) -> Ledger:
        """The ledger this store writes in; see `one_ledger`."""

    def transaction(self) -> AbstractContextManager[None]:
        """Group the calls inside into one atomic unit (shared with the job store)."""

    def add(self, plan: Plan) -> None:
        """Insert a new plan; a duplicate id is a ValueError."""

    def add_many(self, plans: Sequence[Plan]) -> None:
        """Insert new plans, all or nothing (one statement on SQL); a duplicate is a ValueError."""

    def get(self, plan_id: str) -> Plan | None:
        """The plan, or None."""

    def update(self, plan: Plan) -> None:
        """Save a plan read earlier and bump its version; ConcurrentUpdateError if stale."""

    def list_all(self, limit: int | None = None) -> list[Plan]:
        """Plans, oldest first."""

    def list_recent(self, limit: int = 50, offset: int = 0, after: str | None = None) -> list[Plan]:
        """One page of plans, newest first by (created_at, plan_id) (listings for people).

        after (a plan id) pages by key, as JobStore.list_recent: only plans older than that
        one (none if it is gone).
        """

    def count(self, at_most: int | None = None) -> int:
        """How many plans, counting no further than at_most (see JobStore.count)."""

    def remove(self, plan_id: str) -> bool:
        """Delete a plan; whether it existed."""

    def list_awaiting(self, limit: int = 100) -> list[Plan]:
        """Plans waiting at their gate with an approval timeout, longest waiting first."""

    def gate_summary(self, at_most: int = 10_000) -> GateSummary:
        """How many plans wait at a gate (counting no further than at_most), the oldest since."""

    def add_event(self, event: PlanEvent) -> None:
        """Append one event to its plan's audit trail (PlanNotFoundError if the plan is gone)."""

    def list_events(self, plan_id: str, limit: int = 500) -> list[PlanEvent]:
        """A plan's events, oldest first."""

    def delete_events_before(self, cutoff: datetime, batch_size: int = 500) -> int:
        """Delete events older than cutoff (the jobs' TTL), in bounded batches; how many."""

    # -- the webhook outbox (domain/webhooks.py) -------------------------------------------
    def add_deliveries(self, deliveries: Sequence[Delivery]) -> None:
        """Insert outbox rows, in the caller's transaction (the event's)."""

    def claim_deliveries(
        self, now: datetime, lease_until: datetime, limit: int = 50
    ) -> list[Delivery]:
        """Lease the due rows (oldest first) until lease_until, counting the attempt.

        Two delivering processes at once lease different rows (PostgreSQL: SKIP LOCKED); a
        process that dies holding a lease leaves its rows due again when the lease ends.
        """

    def delivered(self, delivery_id: str) -> bool:
        """Drop a delivered row; whether it was there."""

    def delivery_failed(self, delivery_id: str, error: str, retry_at: datetime | None) -> bool:
        """Note a failed try: due again at retry_at, or given up (None); whether it was there."""

    def list_deliveries(self, plan_id: str | None = None, limit: int = 100) -> list[Delivery]:
        """Outbox rows (a plan's, or all), oldest first: what waits, and what was given up."""

    def delete_deliveries_before(self, cutoff: datetime, batch_size: int = 500) -> int:
        """Delete given-up rows made before cutoff (the jobs' TTL), in batches; how many."""


def iter_batches(items: Iterable[str], size: int) -> Iterator[list[str]]:
    """Split ids into lists of at most size (for bounded IN clauses)."""
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class PrincipalStore(Protocol):
    """The admin API's principals: a token is found by its hash, never stored itself."""

    def add(self, principal: Principal, token_hash: str) -> None:
        """Insert a principal; PrincipalError if the name is taken."""

    def find(self, token_hash: str) -> Principal | None:
        """The principal this token hash stands for (revoked or expired ones too), or None."""

    def get(self, name: str) -> Principal | None:
        """The principal of this name, or None."""

    def list(self, limit: int = 500) -> list[Principal]:
        """Principals by name."""

    def revoke(self, name: str) -> bool:
        """Mark it revoked now; False if no active principal has this name."""

    def touch(self, name: str, at: datetime, every: float) -> None:
        """Record a use at `at`, writing only if the last one is older than `every` seconds."""

    def rotate(self, name: str, token_hash: str) -> bool:
        """Replace an active principal's token hash; False if none has this name."""


#: Called after commit with the jobs a pipeline queued (the runtime's publish).
Enqueue = Callable[[Sequence[AsyncJob]], None]
#: Called after commit when a wait at a gate ended: (approved|rejected|expired, since when).
GateObserver = Callable[[str, datetime], None]


@dataclass
class LedgerParts:
    """The stores one ledger writes in, and what it calls after a commit."""

    jobs: JobStore
    plans: PlanStore | None = None
    #: Every text the ledger keeps passes through it (planq's: built from settings).
    redactor: Redactor = BUILTIN
    #: Publishes a job a pipeline queued, after its transaction commits (the normal path:
    #: the runtime's publish; the dispatch relay covers a process that dies first).
    enqueue: Enqueue | None = None
    #: Told of every wait at an approval gate that ended, after the decision commits.
    on_gate_decided: GateObserver | None = None
    #: Who hears of a pipeline's events (an outbox row per receiver, with the event).
    webhooks: WebhookPolicy = NO_WEBHOOKS

    def publish_committed(self, jobs: Sequence[AsyncJob]) -> bool:
        """Publish jobs whose rows just committed; whether their messages went out.

        The one "publish after commit": a failure is logged, never raised, since the rows
        are durable and the dispatch relay sends them after its grace.
        """
        if self.enqueue is None or not jobs:
            return False
        try:
            self.enqueue(jobs)
        except Exception:  # the rows are durable; the dispatch relay publishes them later
            _logger.exception("%d job(s) committed but not published; the relay will", len(jobs))
            return False
        return True
