"""The job ledger on SQL: every worker operation below is one named statement."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from functools import cache
from typing import Any, TypeVar

from sqlalchemy import Connection, TextClause, and_, delete, func, insert, or_, select, text, update
from sqlalchemy.exc import IntegrityError, ProgrammingError

from planq.domain.availability import Availability
from planq.domain.errors import DuplicateJobError
from planq.domain.jobs import TERMINAL_STATUSES, AsyncJob, AsyncJobStatus, UnreadableJob
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import CancelOutcome, Claimed, Finish, iter_batches
from planq.domain.transitions import (
    CANCEL_QUEUED,
    EXPIRE,
    GATED,
    PLAN_STATUS_FOR_JOB,
    UNDELIVERABLE,
    phase_queue_move,
)
from planq.store.availability import last_sighting, sight_ledger
from planq.store.checked import CheckedJobStore
from planq.store.database import Database, OnDatabase
from planq.store.driver import fetch_all
from planq.store.keyset import past_cursor
from planq.store.models import TERMINAL, AsyncJobModel
from planq.store.models import PlanModel as P
from planq.store.partitions import JOBS, PartitionMap, drop_expired_partitions
from planq.store.sql_batch import (
    pg_claim_many,
    pg_finish_many,
    sqlite_claim_many,
    sqlite_finish_many,
)
from planq.store.sql_hot_path import (
    PLAN_OUT,
    pg_claim,
    pg_finish,
    pg_heartbeat,
    pg_progress,
    plan_from,
    plan_from_tuple,
    sqlite_claim,
    sqlite_finish,
)

#: The retry's lock: namespaced two-key advisory lock, released at commit.
_RETRY_LOCK = text("SELECT pg_advisory_xact_lock(23, hashtext(:retry_of))")
_RETRY_TAKEN = text("SELECT EXISTS (SELECT 1 FROM async_jobs WHERE retry_of = :retry_of)")


class _Refused(Exception):
    """A plan of the batch refused its phase: roll the whole batch back."""


def _values(statuses: frozenset[AsyncJobStatus]) -> list[str]:
    return sorted(s.value for s in statuses)


J = AsyncJobModel
_T = TypeVar("_T")
#: SQLSTATEs a statement naming a partition can meet where the parent's would not: the
#: partition dropped under the map, and a role granted on the parent only.
UNDEFINED_TABLE, INSUFFICIENT_PRIVILEGE = "42P01", "42501"
logger = logging.getLogger("planq.store")
_TERMINAL = TERMINAL  # as the partial indexes spell it (SQLite matches the text)
_LIVE = [s.value for s in AsyncJobStatus if s not in TERMINAL_STATUSES]
_QUEUED, _RUNNING = AsyncJobStatus.queued.value, AsyncJobStatus.running.value
_FIELDS = [c.key for c in J.__table__.columns]
_IN_CLAUSE_BATCH = 500
#: Every listing's order, newest first (served by ix_async_jobs_created_at_job_id).
NEWEST_FIRST = (J.created_at.desc(), J.job_id.desc())


def to_domain(row: AsyncJobModel) -> AsyncJob:
    """Convert at the boundary: the domain never sees a row."""
    return AsyncJob.model_validate({name: getattr(row, name) for name in _FIELDS})


def to_listed(row: AsyncJobModel) -> AsyncJob:
    """As to_domain, but a row the domain refuses is an UnreadableJob naming why."""
    values = {name: getattr(row, name) for name in _FIELDS}
    try:
        return AsyncJob.model_validate(values)
    except ValueError as exc:  # pydantic's ValidationError, the bounds' BoundsError
        return UnreadableJob.of(values, exc)


def to_values(job: AsyncJob) -> dict[str, Any]:
    """Column values of a domain job."""
    data = job.model_dump()
    data["status"] = job.status.value
    data["phase"] = job.phase.value
    return {name: data[name] for name in _FIELDS}


class SqlJobStore(OnDatabase, CheckedJobStore):
    """SQLAlchemy 2.0 job ledger for SQLite and PostgreSQL."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self._homes = PartitionMap(JOBS)  # PostgreSQL: where one job's statements go

    def _select(self, *where: Any, limit: int | None = None) -> list[AsyncJob]:
        stmt = select(J).where(*where).order_by(J.created_at, J.job_id).limit(limit)
        with self.db.session() as s:
            return [to_domain(r) for r in s.scalars(stmt)]

    # -- plain CRUD ------------------------------------------------------------------
    def _add(self, job: AsyncJob) -> None:
        """INSERT; a duplicate id or a second retry of one job is a DuplicateJobError.

        On PostgreSQL the partitioned table can hold no unique index on retry_of alone, so
        a retry's insert first takes a transaction-scoped lock on the job it retries, then
        looks for an earlier retry: two sweepers retrying one job are serialised, and the
        second (reading after the first committed) finds the first's row.
        """
        with self.db.session() as s:
            if job.retry_of is not None and self._pg:
                s.execute(_RETRY_LOCK, {"retry_of": job.retry_of})
                if s.execute(_RETRY_TAKEN, {"retry_of": job.retry_of}).scalar():
                    raise DuplicateJobError(job.job_id)
            try:
                with s.begin_nested():
                    s.add(J(**to_values(job)))
            except IntegrityError as exc:
                raise DuplicateJobError(job.job_id) from exc

    def _get(self, job_id: str) -> AsyncJob | None:
        """SELECT one row by id."""
        with self.db.session() as s:
            row = s.get(J, job_id.upper())
            return to_domain(row) if row else None

    def _update(self, job: AsyncJob) -> None:
        """Overwrite every column of an existing row."""
        values = to_values(job)
        values.pop("job_id")
        with self.db.session() as s:
            result = s.execute(update(J).where(J.job_id == job.job_id).values(**values))
            if result.rowcount == 0:  # type: ignore[attr-defined]
                raise ValueError(f"no job with id {job.job_id!r} to update")

    def _remove(self, job_id: str) -> bool:
        """DELETE one row by id."""
        with self.db.session() as s:
            return bool(s.execute(delete(J).where(J.job_id == job_id.upper())).rowcount)  # type: ignore[attr-defined]

    def _list_by_status(self, status: AsyncJobStatus, limit: int | None) -> list[AsyncJob]:
        """Rows in one status, oldest first."""
        return self._select(J.status == status.value, limit=limit)

    def _list_all(self, limit: int | None) -> list[AsyncJob]:
        """All rows, oldest first."""
        return self._select(limit=limit)

    def _list_by_plan(self, plan_id: str) -> list[AsyncJob]:
        """A plan's jobs, oldest first."""
        return self._select(J.plan_id == plan_id)

    def _count(
        self, status: AsyncJobStatus | None, plan_id: str | None, at_most: int | None
    ) -> int:
        """How many rows (in one status, of one plan): one COUNT(*) with the listing's filter.

        With at_most it counts the listing's first at_most rows, in the listing's order, so
        an index serves it and the cost stays flat however large the ledger grows.
        """
        where = self._filter(status, plan_id)
        if at_most is None:
            stmt = select(func.count()).select_from(J).where(*where)
        else:
            first = select(J.job_id).where(*where).order_by(*NEWEST_FIRST).limit(at_most)
            stmt = select(func.count()).select_from(first.subquery())
        with self.db.session() as s:
            return int(s.scalar(stmt) or 0)

    def _list_recent(
        self,
        status: AsyncJobStatus | None,
        plan_id: str | None,
        limit: int,
        offset: int,
        after: str | None,
    ) -> list[AsyncJob]:
        """One page of rows, newest first (what people list); filters as count().

        Ordered by (created_at, job_id), the order of ix_async_jobs_created_at_job_id (and of
        the partial live/failures indexes after their status): the page is read from an
        index, never sorted. `after` is a keyset cursor (store/keyset.py): rows strictly
        before that job in the order. An offset is skipped over the index's entries only
        (the ids: an index-only read), then the page's rows are read by id, so a skipped
        row costs no heap page (failed jobs lie far apart on the heap).
        """
        where = self._filter(status, plan_id)
        stmt = select(J).where(*where)
        if after is not None:
            stmt = stmt.where(past_cursor(J, "created_at", "job_id", after, descending=True))
        stmt = stmt.order_by(*NEWEST_FIRST).limit(limit).offset(offset)
        with self.db.session() as s:
            if not offset:
                return [to_listed(r) for r in s.scalars(stmt)]
            ids = list(s.scalars(stmt.with_only_columns(J.job_id)))
            fetch = select(J).where(J.job_id.in_(ids), *where)  # moved out of it since: left out
            rows = {r.job_id: r for r in s.scalars(fetch)}
            return [to_listed(rows[i]) for i in ids if i in rows]

    @staticmethod
    def _filter(status: AsyncJobStatus | None, plan_id: str | None) -> list[Any]:
        where: list[Any] = []
        if status is not None:
            where.append(J.status == status.value)
        if plan_id is not None:
            where.append(J.plan_id == plan_id.upper())
        return where

    # -- the hot path: one statement each on PostgreSQL (store/sql_hot_path.py) ----------
    @property
    def _pg(self) -> bool:
        return self.db.dialect == "postgresql"

    def _queue(self, jobs: Sequence[AsyncJob], now: datetime) -> list[Plan] | None:
        """QUEUE: every plan into its phase and every job row, all or nothing."""
        if len(jobs) == 1 and self._pg:  # one statement is atomic by itself
            with self.db.connection("queue") as conn:
                return pg_queue(conn, jobs, now) or None
        try:
            with self.db.transaction():
                try:
                    with self.db.connection("queue") as conn:
                        run = pg_queue if self._pg else sqlite_queue
                        moved = run(conn, jobs, now)
                except IntegrityError as exc:  # inside: the transaction would say "rejected"
                    raise DuplicateJobError(", ".join(j.job_id for j in jobs)[:200]) from exc
                if moved is None or len(moved) != len(jobs):
                    raise _Refused
                return moved
        except _Refused:
            return None

    def _claim(
        self, job_id: str, worker_id: str, now: datetime, *, follow_plan: bool
    ) -> Claimed | None:
        """CLAIM: queued -> running unless a cancel was requested; the plan with it."""
        job_id = job_id.upper()
        with self.db.connection("claim") as conn:
            if not self._pg:
                return sqlite_claim(conn, job_id, worker_id, now, follow_plan)
            return self._at_home(
                conn,
                job_id,
                lambda jobs: pg_claim(conn, job_id, worker_id, now, follow_plan, jobs=jobs),
            )

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
        """FINISH: running (under worker_id, if given) -> terminal; the plan with it."""
        if status is not AsyncJobStatus.failed:
            error = traceback = None
        with self.db.connection("finish") as conn:
            if not self._pg:
                return sqlite_finish(
                    conn, job_id, status, now, error, traceback, worker_id, follow_plan
                )
            return self._at_home(
                conn,
                job_id,
                lambda jobs: pg_finish(
                    conn, job_id, status, now, error, traceback, worker_id, follow_plan, jobs=jobs
                ),
            )

    def _claim_many(
        self, job_ids: list[str], worker_id: str, now: datetime, *, follow_plan: bool
    ) -> list[Claimed | None]:
        """CLAIM MANY: each id's claim, one statement (PostgreSQL) or one transaction."""
        with self.db.connection("claim") as conn:
            if not self._pg:
                won = sqlite_claim_many(conn, job_ids, worker_id, now, follow_plan)
            else:

                def claim(jobs: str, ids: list[str]) -> dict[str, Claimed]:
                    return pg_claim_many(conn, ids, worker_id, now, follow_plan, jobs=jobs)

                won = self._many_at_home(conn, job_ids, claim)
        return [won.get(job_id) for job_id in job_ids]

    def _finish_many(self, finishes: list[Finish], now: datetime, *, follow_plan: bool) -> set[str]:
        """FINISH MANY: each row fenced on its own worker_id; one statement or transaction."""
        with self.db.connection("finish") as conn:
            if not self._pg:
                return sqlite_finish_many(conn, finishes, now, follow_plan)
            by_id = {f.job_id: f for f in finishes}

            def finish(jobs: str, ids: list[str]) -> dict[str, bool]:
                mine = [by_id[job_id] for job_id in ids]
                return dict.fromkeys(pg_finish_many(conn, mine, now, follow_plan, jobs=jobs), True)

            return set(self._many_at_home(conn, list(by_id), finish))

    def _many_at_home(
        self, conn: Connection, job_ids: list[str], run: Callable[[str, list[str]], dict[str, _T]]
    ) -> dict[str, _T]:
        """A batch statement per partition its ids are in (one, mostly), then the parent's.

        As the heartbeat: each partition's statement is planned on that table alone; the
        parent takes the ids no partition of the map holds and those their partition did
        not match (a lost row, a stale map), so a miss costs a second statement, never a
        wrong answer.
        """
        by_home: dict[str, list[str]] = {}
        for job_id in job_ids:
            by_home.setdefault(self._home(conn, job_id), []).append(job_id)
        at_parent = by_home.pop(JOBS.parent, [])
        done: dict[str, _T] = {}
        for home, ids in by_home.items():

            def here(jobs: str, ids: list[str] = ids) -> dict[str, _T]:
                return run(jobs, ids)

            found = (None if self._homes.given_up else self._on_partition(home, here)) or {}
            done.update(found)
            at_parent += [job_id for job_id in ids if job_id not in found]
        if at_parent:
            done.update(run(JOBS.parent, at_parent))
        return done

    def _at_home(self, conn: Connection, job_id: str, run: Callable[[str], _T]) -> _T:
        """Run a one-job statement on the job's partition; on the parent if that finds nothing.

        Through the parent every execution is planned afresh (store/partitions.py,
        `PartitionMap`). A miss on the partition (the row is not there, the table is gone)
        is asked again of the parent, which routes by itself: never a wrong answer, and a
        second statement only for a refused write (or a stale map).
        """
        home = self._home(conn, job_id)
        if home == JOBS.parent:
            return run(home)
        done = self._on_partition(home, run)
        return done if done else run(JOBS.parent)

    def _home(self, conn: Connection, job_id: str) -> str:
        """The table a job's statement names: its partition, or the parent.

        Inside an ambient transaction, where a failed statement would abort it, the parent;
        the hot engine is always autocommit, so elsewhere a failed statement aborts nothing.
        """
        return JOBS.parent if self.db.in_transaction else self._homes.home(conn, job_id)

    def _on_partition(self, home: str, run: Callable[[str], _T]) -> _T | None:
        """run(home), or None where the partition cannot be named: gone, or not granted."""
        try:
            return run(home)
        except ProgrammingError as exc:
            code = getattr(exc.orig, "sqlstate", None)
            if code == UNDEFINED_TABLE:  # dropped since the map was read: read it again
                self._homes.forget()
            elif code == INSUFFICIENT_PRIVILEGE:  # granted on the parent only: keep to it
                self._homes.give_up()
                logger.warning(
                    "the ledger's role may not write %s directly (its grants are on %s "
                    "only): the job path's writes go through %s from now on",
                    home,
                    JOBS.parent,
                    JOBS.parent,
                )
            else:
                raise
            return None

    def _cas(self, *where: Any, **values: Any) -> bool:
        with self.db.session() as s:
            return bool(s.execute(update(J).where(*where).values(**values)).rowcount)  # type: ignore[attr-defined]

    def _cancel_queued(self, job_id: str, now: datetime) -> bool:
        """CANCEL a queued row only (one statement); whether this call ended it."""
        return self._cas(
            J.job_id == job_id.upper(),
            J.status.in_(_values(CANCEL_QUEUED.sources)),
            status=CANCEL_QUEUED.to.value,
            finished_at=now,
            cancel_requested_at=now,
        )

    def _cancel(self, job_id: str, now: datetime) -> CancelOutcome:
        """CANCEL: end a queued row, or stamp cancel_requested_at on a running one."""
        job_id = job_id.upper()
        if self._cancel_queued(job_id, now):
            return CancelOutcome.cancelled
        if self._cas(
            J.job_id == job_id,
            J.status == _RUNNING,
            J.cancel_requested_at.is_(None),
            cancel_requested_at=now,
        ):
            return CancelOutcome.requested
        job = self._get(job_id)
        if job is None:
            return CancelOutcome.not_found
        if job.status is AsyncJobStatus.running:
            return CancelOutcome.already_requested
        return CancelOutcome.already_terminal

    def _heartbeat(self, job_ids: Iterable[str], now: datetime, worker_id: str | None) -> set[str]:
        """HEARTBEAT: one UPDATE … RETURNING for a process's running jobs (per partition)."""
        stop: set[str] = set()
        with self.db.connection("heartbeat") as conn:
            for batch in iter_batches(job_ids, _IN_CLAUSE_BATCH):
                beat = self._pg_beat if self._pg else _sqlite_beat
                alive = beat(conn, batch, now, worker_id)
                stop.update(jid for jid, asked in alive if asked is not None)
                if worker_id is not None:  # fenced: the rest is no longer ours
                    stop.update(set(batch) - {jid for jid, _ in alive})
        return stop

    def _pg_beat(
        self, conn: Connection, job_ids: list[str], now: datetime, worker_id: str | None
    ) -> list[tuple[str, datetime | None]]:
        """One statement per partition the jobs are in (one, mostly), then one on the parent.

        The parent's statement takes the ids no partition of the map holds and those their
        partition did not find (a lost or ended job, a stale map). A process on prefork
        beats one job: on its partition that costs 0.20 ms of server CPU against 0.30 to
        0.37 through the parent (docs/benchmarks.md).
        """
        by_home: dict[str, list[str]] = {}
        for job_id in job_ids:
            by_home.setdefault(self._home(conn, job_id), []).append(job_id)
        at_parent = by_home.pop(JOBS.parent, [])
        alive: list[tuple[str, datetime | None]] = []
        for home, ids in by_home.items():

            def beat(jobs: str, ids: list[str] = ids) -> list[tuple[str, datetime | None]]:
                return pg_heartbeat(conn, ids, now, worker_id, jobs=jobs)

            found = None if self._homes.given_up else self._on_partition(home, beat)
            seen = {job_id for job_id, _ in found or []}
            alive += found or []
            at_parent += [job_id for job_id in ids if job_id not in seen]
        if at_parent:
            alive += pg_heartbeat(conn, at_parent, now, worker_id)
        return alive

    def _save_progress(
        self,
        job_id: str,
        progress: float | None,
        checkpoint_json: str | None,
        worker_id: str | None,
    ) -> bool:
        """PROGRESS: UPDATE progress (and checkpoint) WHERE running (under worker_id)."""
        with self.db.connection("progress") as conn:
            if self._pg:
                return self._at_home(
                    conn,
                    job_id,
                    lambda jobs: pg_progress(
                        conn, job_id, progress, checkpoint_json, worker_id, jobs=jobs
                    ),
                )
            values: dict[str, Any] = {"progress": progress}
            if checkpoint_json is not None:
                values["checkpoint_json"] = checkpoint_json
            where = [J.job_id == job_id, J.status == _RUNNING]
            if worker_id is not None:
                where.append(J.worker_id == worker_id)
            return bool(conn.execute(update(J).where(*where).values(**values)).rowcount)

    def _sight_ledger(
        self, sweep: str, max_gap: float, recovered_ago: float | None
    ) -> Availability:
        """SIGHT: record a sweep's sighting; since when the ledger is available (one txn)."""
        return sight_ledger(self.db, sweep, max_gap, recovered_ago)

    def _last_sighting(self, sweep: str) -> datetime | None:
        """When sweep last sighted the ledger (one primary-key read)."""
        return last_sighting(self.db, sweep)

    def _stuck(self, cutoff: datetime) -> Any:
        return and_(
            J.status == _RUNNING, or_(J.last_heartbeat.is_(None), J.last_heartbeat < cutoff)
        )

    def _list_stuck(self, cutoff: datetime, limit: int) -> list[AsyncJob]:
        """STUCK: running rows whose heartbeat is older than cutoff."""
        return self._select(self._stuck(cutoff), limit=limit)

    def _expire(self, job_id: str, cutoff: datetime, now: datetime, error: str) -> bool:
        """EXPIRE: CAS still-stuck running -> failed."""
        return self._cas(
            J.job_id == job_id,
            self._stuck(cutoff),
            status=EXPIRE.to.value,
            finished_at=now,
            error_message=error,
        )

    def _fail_queued(self, job_id: str, now: datetime, error: str) -> bool:
        """UNDELIVERABLE: CAS queued -> failed."""
        return self._cas(
            J.job_id == job_id,
            J.status.in_(_values(UNDELIVERABLE.sources)),
            status=UNDELIVERABLE.to.value,
            finished_at=now,
            error_message=error,
        )

    def _delete_terminal_before(self, cutoff: datetime, batch_size: int) -> int:
        """TTL: drop expired partitions (PostgreSQL), then DELETE the rest batch by batch.

        A partition whose rows all ended before cutoff goes whole (store/partitions.py);
        the terminal rows left (in partitions that still hold a live or recent row, in
        the DEFAULT partition, or on SQLite everywhere) are deleted in short batches: the
        oldest ids read from the terminal index, then deleted by id, so each DELETE probes
        the primary key of the partitions those ids are in (pruned), never joins them all.
        """
        total = drop_expired_partitions(self.db.engine, cutoff, JOBS)
        expired = (J.status.in_(_TERMINAL), J.finished_at < cutoff)
        oldest = select(J.job_id).where(*expired).order_by(J.finished_at).limit(batch_size)
        while True:
            with self.db.session() as s:
                doomed = list(s.scalars(oldest))
                for batch in iter_batches(doomed, _IN_CLAUSE_BATCH):
                    total += s.execute(
                        delete(J)
                        .where(J.job_id.in_(batch), *expired)
                        .execution_options(synchronize_session=False)
                    ).rowcount  # type: ignore[attr-defined]
            if len(doomed) < batch_size:
                return total

    def _mark_dispatched(self, job_ids: Sequence[str], now: datetime) -> int:
        """DISPATCHED: stamp live rows, or rows a worker claimed, and count the publish.

        One statement per batch. The stamp trails the publish by up to ~100 ms, so a fast
        worker may have run the job already: a row that was claimed got its message. A row
        that ended without a claim (never picked up, cancelled while queued) is left alone.
        """
        stamped = 0
        with self.db.connection("dispatch stamp") as conn:
            for batch in iter_batches(job_ids, _IN_CLAUSE_BATCH):
                stamped += conn.execute(
                    update(J)
                    .where(J.job_id.in_(batch), or_(J.status.in_(_LIVE), J.started_at.is_not(None)))
                    .values(dispatched_at=now, dispatch_count=J.dispatch_count + 1)
                ).rowcount
        return stamped

    def _list_dispatch_due(
        self, never_sent_before: datetime, resent_before: datetime, limit: int
    ) -> list[AsyncJob]:
        """RELAY: queued rows never published, or published so long ago the message may be lost."""
        return self._select(
            J.status == _QUEUED,
            J.cancel_requested_at.is_(None),
            or_(
                and_(J.dispatched_at.is_(None), J.created_at < never_sent_before),
                J.dispatched_at < resent_before,
            ),
            limit=limit,
        )


