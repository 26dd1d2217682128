"""A filled PostgreSQL ledger by set-based SQL: the one fill of the explain test and the bench.

`Shape` says how big: JOBS job rows, one every STEP, ending a minute ago, into daily
partitions made as beat would have made them. The live set is constant whatever the size
(3,000 queued and 300 running jobs, the newest rows); the rest ended (2 % failed, each
failed job retried once, 1 % cancelled). A plan per three jobs, RUNS completed runs, and
FINDINGS findings spread over the first FINDING_RUNS of them. Then VACUUM ANALYZE.

Also here, so both read plans alike: the recorder of the statements planq sends
(`recorded`), EXPLAIN (`explain`, `explained`), the plan's scan nodes (`key_nodes`), and
`operations`: every listing, count and sweep as planq's stores call it, on a fill's ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import event, text

from planq.domain.clock import utcnow
from planq.domain.jobs import AsyncJobStatus
from planq.store import Database, SqlRunStoreProvider, sql_ledger
from planq.store.partitions import create_partitions, ulid_prefix, ulid_prefix_sql

QUEUED, RUNNING = 3_000, 300
WORKER = "w@h/1"

FILL_PLANS = """
INSERT INTO plans (plan_id, name, phase, status, spec_json, created_at, updated_at, version)
SELECT upper(lpad(to_hex(p), 26, '0')), 'plan-' || p, 'apply', 'complete', '{"steps": []}',
       :t0 + p * 3 * CAST(:step AS interval), :t0 + p * 3 * CAST(:step AS interval), 1
  FROM generate_series(1, :plans) AS p
"""
JOB_ID = ulid_prefix_sql("made.created_at") + " || lpad(upper(to_hex(i)), 16, '0')"
RETRIED = ulid_prefix_sql("made.created_at - CAST(:step AS interval)")
FILL_JOBS = f"""
INSERT INTO async_jobs (job_id, plan_id, phase, status, schema_version, payload_json,
                        worker_id, created_at, started_at, finished_at, last_heartbeat,
                        error_message, attempt, retry_of, dispatched_at, dispatch_count)
SELECT {JOB_ID}, plan_id, phase, status, 1,
       json_build_object('phase', phase, 'plan_id', plan_id, 'schema_version', 1)::text,
       CASE WHEN status = 'queued' THEN NULL ELSE :worker END,
       created_at,
       CASE WHEN status = 'queued' THEN NULL ELSE created_at END,
       CASE WHEN status IN ('queued', 'running') THEN NULL ELSE created_at + interval '5 s' END,
       CASE WHEN status = 'queued' THEN NULL
            WHEN status = 'running' AND i % 10 = 0 THEN :now - interval '1 hour'
            WHEN status = 'running' THEN :now
            ELSE created_at + interval '4 s' END,
       CASE WHEN status = 'failed' THEN 'boom' END,
       CASE WHEN i % 50 = 1 THEN 2 ELSE 1 END,
       CASE WHEN i % 50 = 1 THEN {RETRIED} || lpad(upper(to_hex(i - 1)), 16, '0') END,
       CASE WHEN status = 'queued' AND i % 10 = 0 THEN NULL ELSE created_at + interval '1 s' END,
       CASE WHEN status = 'queued' AND i % 10 = 0 THEN 0 ELSE 1 END
  FROM (
    SELECT i, upper(lpad(to_hex((i + 2) / 3), 26, '0')) AS plan_id,
           (ARRAY['strategize', 'execute', 'apply'])[(i - 1) % 3 + 1] AS phase,
           CASE WHEN i > :jobs - :queued THEN 'queued'
                WHEN i > :jobs - :queued - :running THEN 'running'
                WHEN i % 50 = 0 THEN 'failed'
                WHEN i % 100 = 7 THEN 'cancelled'
                ELSE 'succeeded' END AS status,
           CAST(:t0 AS timestamptz) + i * CAST(:step AS interval) AS created_at
      FROM generate_series(1, :jobs) AS i
  ) AS made
"""
FILL_RUNS = """
INSERT INTO recoverable_runs (id, job_name, status, started_at, last_progress_at,
                              completed_at, scanned_count, finding_count, params_json)
SELECT '0R' || lpad(r::text, 24, '0'), 'scan', 'Completed',
       :t0 + r * CAST(:run_every AS interval), :t0 + r * CAST(:run_every AS interval),
       :t0 + r * CAST(:run_every AS interval), 0, 0, '{}'
  FROM generate_series(1, :runs) AS r
"""
FILL_FINDINGS = """
INSERT INTO run_findings (id, run_id, kind, severity, resource_id, detail_json, created_at)
SELECT '0F' || lpad(f::text, 24, '0'), '0R' || lpad((f % :finding_runs + 1)::text, 24, '0'), 'k',
       (ARRAY['data_loss', 'inconsistent', 'anomaly'])[f % 3 + 1], 'res-' || f, '{}',
       :t0 + f * interval '1 second'
  FROM generate_series(1, :findings) AS f
