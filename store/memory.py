"""In-memory ledger with the same behaviour as the SQL one: for tests and embedded use."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

from planq.domain.availability import Availability
from planq.domain.errors import ConcurrentUpdateError, DuplicateJobError, PlanNotFoundError
from planq.domain.jobs import TERMINAL_STATUSES, AsyncJob, AsyncJobStatus
from planq.domain.pipeline import GateSummary, PlanEvent
from planq.domain.plans import PipelineState, Plan
from planq.domain.ports import CancelOutcome, Claimed, Finish, Ledger
from planq.domain.transitions import (
    CANCEL_QUEUED,
    CLAIM,
    EXPIRE,
    GATED,
    PLAN_STATUS_FOR_JOB,
    UNDELIVERABLE,
    JobMove,
    finish_move,
    phase_queue_move,
)
from planq.domain.webhooks import Delivery
from planq.store.availability import MemorySightings
from planq.store.checked import CheckedJobStore, CheckedPlanStore


class _Shared:
    """The lock and transaction depth that a memory job store and plan store share."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.depth = 0
        self.tables: list[dict[str, Any]] = []
        self.plans: dict[str, Plan] | None = None  #: the plan store's rows, once it is made

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.lock:
            snapshot = [dict(t) for t in self.tables] if self.depth == 0 else None
            self.depth += 1
            try:
                yield
            except BaseException:
                if snapshot is not None:
                    for table, saved in zip(self.tables, snapshot, strict=True):
                        table.clear()
                        table.update(saved)
                raise
            finally:
                self.depth -= 1