def _sqlite_beat(
    conn: Connection, job_ids: list[str], now: datetime, worker_id: str | None
) -> list[tuple[str, datetime | None]]:
    """HEARTBEAT on SQLite: the running jobs found, each with its cancel request."""
    where = [J.job_id.in_(job_ids), J.status == _RUNNING]
    if worker_id is not None:
        where.append(J.worker_id == worker_id)
    stmt = (
        update(J)
        .where(*where)
        .values(last_heartbeat=now)
        .returning(J.job_id, J.cancel_requested_at)
    )
    return [(job_id, asked) for job_id, asked in conn.execute(stmt)]


# -- QUEUE: the producer's one statement (PostgreSQL), or a short form (SQLite) ------------
_QUEUED_PLAN = PLAN_STATUS_FOR_JOB[AsyncJobStatus.queued].value
_INSERTED = [
    "job_id",
    "plan_id",
    "phase",
    "status",
    "schema_version",
    "payload_json",
    "created_at",
    "attempt",
    "dispatch_count",
]


#: The queue's input rows: n jobs as one array per column, or one job as plain values (a
#: `delay()`: psycopg dumps four one-element arrays slower than the statement runs).
_MANY = """SELECT * FROM unnest(
        CAST(:job_ids AS varchar[]), CAST(:plan_ids AS varchar[]),
        CAST(:payloads AS text[]), CAST(:created AS timestamptz[])
    ) AS t(job_id, plan_id, payload_json, created_at)"""
