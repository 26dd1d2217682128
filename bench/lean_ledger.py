"""A PROTOTYPE of a leaner ledger path (happy path only), for the benchmarks. Not used by planq.

Core statements instead of ORM sessions and identity-map reads: a claim or finish is one
transaction of two `UPDATE … RETURNING` statements (portable), or one data-modifying CTE
in autocommit (PostgreSQL only). The CAS conditions are planq's (status, cancel request;
the plan moves only from the status the job's transition allows). When a CAS matches no
row, the real implementation would fall back to today's code to find out why.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from domain.clock import utcnow
from store.database import make_engine

JOB_COLS = (
    "job_id, plan_id, phase, status, schema_version, payload_json, worker_id, created_at, "
    "started_at, finished_at, last_heartbeat, error_message, attempt, retry_of, dispatched_at, "
    "dispatch_count, cancel_requested_at, progress, checkpoint_json"
)
PLAN_COLS = "plan_id, name, phase, status, spec_json, created_at, updated_at, version"


class LeanLedger:
    """Core-statement versions of queue/claim/finish for the happy path."""

    def __init__(self, url: str) -> None:
        self.engine = make_engine(url, pool_pre_ping=False)
        self.auto = self.engine.execution_options(isolation_level="AUTOCOMMIT")

    # worker: portable, 2 statements per transaction
    def claim_core(self, job_id: str, worker_id: str) -> tuple[Any, Any]:
        now = utcnow()
        with self.engine.begin() as conn:
            job = (
                conn.execute(
                    text(
                        "UPDATE async_jobs SET status='running', worker_id=:w, started_at=:now, "
                        "last_heartbeat=:now WHERE job_id=:id AND status='queued' "
                        f"AND cancel_requested_at IS NULL RETURNING {JOB_COLS}"
                    ),
                    {"w": worker_id, "now": now, "id": job_id},
                )
                .mappings()
                .one()
            )
            plan = (
                conn.execute(
                    text(
                        "UPDATE plans SET status='running', version=version+1, updated_at=:now "
                        "WHERE plan_id=:p AND phase=:ph AND status='queued' "
                        f"RETURNING {PLAN_COLS}"
                    ),
                    {"now": now, "p": job["plan_id"], "ph": job["phase"]},
                )
                .mappings()
                .one()
            )
        return job, plan

    def finish_core(self, job_id: str, plan_id: str, phase: str) -> None:
        now = utcnow()
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE async_jobs SET status='succeeded', finished_at=:now "
                    "WHERE job_id=:id AND status='running'"
                ),
                {"now": now, "id": job_id},
            )
            conn.execute(
                text(
                    "UPDATE plans SET status='complete', version=version+1, updated_at=:now "
                    "WHERE plan_id=:p AND phase=:ph AND status='running'"
                ),
                {"now": now, "p": plan_id, "ph": phase},
            )

    # worker: PostgreSQL, 1 autocommit statement per transition
    def claim_cte(self, job_id: str, worker_id: str) -> tuple[Any, Any]:
        now = utcnow()
        plan_cols = ", ".join(f"p.{c.strip()} AS p_{c.strip()}" for c in PLAN_COLS.split(","))
        with self.auto.connect() as conn:
            row = (
                conn.execute(
                    text(
                        "WITH j AS (UPDATE async_jobs SET status='running', worker_id=:w, "
                        "started_at=:now, last_heartbeat=:now WHERE job_id=:id "
                        "AND status='queued' AND cancel_requested_at IS NULL "
                        f"RETURNING {JOB_COLS}), "
                        "p AS (UPDATE plans SET status='running', version=plans.version+1, "
                        "updated_at=:now FROM j WHERE plans.plan_id=j.plan_id "
                        f"AND plans.phase=j.phase AND plans.status='queued' RETURNING plans.*) "
                        f"SELECT j.*, {plan_cols} FROM j LEFT JOIN p ON true"
                    ),
                    {"w": worker_id, "now": now, "id": job_id},
                )
                .mappings()
                .one()
            )
        job = {k: row[k] for k in JOB_COLS.replace(" ", "").split(",")}
        plan = {k: row[f"p_{k}"] for k in PLAN_COLS.replace(" ", "").split(",")}
        return job, plan

    def finish_cte(self, job_id: str) -> None:
        with self.auto.connect() as conn:
            conn.execute(
                text(
                    "WITH j AS (UPDATE async_jobs SET status='succeeded', finished_at=:now "
                    "WHERE job_id=:id AND status='running' RETURNING plan_id, phase) "
                    "UPDATE plans SET status='complete', version=plans.version+1, "
                    "updated_at=:now FROM j WHERE plans.plan_id=j.plan_id "
                    "AND plans.phase=j.phase AND plans.status='running'"
                ),
                {"now": utcnow(), "id": job_id},
            )

    # producer: PostgreSQL
    def queue_cte(self, plan_id: str, job: Any) -> bool:
        with self.auto.connect() as conn:
            row = conn.execute(
                text(
                    "WITH p AS (UPDATE plans SET phase='execute', status='queued', "
                    "version=version+1, updated_at=:now WHERE plan_id=:p "
                    "AND phase='strategize' AND status='complete' RETURNING plan_id) "
                    "INSERT INTO async_jobs (job_id, plan_id, phase, status, schema_version, "
                    "payload_json, created_at, attempt, dispatch_count) "
                    "SELECT :id, p.plan_id, 'execute', 'queued', 1, :payload, :now, 1, 0 "
                    "FROM p RETURNING job_id"
                ),
                {"now": utcnow(), "p": plan_id, "id": job.job_id, "payload": job.payload_json},
            ).first()
        return row is not None

    def mark_dispatched(self, job_id: str) -> None:
        with self.auto.connect() as conn:
            conn.execute(
                text(
                    "UPDATE async_jobs SET dispatched_at=:now, dispatch_count=dispatch_count+1 "
                    "WHERE job_id=:id AND status='queued'"
                ),
                {"now": utcnow(), "id": job_id},
            )

    def heartbeat(self, job_ids: list[str]) -> set[str]:
        """One UPDATE … RETURNING for all of a process's running jobs; ids asked to cancel."""
        if not job_ids:
            return set()
        with self.engine.begin() as conn:
            rows = conn.execute(
                text(
                    "UPDATE async_jobs SET last_heartbeat=:now WHERE job_id = ANY(:ids) "
                    "AND status='running' RETURNING job_id, cancel_requested_at"
                ),
                {"now": utcnow(), "ids": list(job_ids)},
            )
            return {jid for jid, asked in rows if asked is not None}
