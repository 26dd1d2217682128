"""The hot path's statements: queue, claim and finish, each moving a job and its plan.

On PostgreSQL each is ONE statement (a data-modifying CTE, the same shape Procrastinate
uses for its job rows), run on the thread's own autocommit connection: one round trip,
prepared by psycopg after a few uses. On SQLite each is a short form of two statements
in one BEGIN IMMEDIATE. Both forms run the same compare-and-sets, whose source states
come from `domain.transitions`; no status is spelled here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Connection, TextClause, insert, or_, select, text, update

from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import Claimed
from planq.domain.transitions import (
    CLAIM,
    GATED,
    PLAN_STATUS_FOR_JOB,
    JobMove,
    finish_move,
    phase_queue_move,
)
from planq.store.models import AsyncJobModel as J
from planq.store.models import PlanModel as P

JOB_FIELDS = [c.key for c in J.__table__.columns]
PLAN_FIELDS = [c.key for c in P.__table__.columns]
_PLAN_OUT = ", ".join(f"plan.{name} AS p_{name}" for name in PLAN_FIELDS)


def job_from(row: Any) -> AsyncJob:
    """A job row as the domain's job."""
    return AsyncJob.model_validate({name: row[name] for name in JOB_FIELDS})


def plan_from(row: Any, prefix: str = "") -> Plan | None:
    """A plan row (columns maybe prefixed) as the domain's plan; None for an outer-join miss."""
    if row[f"{prefix}plan_id"] is None:
        return None
    return Plan.model_validate({name: row[f"{prefix}{name}"] for name in PLAN_FIELDS})


def _values(statuses: frozenset[Any]) -> list[str]:
    return sorted(s.value for s in statuses)


# -- PostgreSQL: one statement each ---------------------------------------------------------
_PG_CLAIM = text(f"""
WITH job AS (
    UPDATE async_jobs
       SET status = :to, worker_id = :worker_id, started_at = :now, last_heartbeat = :now
     WHERE job_id = :job_id AND status = ANY(:sources) AND cancel_requested_at IS NULL
 RETURNING *
), plan AS (
    UPDATE plans AS p
       SET status = :plan_to, version = p.version + 1, updated_at = :now
      FROM job
     WHERE :follow AND p.plan_id = job.plan_id AND p.phase = job.phase
       AND p.status = ANY(:plan_sources)
 RETURNING p.*
)
SELECT job.*, {_PLAN_OUT} FROM job LEFT JOIN plan ON true
""")

_PG_FINISH = text("""
WITH job AS (
    UPDATE async_jobs
       SET status = :to, finished_at = :now, error_message = :error,
           error_traceback = :traceback
     WHERE job_id = :job_id AND status = ANY(:sources)
       AND (NOT :fenced OR worker_id = :worker_id)
 RETURNING plan_id, phase
), plan AS (
    UPDATE plans AS p
       SET status = :plan_to, version = p.version + 1, updated_at = :now
      FROM job
     WHERE :follow AND p.plan_id = job.plan_id AND p.phase = job.phase
       AND p.status = ANY(:plan_sources)
 RETURNING p.plan_id
)
SELECT count(*) FROM job
""")


@cache
def _pg_queue(phase: PlanPhase) -> TextClause:
    """Move the plans into <phase>/QUEUED and insert their jobs, for n plans at once."""
    allowed = []
    for from_phase, from_status in sorted(phase_queue_move(phase).sources, key=str):
        if from_phase is None:
            allowed.append("(p.phase IS NULL AND p.status IS NULL)")
        else:
            allowed.append(f"(p.phase = '{from_phase.value}' AND p.status = '{from_status}')")
    return text(f"""
WITH input AS (
    SELECT * FROM unnest(
        CAST(:job_ids AS varchar[]), CAST(:plan_ids AS varchar[]),
        CAST(:payloads AS text[]), CAST(:created AS timestamptz[])
    ) AS t(job_id, plan_id, payload_json, created_at)
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
SELECT {_PLAN_OUT} FROM plan
""")


def pg_claim(
    conn: Connection, job_id: str, worker_id: str, now: datetime, follow: bool
) -> Claimed | None:
    """CLAIM (one statement): the job queued -> running, its plan queued -> running."""
    row = (
        conn.execute(
            _PG_CLAIM,
            {
                "job_id": job_id,
                "worker_id": worker_id,
                "now": now,
                "follow": follow,
                **_move_params(CLAIM),
            },
        )
        .mappings()
        .first()
    )
    if row is None:
        return None
    return Claimed(job_from(row), plan_from(row, "p_"))


def pg_finish(
    conn: Connection,
    job_id: str,
    status: AsyncJobStatus,
    now: datetime,
    error: str | None,
    traceback: str | None,
    worker_id: str | None,
    follow: bool,
) -> bool:
    """FINISH (one statement): the job running -> terminal, its plan with it."""
    count = conn.execute(
        _PG_FINISH,
        {
            "job_id": job_id,
            "now": now,
            "error": error,
            "traceback": traceback,
            "fenced": worker_id is not None,
            "worker_id": worker_id or "",
            "follow": follow,
            **_move_params(finish_move(status)),
        },
    ).scalar_one()
    return bool(count)


def pg_queue(conn: Connection, jobs: Sequence[AsyncJob], now: datetime) -> list[Plan]:
    """QUEUE (one statement): every plan CAS'd into the phase, every job inserted."""
    first = jobs[0]
    rows = conn.execute(
        _pg_queue(first.phase),
        {
            "job_ids": [j.job_id for j in jobs],
            "plan_ids": [j.plan_id for j in jobs],
            "payloads": [j.payload_json for j in jobs],
            "created": [j.created_at for j in jobs],
            "phase": first.phase.value,
            "plan_to": _QUEUED_PLAN,
            "status": first.status.value,
            "schema_version": first.schema_version,
            "now": now,
        },
    ).mappings()
    return [p for p in (plan_from(r, "p_") for r in rows) if p is not None]


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


def _move_params(move: JobMove) -> dict[str, Any]:
    return {
        "to": move.to.value,
        "sources": _values(move.sources),
        "plan_to": move.plan_to.value,
        "plan_sources": _values(move.plan_sources),
    }


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
