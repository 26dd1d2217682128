"""The worker's statements: claim and finish, each moving a job and its plan; beats.

On PostgreSQL each is ONE statement (a data-modifying CTE, the same shape Procrastinate
uses for its job rows), run on the thread's own autocommit connection: one round trip,
prepared by psycopg after a few uses, its rows read as the driver's tuples
(`store/driver.py`). On SQLite each is a short form of two statements
in one BEGIN IMMEDIATE. Both forms run the same compare-and-sets, whose source states
come from `domain.transitions`; no status is spelled here. The heartbeat and progress
writes of a running job are here too, on PostgreSQL (SQLite's are the job store's). The
producer's one statement, queue, is the job store's own (`store/sql_jobs.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, TextClause, select, text, update

from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan
from planq.domain.ports import Claimed
from planq.domain.transitions import (
    CLAIM,
    JobMove,
    finish_move,
)
from planq.store.driver import fetch_all
from planq.store.models import PLAN_FIELDS
from planq.store.models import AsyncJobModel as J
from planq.store.models import PlanModel as P
from planq.store.partitions import JOBS

JOB_FIELDS = [c.key for c in J.__table__.columns]
#: A job's and a plan's columns, named in the models' order: the driver's tuples follow it.
JOB_COLUMNS = ", ".join(JOB_FIELDS)
PLAN_OUT = ", ".join(f"plan.{name}" for name in PLAN_FIELDS)


def job_from_tuple(values: Sequence[Any]) -> AsyncJob:
    """A job from the driver's tuple of JOB_COLUMNS."""
    return AsyncJob.model_validate(dict(zip(JOB_FIELDS, values, strict=True)))


def plan_from_tuple(values: Sequence[Any]) -> Plan:
    """A plan from the driver's tuple of PLAN_FIELDS' values."""
    return Plan.model_validate(dict(zip(PLAN_FIELDS, values, strict=True)))


def job_from(row: Any) -> AsyncJob:
    """A job from a row read by column name (SQLite's path)."""
    return job_from_tuple([row[name] for name in JOB_FIELDS])


def plan_from(row: Any) -> Plan:
    """A plan from a row read by column name (SQLite's path)."""
    return plan_from_tuple([row[name] for name in PLAN_FIELDS])


def _fence(worker_id: str | None) -> dict[str, Any]:
    """The parameters of `(NOT :fenced OR worker_id = :worker_id)`: only worker_id's job."""
    return {"fenced": worker_id is not None, "worker_id": worker_id or ""}


def _values(statuses: frozenset[Any]) -> list[str]:
    return sorted(s.value for s in statuses)


# -- PostgreSQL: one statement each ---------------------------------------------------------
def states_sql(statuses: frozenset[Any]) -> str:
    """A move's source states as an SQL list (constants: no array to send per call)."""
    return ", ".join(f"'{value}'" for value in _values(statuses))


def claim_sql(jobs: str, *, many: bool = False) -> str:
    """The claim's compare-and-set (the job, then its plan), for one id or a batch of ids.

    One text for both, so the group commit's batch claim is the single claim's WHERE on
    every id of the batch (`store/sql_batch.py`), never a copy that could drift.
    """
    match = "job_id = ANY(CAST(:job_ids AS varchar[]))" if many else "job_id = :job_id"
    join = "plan.plan_id = job.plan_id AND plan.phase = job.phase" if many else "true"
    return f"""
WITH job AS (
    UPDATE {jobs}
       SET status = '{CLAIM.to.value}', worker_id = :worker_id, started_at = :now,
           last_heartbeat = :now
     WHERE {match} AND status IN ({states_sql(CLAIM.sources)})
       AND cancel_requested_at IS NULL
 RETURNING {JOB_COLUMNS}
), plan AS (
    UPDATE plans AS p
       SET status = '{CLAIM.plan_to.value}', version = p.version + 1, updated_at = :now
      FROM job
     WHERE :follow AND p.plan_id = job.plan_id AND p.phase = job.phase
       AND p.status IN ({states_sql(CLAIM.plan_sources)})
 RETURNING p.*
)
SELECT job.*, {PLAN_OUT} FROM job LEFT JOIN plan ON {join}
"""