_ONE = """SELECT CAST(:job_ids AS varchar) AS job_id, CAST(:plan_ids AS varchar) AS plan_id,
           CAST(:payloads AS text) AS payload_json, CAST(:created AS timestamptz) AS created_at"""


@cache
def _pg_queue(phase: PlanPhase, one: bool) -> TextClause:
    """Move the plans into <phase>/QUEUED and insert their jobs: one job, or n at once."""
    allowed = []
    for from_phase, from_status in sorted(phase_queue_move(phase).sources, key=str):
        if from_phase is None:
            allowed.append("(p.phase IS NULL AND p.status IS NULL)")
        else:
            allowed.append(f"(p.phase = '{from_phase.value}' AND p.status = '{from_status}')")
    return text(f"""
WITH input AS (
    {_ONE if one else _MANY}
), plan AS (
    UPDATE plans AS p
       SET phase = :phase, status = :plan_to, version = p.version + 1, updated_at = :now
      FROM input
     WHERE p.plan_id = input.plan_id AND ({" OR ".join(allowed)})
       AND p.pipeline_state IS DISTINCT FROM '{GATED.value}'
 RETURNING p.*
), job AS (
    INSERT INTO async_jobs (job_id, plan_id, phase, status, schema_version, payload_json,
                            created_at, attempt, dispatch_count)
    SELECT input.job_id, plan.plan_id, :phase, :status, :schema_version, input.payload_json,
           input.created_at, 1, 0
      FROM plan JOIN input ON input.plan_id = plan.plan_id
 RETURNING job_id
)
SELECT {PLAN_OUT} FROM plan
""")