class InMemoryJobStore(CheckedJobStore):
    """Thread-safe job ledger in a dict; stores copies so callers cannot alter rows."""

    def __init__(self, shared: _Shared | None = None) -> None:
        self._shared = shared or _Shared()
        self._rows: dict[str, AsyncJob] = {}
        self._shared.tables.append(self._rows)
        self._sightings = MemorySightings()

    @property
    def ledger(self) -> Ledger:
        """The lock and tables this store shares (one ledger with in_memory_ledger's pair)."""
        return self._shared

    def transaction(self) -> Any:
        """Hold the shared lock; on an exception the rows are restored."""
        return self._shared.transaction()

    def _sorted(self, rows: Iterable[AsyncJob], limit: int | None) -> list[AsyncJob]:
        out = sorted(rows, key=lambda j: (j.created_at, j.job_id))
        return [j.model_copy() for j in (out if limit is None else out[:limit])]

    def _add(self, job: AsyncJob) -> None:
        """Insert a new row; a duplicate id (or a second retry of one job) is refused."""
        with self._shared.lock:
            if job.job_id in self._rows:
                raise DuplicateJobError(job.job_id)
            if job.retry_of and any(r.retry_of == job.retry_of for r in self._rows.values()):
                raise DuplicateJobError(job.job_id)
            self._rows[job.job_id] = job.model_copy()

    def _get(self, job_id: str) -> AsyncJob | None:
        """The row, or None."""
        with self._shared.lock:
            row = self._rows.get(job_id.upper())
            return row.model_copy() if row else None

    def _update(self, job: AsyncJob) -> None:
        """Overwrite an existing row."""
        with self._shared.lock:
            if job.job_id not in self._rows:
                raise ValueError(f"no job with id {job.job_id!r} to update")
            self._rows[job.job_id] = job.model_copy()

    def _remove(self, job_id: str) -> bool:
        """Delete a row."""
        with self._shared.lock:
            return self._rows.pop(job_id.upper(), None) is not None

    def _list_by_status(self, status: AsyncJobStatus, limit: int | None) -> list[AsyncJob]:
        """Rows in one status, oldest first."""
        with self._shared.lock:
            return self._sorted((j for j in self._rows.values() if j.status is status), limit)

    def _list_all(self, limit: int | None) -> list[AsyncJob]:
        """All rows, oldest first."""
        with self._shared.lock:
            return self._sorted(self._rows.values(), limit)

    def _list_by_plan(self, plan_id: str) -> list[AsyncJob]:
        """A plan's jobs, oldest first."""
        with self._shared.lock:
            return self._sorted((j for j in self._rows.values() if j.plan_id == plan_id), None)

    def _count(
        self, status: AsyncJobStatus | None, plan_id: str | None, at_most: int | None
    ) -> int:
        """How many rows (in one status, of one plan), at most at_most."""
        with self._shared.lock:
            n = sum(1 for j in self._rows.values() if _wanted(j, status, plan_id))
        return n if at_most is None else min(n, at_most)

    def _list_recent(
        self,
        status: AsyncJobStatus | None,
        plan_id: str | None,
        limit: int,
        offset: int,
        after: str | None,
    ) -> list[AsyncJob]:
        """One page of rows, newest first by (created_at, job_id), after a job; as count()."""
        with self._shared.lock:
            rows = [j for j in self._rows.values() if _wanted(j, status, plan_id)]
            cursor = None if after is None else self._rows.get(after.upper())
        return _newest_page(rows, _key, after, cursor, limit, offset)

    # -- worker operations (each atomic under the lock, like one SQL statement) --------
    def _moved(self, row: AsyncJob | None, move: JobMove, **values: Any) -> bool:
        """A job CAS of domain/transitions.py, as SQL runs it: whether row was in a source."""
        if row is None or row.status not in move.sources:
            return False
        self._rows[row.job_id] = row.model_copy(update={"status": move.to, **values})
        return True

    def _follow(self, job: AsyncJob, move: JobMove, now: datetime) -> Plan | None:
        """The plan CAS that goes with a job move; the plan as it now stands."""
        plans = self._shared.plans
        plan = None if plans is None else plans.get(job.plan_id)
        if plans is None or plan is None:
            return None
        if plan.phase is job.phase and plan.status in move.plan_sources:
            plan = plan.model_copy(
                update={"status": move.plan_to, "version": plan.version + 1, "updated_at": now}
            )
            plans[plan.plan_id] = plan
        return plan.model_copy()

    def _queue(self, jobs: Sequence[AsyncJob], now: datetime) -> list[Plan] | None:
        """Every plan into its phase and every job row, all or nothing."""
        with self._shared.lock:
            plans = self._shared.plans
            allowed = phase_queue_move(jobs[0].phase).sources
            current = [None if plans is None else plans.get(j.plan_id) for j in jobs]
            if any(
                p is None or (p.phase, p.status) not in allowed or p.pipeline_state is GATED
                for p in current
            ):
                return None
            if any(j.job_id in self._rows for j in jobs):
                raise DuplicateJobError(", ".join(j.job_id for j in jobs)[:200])
            assert plans is not None
            moved: list[Plan] = []
            for job, plan in zip(jobs, current, strict=True):
                assert plan is not None
                new = plan.model_copy(
                    update={
                        "phase": job.phase,
                        "status": PLAN_STATUS_FOR_JOB[AsyncJobStatus.queued],
                        "version": plan.version + 1,
                        "updated_at": now,
                    }
                )
                plans[new.plan_id] = new
                self._rows[job.job_id] = job.model_copy()
                moved.append(new.model_copy())
            return moved

    def _claim(
        self, job_id: str, worker_id: str, now: datetime, *, follow_plan: bool
    ) -> Claimed | None:
        """CAS queued -> running unless a cancel was requested; the plan with it."""
        with self._shared.lock:
            row = self._rows.get(job_id.upper())
            if row is None or row.status not in CLAIM.sources or row.cancel_requested_at:
                return None
            row = row.model_copy(
                update={
                    "status": CLAIM.to,
                    "worker_id": worker_id,
                    "started_at": now,
                    "last_heartbeat": now,
                }
            )
            self._rows[row.job_id] = row
            plan = self._follow(row, CLAIM, now) if follow_plan else None
            return Claimed(row.model_copy(), plan)

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
    ) -> bool:
        """CAS running (under worker_id, if given) -> terminal; the plan with it."""
        move = finish_move(status)
        with self._shared.lock:
            row = self._rows.get(job_id)
            if row is None or row.status not in move.sources:
                return False
            if worker_id is not None and row.worker_id != worker_id:
                return False
            update: dict[str, Any] = {"status": status, "finished_at": now}
            if status is AsyncJobStatus.failed:
                update["error_message"] = error
                update["error_traceback"] = traceback
            row = row.model_copy(update=update)
            self._rows[job_id] = row
            if follow_plan:
                self._follow(row, move, now)
            return True

    def _claim_many(
        self, job_ids: list[str], worker_id: str, now: datetime, *, follow_plan: bool
    ) -> list[Claimed | None]:
        """Each id's claim, in order, all under the lock (one atomic unit, like a statement)."""
        with self._shared.lock:
            return [
                self._claim(job_id, worker_id, now, follow_plan=follow_plan) for job_id in job_ids
            ]

    def _finish_many(self, finishes: list[Finish], now: datetime, *, follow_plan: bool) -> set[str]:
        """Each finish, fenced on its own worker_id, all under the lock; the ids that won."""
        with self._shared.lock:
            return {
                f.job_id
                for f in finishes
                if self._finish(
                    f.job_id,
                    f.status,
                    now,
                    f.error,
                    worker_id=f.worker_id,
                    follow_plan=follow_plan,
                    traceback=f.traceback,
                )
            }

    def _cancel_queued(self, job_id: str, now: datetime) -> bool:
        """Cancel a queued job only; whether this call ended it."""
        with self._shared.lock:
            row = self._rows.get(job_id.upper())
            return self._moved(row, CANCEL_QUEUED, finished_at=now, cancel_requested_at=now)

    def _cancel(self, job_id: str, now: datetime) -> CancelOutcome:
        """Cancel queued at once; record the request on running."""
        with self._shared.lock:
            if self._cancel_queued(job_id, now):
                return CancelOutcome.cancelled
            row = self._rows.get(job_id.upper())
            if row is None:
                return CancelOutcome.not_found
            if row.status is AsyncJobStatus.running:
                if row.cancel_requested_at is not None:
                    return CancelOutcome.already_requested
                self._rows[row.job_id] = row.model_copy(update={"cancel_requested_at": now})
                return CancelOutcome.requested
            return CancelOutcome.already_terminal

    def _owned(self, job_id: str, worker_id: str | None) -> AsyncJob | None:
        row = self._rows.get(job_id)
        if row is None or row.status is not AsyncJobStatus.running:
            return None
        return row if worker_id is None or row.worker_id == worker_id else None

    def _heartbeat(self, job_ids: Iterable[str], now: datetime, worker_id: str | None) -> set[str]:
        """Stamp running rows; the ids to stop (cancel requested, or no longer ours)."""
        stop: set[str] = set()
        with self._shared.lock:
            for job_id in job_ids:
                row = self._owned(job_id, worker_id)
                if row is None:
                    if worker_id is not None:
                        stop.add(job_id)
                    continue
                self._rows[job_id] = row.model_copy(update={"last_heartbeat": now})
                if row.cancel_requested_at is not None:
                    stop.add(job_id)
        return stop

    def _save_progress(
        self,
        job_id: str,
        progress: float | None,
        checkpoint_json: str | None,
        worker_id: str | None,
    ) -> bool:
        """Record progress/checkpoint on a running row (under worker_id, if given)."""
        with self._shared.lock:
            row = self._owned(job_id, worker_id)
            if row is None:
                return False
            update: dict[str, Any] = {"progress": progress}
            if checkpoint_json is not None:
                update["checkpoint_json"] = checkpoint_json
            self._rows[job_id] = row.model_copy(update=update)
            return True

    def _sight_ledger(
        self, sweep: str, max_gap: float, recovered_ago: float | None
    ) -> Availability:
        """Record a sweep's sighting (no server to restart: its own process's clock)."""
        return self._sightings.sight(sweep, max_gap, recovered_ago)

    def _last_sighting(self, sweep: str) -> datetime | None:
        """When sweep last sighted this ledger."""
        return self._sightings.last(sweep)

    def _is_stuck(self, row: AsyncJob, cutoff: datetime) -> bool:
        return row.status is AsyncJobStatus.running and (
            row.last_heartbeat is None or row.last_heartbeat < cutoff
        )

    def _list_stuck(self, cutoff: datetime, limit: int) -> list[AsyncJob]:
        """Running rows with a heartbeat older than cutoff."""
        with self._shared.lock:
            return self._sorted(
                (j for j in self._rows.values() if self._is_stuck(j, cutoff)), limit
            )

    def _expire(self, job_id: str, cutoff: datetime, now: datetime, error: str) -> bool:
        """CAS stuck running -> failed."""
        with self._shared.lock:
            row = self._rows.get(job_id)
            if row is None or not self._is_stuck(row, cutoff):
                return False
            return self._moved(row, EXPIRE, finished_at=now, error_message=error)

    def _fail_queued(self, job_id: str, now: datetime, error: str) -> bool:
        """CAS queued -> failed."""
        with self._shared.lock:
            row = self._rows.get(job_id)
            return self._moved(row, UNDELIVERABLE, finished_at=now, error_message=error)

    def _delete_terminal_before(self, cutoff: datetime, batch_size: int) -> int:
        """Delete old terminal rows."""
        with self._shared.lock:
            doomed = [
                j.job_id
                for j in self._rows.values()
                if j.status in TERMINAL_STATUSES and j.finished_at and j.finished_at < cutoff
            ]
            for job_id in doomed:
                del self._rows[job_id]
            return len(doomed)

    def _mark_dispatched(self, job_ids: Sequence[str], now: datetime) -> int:
        """Stamp live or claimed rows as published; how many (see the SQL store's)."""
        stamped = 0
        with self._shared.lock:
            for job_id in job_ids:
                row = self._rows.get(job_id)
                if row is None or (row.is_terminal and row.started_at is None):
                    continue  # ended unclaimed: its message, if any, reached no worker
                self._rows[job_id] = row.model_copy(
                    update={"dispatched_at": now, "dispatch_count": row.dispatch_count + 1}
                )
                stamped += 1
        return stamped

    def _list_dispatch_due(
        self, never_sent_before: datetime, resent_before: datetime, limit: int
    ) -> list[AsyncJob]:
        """Queued rows never published, or whose message may be lost."""
        with self._shared.lock:
            due = (
                j
                for j in self._rows.values()
                if j.status is AsyncJobStatus.queued
                and j.cancel_requested_at is None
                and (
                    (j.dispatched_at is None and j.created_at < never_sent_before)
                    or (j.dispatched_at is not None and j.dispatched_at < resent_before)
                )
            )
            return self._sorted(due, limit)