@lru_cache(maxsize=64)  # per jobs table: the parent, or a day's partition (store/partitions.py)
def _pg_claim(jobs: str) -> TextClause:
    return text(claim_sql(jobs))


@lru_cache(maxsize=64)
def _pg_finish(status: AsyncJobStatus, jobs: str) -> TextClause:
    move = finish_move(status)
    return text(f"""
WITH job AS (
    UPDATE {jobs}
       SET status = '{move.to.value}', finished_at = :now, error_message = :error,
           error_traceback = :traceback
     WHERE job_id = :job_id AND status IN ({states_sql(move.sources)})
       AND (NOT :fenced OR worker_id = :worker_id)
 RETURNING plan_id, phase
), plan AS (
    UPDATE plans AS p
       SET status = '{move.plan_to.value}', version = p.version + 1, updated_at = :now
      FROM job
     WHERE :follow AND p.plan_id = job.plan_id AND p.phase = job.phase
       AND p.status IN ({states_sql(move.plan_sources)})
 RETURNING p.plan_id
)
SELECT count(*) FROM job
""")


def pg_claim(
    conn: Connection,
    job_id: str,
    worker_id: str,
    now: datetime,
    follow: bool,
    *,
    jobs: str = JOBS.parent,
) -> Claimed | None:
    """CLAIM (one statement): the job queued -> running, its plan queued -> running.

    `jobs`: the table to update, the parent or the job's partition (store/partitions.py).
    """
    rows = fetch_all(
        conn,
        _pg_claim(jobs),
        {"job_id": job_id, "worker_id": worker_id, "now": now, "follow": follow},
    )
    if not rows:
        return None
    row, split = rows[0], len(JOB_FIELDS)
    plan = None if row[split] is None else plan_from_tuple(row[split:])  # outer-join miss
    return Claimed(job_from_tuple(row[:split]), plan)


def pg_finish(
    conn: Connection,
    job_id: str,
    status: AsyncJobStatus,
    now: datetime,
    error: str | None,
    traceback: str | None,
    worker_id: str | None,
    follow: bool,
    *,
    jobs: str = JOBS.parent,
) -> bool:
    """FINISH (one statement): the job running -> terminal, its plan with it (in `jobs`)."""
    [(count,)] = fetch_all(
        conn,
        _pg_finish(status, jobs),
        {
            "job_id": job_id,
            "now": now,
            "error": error,
            "traceback": traceback,
            **_fence(worker_id),
            "follow": follow,
        },
    )
    return bool(count)


#: Where a heartbeat or a progress write finds its job: in the state its claim left it.
_RUNNING_SQL = states_sql(frozenset({CLAIM.to}))


@lru_cache(maxsize=128)  # two forms per jobs table
def _pg_heartbeat(jobs: str, one: bool) -> TextClause:
    match = "job_id = :job_ids" if one else "job_id = ANY(CAST(:job_ids AS varchar[]))"
    return text(f"""
UPDATE {jobs} SET last_heartbeat = :now
 WHERE {match} AND status IN ({_RUNNING_SQL}) AND (NOT :fenced OR worker_id = :worker_id)
RETURNING job_id, cancel_requested_at
""")


def pg_heartbeat(
    conn: Connection,
    job_ids: Sequence[str],
    now: datetime,
    worker_id: str | None,
    *,
    jobs: str = JOBS.parent,
) -> list[tuple[str, datetime | None]]:
    """HEARTBEAT (one statement): stamp the running jobs (under worker_id, if given).

    The jobs it found, each with its cancel request. One job is matched by a plain value:
    on a partition, an array of one cost about a quarter more server CPU.
    """
    one = len(job_ids) == 1
    rows = fetch_all(
        conn,
        _pg_heartbeat(jobs, one),
        {
            "job_ids": job_ids[0] if one else list(job_ids),
            "now": now,
            **_fence(worker_id),
        },
    )
    return [(job_id, asked) for job_id, asked in rows]