def pg_queue(conn: Connection, jobs: Sequence[AsyncJob], now: datetime) -> list[Plan]:
    """QUEUE (one statement): every plan CAS'd into the phase, every job inserted."""
    first, one = jobs[0], len(jobs) == 1
    rows = fetch_all(
        conn,
        _pg_queue(first.phase, one),
        {
            "job_ids": first.job_id if one else [j.job_id for j in jobs],
            "plan_ids": first.plan_id if one else [j.plan_id for j in jobs],
            "payloads": first.payload_json if one else [j.payload_json for j in jobs],
            "created": first.created_at if one else [j.created_at for j in jobs],
            "phase": first.phase.value,
            "plan_to": _QUEUED_PLAN,
            "status": first.status.value,
            "schema_version": first.schema_version,
            "now": now,
        },
    )
    return [plan_from_tuple(row) for row in rows]


def sqlite_queue(conn: Connection, jobs: Sequence[AsyncJob], now: datetime) -> list[Plan] | None:
    """QUEUE: per job, the plan CAS then the insert; None (caller rolls back) on a refusal."""
    moved: list[Plan] = []
    allowed = phase_queue_move(jobs[0].phase).sources
    for job in jobs:
        pairs = [
            (P.phase.is_(None) & P.status.is_(None))
            if phase is None
            else ((P.phase == phase.value) & (P.status == status))
            for phase, status in allowed
        ]
        row = (
            conn.execute(
                update(P)
                .where(
                    P.plan_id == job.plan_id,
                    or_(*pairs),
                    or_(P.pipeline_state.is_(None), P.pipeline_state != GATED.value),
                )
                .values(
                    phase=job.phase.value,
                    status=_QUEUED_PLAN,
                    version=P.version + 1,
                    updated_at=now,
                )
                .returning(*P.__table__.columns)
            )
            .mappings()
            .first()
        )
        if row is None:
            return None
        conn.execute(insert(J).values(**{name: getattr(job, name) for name in _INSERTED}))
        plan = plan_from(row)
        assert plan is not None
        moved.append(plan)
    return moved