"""
#: The run rows' counters, as recording the findings would have kept them.
FILL_COUNTERS = """
UPDATE recoverable_runs AS r
   SET finding_count = c.total, data_loss_findings = c.data_loss,
       inconsistent_findings = c.inconsistent, anomaly_findings = c.anomaly
  FROM (SELECT run_id, count(*) AS total,
               count(*) FILTER (WHERE severity = 'data_loss') AS data_loss,
               count(*) FILTER (WHERE severity = 'inconsistent') AS inconsistent,
               count(*) FILTER (WHERE severity = 'anomaly') AS anomaly
          FROM run_findings GROUP BY run_id) AS c
 WHERE r.id = c.run_id
"""


@dataclass(frozen=True)
class Shape:
    """How big a fill is, and the ids it makes (job i was created at t0 + i * step)."""

    jobs: int
    step: timedelta
    findings: int
    runs: int = 20
    finding_runs: int = 20
    now: datetime = field(default_factory=utcnow)

    @classmethod
    def over(cls, jobs: int, span: timedelta, findings: int, runs: int) -> Shape:
        """JOBS rows spread over span (the step in whole microseconds: SQL and Python agree)."""
        step = timedelta(microseconds=span // timedelta(microseconds=1) // jobs)
        return cls(jobs, step, findings, runs)

    @property
    def t0(self) -> datetime:
        """Job 0's creation time: the newest job (JOBS) was created a minute ago."""
        return self.now - self.step * self.jobs - timedelta(seconds=60)

    @property
    def days(self) -> int:
        """How many day partitions back the fill reaches."""
        return (self.t0 - self.now) // -timedelta(days=1) + 1

    def job_id(self, i: int) -> str:
        """The i-th job's id, as FILL_JOBS makes it: its partition is its creation day's."""
        return ulid_prefix(self.t0 + i * self.step) + f"{i:x}".upper().rjust(16, "0")

    @staticmethod
    def plan_id(p: int) -> str:
        """The p-th plan's id (plan p has jobs 3p - 2 to 3p)."""
        return f"{p:x}".upper().rjust(26, "0")

    @staticmethod
    def run_id(r: int) -> str:
        """The r-th run's id (1-based)."""
        return "0R" + str(r).rjust(24, "0")

    @staticmethod
    def finding_id(f: int) -> str:
        """The f-th finding's id."""
        return "0F" + str(f).rjust(24, "0")

    def run_finding(self, r: int, k: int) -> int:
        """The number of run r's k-th finding (0-based, 1 < r <= FINDING_RUNS: round robin)."""
        return r - 1 + self.finding_runs * k

    def per_run(self, r: int) -> int:
        """How many findings run r holds (1 < r <= FINDING_RUNS)."""
        return max(0, (self.findings - self.run_finding(r, 0)) // self.finding_runs + 1)

    def params(self) -> dict[str, Any]:
        """The fill statements' parameters."""
        span = self.step * self.jobs
        return {
            "t0": self.t0,
            "now": self.now,
            "step": self.step,
            "jobs": self.jobs,
            "plans": (self.jobs + 2) // 3,
            "queued": QUEUED,
            "running": RUNNING,
            "worker": WORKER,
            "findings": self.findings,
            "runs": self.runs,
            "finding_runs": self.finding_runs,
            "run_every": min(timedelta(hours=1), span / self.runs),
        }


def fill(db: Database, shape: Shape) -> None:
    """Partitions for every day of the fill, then every row in one transaction; VACUUM ANALYZE."""
    with db.engine.begin() as conn:
        create_partitions(conn, shape.now, behind=shape.days)
        for sql in (FILL_PLANS, FILL_JOBS, FILL_RUNS, FILL_FINDINGS, FILL_COUNTERS):
            conn.execute(text(sql), shape.params())
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("VACUUM ANALYZE")


@contextmanager
def recorded(db: Database) -> Iterator[list[tuple[str, Any]]]:
    """The (statement, parameters) planq sends while inside, on every engine."""
    sent: list[tuple[str, Any]] = []

    def on_statement(_c: Any, _cur: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    for engine in db.engines:
        event.listen(engine, "before_cursor_execute", on_statement)
    try:
        yield sent
    finally:
        for engine in db.engines:
            event.remove(engine, "before_cursor_execute", on_statement)


def unique(sent: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Each statement once, with the parameters it was first sent with."""
    out: dict[str, Any] = {}
    for statement, parameters in sent:
        out.setdefault(statement, parameters)
    return list(out.items())


def explained(db: Database, statement: str, parameters: Any, options: str) -> dict[str, Any]:
    """EXPLAIN (options) of one statement: its document (Plan, and with ANALYZE its times).

    The transaction is rolled back: an ANALYZEd write leaves nothing behind.
    """
    with db.engine.connect() as conn:
        doc = conn.exec_driver_sql(f"EXPLAIN ({options}) {statement}", parameters).scalar_one()
    rows = json.loads(doc) if isinstance(doc, str) else doc
    return dict(rows[0])


def explain(db: Database, statement: str, parameters: Any) -> dict[str, Any]:
    """The statement's plan as the planner would run it (not run: FORMAT JSON only)."""
    return dict(explained(db, statement, parameters, "FORMAT JSON")["Plan"])


def nodes(
    plan: dict[str, Any], above: tuple[str, ...] = ()
) -> Iterator[tuple[dict[str, Any], tuple[str, ...]]]:
    """Every node of a plan, with the node types above it."""
    yield plan, above
    for child in plan.get("Plans", []):
        yield from nodes(child, (*above, plan["Node Type"]))


def key_nodes(plan: dict[str, Any]) -> str:
    """The plan's path to its scans, e.g. 'Limit > Index Scan Backward (ix_…)' (pytest -s)."""
    parts = []
    for node, above in nodes(plan):
        if "Relation Name" in node or "Index Name" in node:
            where = node.get("Index Name") or node.get("Relation Name")
            parts.append(" > ".join((*above, f"{node['Node Type']} ({where})")))
    return "; ".join(parts)


def operations(db: Database, shape: Shape) -> dict[str, Callable[[], object]]:
    """Each listing, count and sweep as planq calls it, and the writes the explain test names."""
    jobs, plans = sql_ledger(db)
    runs = SqlRunStoreProvider(db)
    now = utcnow()
    n, run = shape.jobs, shape.run_id(5)
    middle, queued, running = shape.job_id(n // 2), shape.job_id(n), shape.job_id(n - QUEUED)
    failed = AsyncJobStatus.failed
    cutoff = now - shape.step * (n - 1_500)  # the oldest ~1,500 rows
    halfway = shape.finding_id(shape.run_finding(5, shape.per_run(5) // 2))
    return {
        "list newest": lambda: jobs.list_recent(),
        "list after a cursor": lambda: jobs.list_recent(after=middle),
        "list offset 9950": lambda: jobs.list_recent(limit=50, offset=9_950),
        "list failed": lambda: jobs.list_recent(failed),
        "list failed after": lambda: jobs.list_recent(failed, after=shape.job_id(n // 2 - 50)),
        "list succeeded": lambda: jobs.list_recent(AsyncJobStatus.succeeded),
        "list cancelled": lambda: jobs.list_recent(AsyncJobStatus.cancelled),
        "list queued": lambda: jobs.list_recent(AsyncJobStatus.queued),
        "list running": lambda: jobs.list_recent(AsyncJobStatus.running),
        "list of a plan": lambda: jobs.list_recent(plan_id=shape.plan_id(n // 6)),
        "jobs of a plan": lambda: jobs.list_by_plan(shape.plan_id(n // 6)),
        "count capped": lambda: jobs.count(at_most=10_001),
        "count failed capped": lambda: jobs.count(failed, at_most=10_001),
        "count succeeded capped": lambda: jobs.count(AsyncJobStatus.succeeded, at_most=10_001),
        "count queued capped": lambda: jobs.count(AsyncJobStatus.queued, at_most=10_001),
        "count of a plan": lambda: jobs.count(plan_id=shape.plan_id(n // 6)),
        "plans list": lambda: plans.list_recent(),
        "plans list after a cursor": lambda: plans.list_recent(after=shape.job_id(n // 6)),
        "plans count capped": lambda: plans.count(at_most=10_001),
        "plans waiting at a gate (metrics)": lambda: plans.gate_summary(),
        "approval expiry sweep": lambda: plans.list_awaiting(),
        "stuck sweep": lambda: jobs.list_stuck(now - timedelta(minutes=5)),
        "relay": lambda: jobs.list_dispatch_due(
            now - timedelta(seconds=30), now - timedelta(minutes=5)
        ),
        "queued oldest first": lambda: jobs.list_by_status(AsyncJobStatus.queued, 100),
        "TTL cleanup": lambda: jobs.delete_terminal_before(cutoff, 500),
        "cancel queued": lambda: jobs.cancel_queued(queued, now),
        "cancel request": lambda: jobs.cancel(running, now),
        "heartbeat": lambda: jobs.heartbeat([running], now, WORKER),
        "progress": lambda: jobs.save_progress(running, 0.5, None, WORKER),
        "dispatch stamp": lambda: jobs.mark_dispatched([shape.job_id(n - 1)], now),
        "availability sighting": lambda: jobs.sight_ledger("jobs", 45.0),
        "findings first page": lambda: runs.list_findings(run, limit=50),
        # A deep offset into one run (4,950 of its 5,000) is planned as a sort of that run's
        # rows: bounded by the run, not the table; the keyset page after it is a range read.
        "findings page 10": lambda: runs.list_findings(run, limit=50, offset=450),
        "findings after": lambda: runs.list_findings(run, limit=50, after=halfway),
        "severity counts": lambda: runs.finding_severity_counts(run),
        "runs list": lambda: runs.list_runs(limit=50),
    }