@lru_cache(maxsize=128)  # two forms per jobs table
def _pg_progress(jobs: str, checkpoint: bool) -> TextClause:
    also = ", checkpoint_json = :checkpoint" if checkpoint else ""
    return text(f"""
UPDATE {jobs} SET progress = :progress{also}
 WHERE job_id = :job_id AND status IN ({_RUNNING_SQL}) AND (NOT :fenced OR worker_id = :worker_id)
RETURNING job_id
""")


def pg_progress(
    conn: Connection,
    job_id: str,
    progress: float | None,
    checkpoint_json: str | None,
    worker_id: str | None,
    *,
    jobs: str = JOBS.parent,
) -> bool:
    """PROGRESS (one statement): the running job's progress (and checkpoint, if given)."""
    rows = fetch_all(
        conn,
        _pg_progress(jobs, checkpoint_json is not None),
        {
            "job_id": job_id,
            "progress": progress,
            "checkpoint": checkpoint_json,
            **_fence(worker_id),
        },
    )
    return bool(rows)


# -- SQLite: two statements in one BEGIN IMMEDIATE --------------------------------------------
def sqlite_claim(
    conn: Connection, job_id: str, worker_id: str, now: datetime, follow: bool
) -> Claimed | None:
    """CLAIM: the job CAS, then the plan CAS (the caller holds the transaction)."""
    row = (
        conn.execute(
            update(J)
            .where(
                J.job_id == job_id,
                J.status.in_(_values(CLAIM.sources)),
                J.cancel_requested_at.is_(None),
            )
            .values(status=CLAIM.to.value, worker_id=worker_id, started_at=now, last_heartbeat=now)
            .returning(*J.__table__.columns)
        )
        .mappings()
        .first()
    )
    if row is None:
        return None
    job = job_from(row)
    return Claimed(job, _sqlite_follow(conn, job, CLAIM, now, read_back=True) if follow else None)


def sqlite_finish(
    conn: Connection,
    job_id: str,
    status: AsyncJobStatus,
    now: datetime,
    error: str | None,
    traceback: str | None,
    worker_id: str | None,
    follow: bool,
) -> bool:
    """FINISH: the job CAS, then the plan CAS."""
    move = finish_move(status)
    where = [J.job_id == job_id, J.status.in_(_values(move.sources))]
    if worker_id is not None:
        where.append(J.worker_id == worker_id)
    row = conn.execute(
        update(J)
        .where(*where)
        .values(
            status=status.value, finished_at=now, error_message=error, error_traceback=traceback
        )
        .returning(J.plan_id, J.phase)
    ).first()
    if row is None:
        return False
    if follow:
        conn.execute(_plan_follow(row.plan_id, row.phase, move, now))
    return True


def _sqlite_follow(
    conn: Connection, job: AsyncJob, move: JobMove, now: datetime, read_back: bool
) -> Plan | None:
    row = conn.execute(_plan_follow(job.plan_id, job.phase.value, move, now)).mappings().first()
    if row is None and read_back:  # the plan moved on (or is gone): as it stands
        row = conn.execute(select(P).where(P.plan_id == job.plan_id)).mappings().first()
    return None if row is None else plan_from(row)


def _plan_follow(plan_id: str, phase: str, move: JobMove, now: datetime) -> Any:
    return (
        update(P)
        .where(
            P.plan_id == plan_id,
            P.phase == phase,
            P.status.in_(_values(move.plan_sources)),
        )
        .values(status=move.plan_to.value, version=P.version + 1, updated_at=now)
        .returning(*P.__table__.columns)
    )