class InMemoryPlanStore(CheckedPlanStore):
    """Plans in a dict, with the optimistic version check the SQL store does."""

    def __init__(self, shared: _Shared | None = None) -> None:
        self._shared = shared or _Shared()
        self._rows: dict[str, Plan] = {}
        self._shared.tables.append(self._rows)
        self._shared.plans = self._rows
        self._events: dict[str, PlanEvent] = {}
        self._shared.tables.append(self._events)
        self._outbox: dict[str, Delivery] = {}
        self._shared.tables.append(self._outbox)

    @property
    def ledger(self) -> Ledger:
        """The lock and tables this store shares (one ledger with in_memory_ledger's pair)."""
        return self._shared

    def transaction(self) -> Any:
        """Hold the shared lock; on an exception the rows are restored."""
        return self._shared.transaction()

    def _add(self, plan: Plan) -> None:
        """Insert a new plan."""
        with self._shared.lock:
            if plan.plan_id in self._rows:
                raise ValueError(f"plan {plan.plan_id!r} already exists")
            self._rows[plan.plan_id] = plan.model_copy()

    def _add_many(self, plans: list[Plan]) -> None:
        """Insert new plans, all or nothing."""
        with self._shared.lock:
            taken = [p.plan_id for p in plans if p.plan_id in self._rows]
            if taken:
                raise ValueError(f"plan {taken[0]!r} already exists")
            self._rows.update((p.plan_id, p.model_copy()) for p in plans)

    def _get(self, plan_id: str) -> Plan | None:
        """The plan, or None."""
        with self._shared.lock:
            row = self._rows.get(plan_id.upper())
            return row.model_copy() if row else None

    def _update(self, plan: Plan) -> None:
        """Save; ConcurrentUpdateError if the stored version moved on."""
        with self._shared.lock:
            row = self._rows.get(plan.plan_id)
            if row is None:
                raise ValueError(f"no plan with id {plan.plan_id!r} to update")
            if row.version != plan.version:
                raise ConcurrentUpdateError(f"plan {plan.plan_id} changed since it was read")
            plan.version += 1
            self._rows[plan.plan_id] = plan.model_copy()

    def _list_all(self, limit: int | None) -> list[Plan]:
        """Plans, oldest first."""
        with self._shared.lock:
            out = sorted(self._rows.values(), key=lambda p: (p.created_at, p.plan_id))
            return [p.model_copy() for p in (out if limit is None else out[:limit])]

    def _list_recent(self, limit: int, offset: int, after: str | None) -> list[Plan]:
        """One page of plans, newest first, after a plan by key."""
        with self._shared.lock:
            rows = list(self._rows.values())
            cursor = None if after is None else self._rows.get(after.upper())
        return _newest_page(rows, _plan_key, after, cursor, limit, offset)

    def _count(self, at_most: int | None) -> int:
        """How many plans, at most at_most."""
        with self._shared.lock:
            n = len(self._rows)
        return n if at_most is None else min(n, at_most)

    def _remove(self, plan_id: str) -> bool:
        """Delete a plan (its events and outbox rows with it, as the SQL foreign keys cascade)."""
        with self._shared.lock:
            for event in [e for e in self._events.values() if e.plan_id == plan_id.upper()]:
                del self._events[event.event_id]
            for row in [d for d in self._outbox.values() if d.plan_id == plan_id.upper()]:
                del self._outbox[row.delivery_id]
            return self._rows.pop(plan_id.upper(), None) is not None

    def _list_awaiting(self, limit: int | None) -> list[Plan]:
        """Plans at their gate with a timeout, longest waiting first."""
        with self._shared.lock:
            found = [
                p
                for p in self._rows.values()
                if p.pipeline_state is PipelineState.awaiting_approval
                and p.pipeline_approval_timeout is not None
            ]
        found.sort(key=lambda p: (p.updated_at, p.plan_id))
        return [p.model_copy() for p in (found if limit is None else found[:limit])]

    def _gate_summary(self, at_most: int) -> GateSummary:
        """The plans at a gate, counted no further than at_most."""
        with self._shared.lock:
            since = sorted(
                p.updated_at
                for p in self._rows.values()
                if p.pipeline_state is PipelineState.awaiting_approval
            )[:at_most]
        return GateSummary(len(since), since[0] if since else None)

    def _add_event(self, event: PlanEvent) -> None:
        """Append one event."""
        with self._shared.lock:
            if event.plan_id not in self._rows:
                raise PlanNotFoundError(event.plan_id)
            self._events[event.event_id] = event

    def _list_events(self, plan_id: str, limit: int) -> list[PlanEvent]:
        """A plan's events, oldest first."""
        with self._shared.lock:
            found = [e for e in self._events.values() if e.plan_id == plan_id.upper()]
        return sorted(found, key=lambda e: (e.at, e.event_id))[:limit]

    def _delete_events_before(self, cutoff: datetime, batch_size: int) -> int:
        """Delete events older than cutoff."""
        with self._shared.lock:
            doomed = [e.event_id for e in self._events.values() if e.at < cutoff]
            for event_id in doomed:
                del self._events[event_id]
        return len(doomed)

    # -- the webhook outbox ----------------------------------------------------------------
    def _add_deliveries(self, deliveries: list[Delivery]) -> None:
        with self._shared.lock:
            self._outbox.update((d.delivery_id, d) for d in deliveries)

    def _claim_deliveries(self, now: datetime, lease_until: datetime, limit: int) -> list[Delivery]:
        with self._shared.lock:
            due = sorted(
                (d for d in self._outbox.values() if d.next_at is not None and d.next_at <= now),
                key=lambda d: (d.next_at or now, d.delivery_id),
            )[:limit]
            leased = [
                d.model_copy(update={"next_at": lease_until, "attempts": d.attempts + 1})
                for d in due
            ]
            self._outbox.update((d.delivery_id, d) for d in leased)
        return sorted(leased, key=lambda d: (d.created_at, d.delivery_id))

    def _delivered(self, delivery_id: str) -> bool:
        with self._shared.lock:
            return self._outbox.pop(delivery_id, None) is not None

    def _delivery_failed(self, delivery_id: str, error: str, retry_at: datetime | None) -> bool:
        with self._shared.lock:
            row = self._outbox.get(delivery_id)
            if row is None:
                return False
            changes = {"next_at": retry_at, "last_error": error}
            self._outbox[delivery_id] = row.model_copy(update=changes)
            return True

    def _list_deliveries(self, plan_id: str | None, limit: int) -> list[Delivery]:
        with self._shared.lock:
            rows = [d for d in self._outbox.values() if plan_id in (None, d.plan_id)]
        return sorted(rows, key=lambda d: (d.created_at, d.delivery_id))[:limit]

    def _delete_deliveries_before(self, cutoff: datetime, batch_size: int) -> int:
        with self._shared.lock:
            doomed = [
                k for k, d in self._outbox.items() if d.next_at is None and d.created_at < cutoff
            ]
            for key in doomed:
                del self._outbox[key]
        return len(doomed)


def _key(job: AsyncJob) -> tuple[datetime, str]:
    """The listings' order: creation time, then id."""
    return job.created_at, job.job_id


R = TypeVar("R", AsyncJob, Plan)


def _plan_key(plan: Plan) -> tuple[datetime, str]:
    """The plans listing's order: creation time, then id."""
    return plan.created_at, plan.plan_id


def _newest_page(
    rows: list[R],
    key: Callable[[R], tuple[datetime, str]],
    after: str | None,
    cursor: R | None,
    limit: int,
    offset: int,
) -> list[R]:
    """The SQL listings' page (store/keyset.py): newest first, strictly older than cursor."""
    if after is not None:
        if cursor is None:  # the cursor's row is gone: nothing is known to follow it
            return []
        rows = [r for r in rows if key(r) < key(cursor)]
    rows.sort(key=key, reverse=True)
    return [r.model_copy() for r in rows[offset : offset + limit]]


def _wanted(job: AsyncJob, status: AsyncJobStatus | None, plan_id: str | None) -> bool:
    """Whether job passes a listing's filters (None: any)."""
    if status is not None and job.status is not status:
        return False
    return plan_id is None or job.plan_id == plan_id.upper()


def in_memory_ledger() -> tuple[InMemoryJobStore, InMemoryPlanStore]:
    """A job store and a plan store that share one lock, so transactions span both."""
    shared = _Shared()
    return InMemoryJobStore(shared), InMemoryPlanStore(shared)
