"""The ledger at scale (issue 23): every ledger operation timed at 10k, 1M and 5M job rows.

For each size a throw-away PostgreSQL database gets the fill of bench/ledger_fill.py (the
explain test's): job rows over 30 days of daily partitions, the live set constant (3,000
queued, 300 running), 2 % failed, 1 % cancelled, a plan per three jobs, runs and up to 1M
findings; VACUUM ANALYZE, CHECKPOINT. Every size is filled first, then each operation is
timed in rounds of one call at every size, so a load that drifts on a shared box weighs on
all sizes alike. In this order (the cleanup changes the data, so it is last):

* each listing, bounded total, sweep and read through planq's own code: the stores, and the
  services the CLI and the API call (cli/services.py) and the dashboard's sections; median
  of 5 warm runs (one run at each size per round), the key nodes of the slowest statement
  each sends under EXPLAIN (ANALYZE, BUFFERS) (recorded as the explain test records them),
  and all its statements' server time and buffers;
* queue, claim and finish of one job at a time (median of 5);
* the CLI as a subprocess (median of 3) and the HTTP API of `planq api` (median of 5);
* TTL cleanup: `delete_terminal_before(now - 7 days)` once: rows, seconds, sizes.

JSON to bench/results/ledger_scale.json; a Markdown table on stdout (`--table` prints the
saved one). Each cell is the median wall ms, then the server ms (planning + execution) and
shared buffers of the statements it sends: wall times on a loaded box are noisy, the
buffers are not. Run it niced on a shared box:

    nice -n 10 .venv/bin/python bench/ledger_scale.py --rows 10000 1000000 5000000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import requests
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.ledger_cleanup import SIZE  # noqa: E402
from bench.ledger_fill import (  # noqa: E402
    Shape,
    explained,
    fill,
    nodes,
    operations,
    recorded,
)
from planq.cli import services  # noqa: E402
from planq.cli.api import dashboard, workers  # noqa: E402
from planq.cli.api.celery_view import CeleryAsker, CeleryView  # noqa: E402
from planq.cli.api.dashboard_pages import FAILED, JOBS, PLANS, ListQuery  # noqa: E402
from planq.cli.context import Planq  # noqa: E402
from planq.domain.clock import utcnow  # noqa: E402
from planq.domain.config import DEFAULT_JOB_TTL  # noqa: E402
from planq.domain.jobs import AsyncJob, AsyncJobStatus  # noqa: E402
from planq.domain.plans import Plan, PlanPhase  # noqa: E402
from planq.store import Database, SqlRunStoreProvider, sql_ledger  # noqa: E402
from planq.store.migrate import upgrade  # noqa: E402
from planq.worker_config.settings import load_settings  # noqa: E402

ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/"
#: A private Redis: settings want a broker; nothing here publishes (the API's Workers
#: section asks it who is running, bounded at 0.5 s and cached 5 s).
BROKER = "redis://127.0.0.1:6400/5"
SPAN = timedelta(days=30)
RUNS, CLI_RUNS = 5, 3
RESULTS = ROOT / "bench" / "results" / "ledger_scale.json"
PLANQ = str(Path(sys.executable).with_name("planq"))
#: Statements EXPLAIN can take (a DETACH or a lock cannot).
EXPLAINABLE = ("SELECT", "UPDATE", "DELETE", "WITH", "INSERT")
#: The overview's refreshed sections (cli/api/dashboard.py overview_sections), as URLs.
DASHBOARD = [
    "/dashboard/fragments/recoverable",
    "/dashboard/fragments/runs",
    "/dashboard/fragments/workers",
    ListQuery(limit=dashboard.FAILED_SHOWN).url("/dashboard/fragments/failed"),
    ListQuery(limit=dashboard.PLANS_SHOWN).url("/dashboard/fragments/plans"),
    ListQuery(limit=dashboard.JOBS_SHOWN).url("/dashboard/fragments/jobs"),
]
PARTITION = re.compile(r"async_jobs_p\d{8}_\d{4}")
Ops = dict[str, Callable[[], object]]


def shape_for(rows: int) -> Shape:
    """The fill at a size: findings and runs grow with it (1M findings at 5M jobs)."""
    return Shape.over(rows, SPAN, findings=max(2_000, rows // 5), runs=max(20, rows // 5_000))


# -- the database ---------------------------------------------------------------------------------
@contextmanager
def throwaway() -> Iterator[str]:
    """A new database's URL; dropped afterwards, also on error."""
    name = f"planq_scale_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield SERVER + name
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sizes(db: Database) -> dict[str, Any]:
    """Rows, partitions and on-disk size (heap, TOAST, indexes) of the big tables, in MB."""
    mb = "round(pg_total_relation_size('{}') / 1048576.0, 1)"
    with db.engine.connect() as conn:
        return {
            "job_rows": conn.execute(text("SELECT count(*) FROM async_jobs")).scalar_one(),
            "partitions": conn.execute(
                text("SELECT count(*) FROM pg_inherits WHERE inhparent = 'async_jobs'::regclass")
            ).scalar_one(),
            "async_jobs_mb": round(float(conn.execute(text(SIZE)).scalar_one()) / 2**20, 1),
            "plans_mb": float(conn.execute(text(f"SELECT {mb.format('plans')}")).scalar_one()),
            "run_findings_mb": float(
                conn.execute(text(f"SELECT {mb.format('run_findings')}")).scalar_one()
            ),
        }


def settle(db: Database) -> None:
    """Write the fill's dirty pages out now (CHECKPOINT), not while the operations are timed.

    Without it the first minutes after a 5M-row fill ran up to twice as slow (the server
    writing back gigabytes behind the timings), whichever statement was timed.
    """
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql("CHECKPOINT")


# -- timing and plans -----------------------------------------------------------------------------
def rounds(calls: Sequence[Callable[[], object]], runs: int) -> list[list[float]]:
    """Wall ms of each call, runs times: one call of each per round.

    A load that drifts over the rounds weighs on every size alike.
    """
    took: list[list[float]] = [[] for _ in calls]
    for _ in range(runs):
        for mine, call in zip(took, calls, strict=True):
            started = time.perf_counter()
            call()
            mine.append(round((time.perf_counter() - started) * 1000, 3))
    return took


def median(runs: list[float]) -> dict[str, Any]:
    """The median and the runs it is of."""
    return {"ms": round(statistics.median(runs), 2), "runs": runs}


def parent_indexes(db: Database) -> dict[str, str]:
    """Each partition's index name: the name of the parent's index it belongs to."""
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT c.relname, p.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE c.relkind = 'i'"
        )
        return {str(child): str(parent) for child, parent in rows}


def brief(plan: dict[str, Any], parents: dict[str, str]) -> str:
    """The plan's scans, each path once: a partition's index by its parent's name, xN times."""
    seen: dict[str, int] = {}
    for node, above in nodes(plan):
        if "Relation Name" in node or "Index Name" in node:
            where = node.get("Index Name") or node["Relation Name"]
            where = PARTITION.sub("async_jobs_p*", parents.get(where, where))
            path = " > ".join((*above, f"{node['Node Type']} ({where})"))
            seen[path] = seen.get(path, 0) + 1
    scans = "; ".join(path if n == 1 else f"{path} x{n}" for path, n in seen.items())
    return scans or str(plan["Node Type"])


def analyzed(db: Database, statement: str, parameters: Any) -> dict[str, Any] | None:
    """EXPLAIN (ANALYZE, BUFFERS) of one statement sent (rolled back); None if it cannot be.

    A write run again may no longer apply (its row moved on) and fail: it is left out.
    """
    if not statement.lstrip().upper().startswith(EXPLAINABLE):
        return None
    try:
        return explained(db, statement, parameters, "ANALYZE, BUFFERS, FORMAT JSON")
    except DBAPIError:
        return None


def server_ms(doc: dict[str, Any]) -> float:
    """Planning and execution: with 40 partitions, planning is often the larger part."""
    return float(doc["Planning Time"]) + float(doc["Execution Time"])


def buffers(doc: dict[str, Any]) -> int:
    """Shared buffers the statement touched (hit or read): what does not vary with load."""
    plan = doc["Plan"]
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def server(db: Database, sent: list[tuple[str, Any]]) -> dict[str, Any]:
    """Every statement sent, analyzed: the total server ms and buffers; the slowest's scans."""
    docs = [doc for doc in (analyzed(db, s, p) for s, p in sent) if doc is not None]
    if not docs:
        return {"statements": len(sent)}
    slowest = max(docs, key=server_ms)
    return {
        "statements": len(sent),
        "server_ms": round(sum(server_ms(d) for d in docs), 3),
        "buffers": sum(buffers(d) for d in docs),
        "planning_ms": round(float(slowest["Planning Time"]), 3),
        "explain_ms": round(float(slowest["Execution Time"]), 3),
        "key": brief(slowest["Plan"], parent_indexes(db)),
    }


def measure(targets: list[tuple[Database, Callable[[], object]]]) -> list[dict[str, Any]]:
    """One operation at every size, each a (database, call).

    A warm call each (its statements recorded), RUNS rounds timed, the statements analyzed.
    """
    sent = []
    for db, call in targets:
        with recorded(db) as statements:
            call()
        sent.append(statements)
    took = rounds([call for _, call in targets], RUNS)
    return [
        {**median(runs), **server(db, statements)}
        for runs, (db, _), statements in zip(took, targets, sent, strict=True)
    ]


# -- what is measured -----------------------------------------------------------------------------
STORE_OPS = [
    "list newest",
    "list succeeded",
    "list failed",
    "list queued",
    "list running",
    "list offset 9950",
    "list after a cursor",
    "list failed after",
    "count capped",
    "count succeeded capped",
    "count failed capped",
    "count queued capped",
    "plans list",
    "plans count capped",
    "plans waiting at a gate (metrics)",
    "approval expiry sweep",
    "findings first page",
    "findings after",
    "severity counts",
    "runs list",
    "stuck sweep",
    "relay",
    "queued oldest first",
]


def store_ops(db: Database, shape: Shape) -> Ops:
    """The stores' reads, as the explain test names them, plus the deep and last pages."""
    jobs, plans = sql_ledger(db)
    runs = SqlRunStoreProvider(db)
    ops = operations(db, shape)
    picked = {name: ops[name] for name in STORE_OPS}
    last = shape.finding_id(shape.run_finding(5, shape.per_run(5) - 51))
    picked["list failed offset 9950"] = lambda: jobs.list_recent(
        AsyncJobStatus.failed, limit=50, offset=9_950
    )
    picked["plans list after a cursor"] = lambda: plans.list_recent(
        after=shape.plan_id(shape.jobs // 6)
    )
    picked["findings last page (after=)"] = lambda: runs.list_findings(
        shape.run_id(5), limit=50, after=last
    )
    return picked


class NotAsked(CeleryAsker):
    """The Workers section without Celery's broadcast: its ledger read is what is timed."""

    def view(self, app: Any, clock: Callable[[], float] = time.monotonic) -> CeleryView | None:
        """Nothing asked (the broadcast is bounded at 0.5 s and cached: not the ledger's)."""
        return None


def dashboard_refresh(planq: Planq) -> None:
    """What the overview's script fetches every 2 s: each section's HTML."""
    dashboard.recoverable_section(planq)
    dashboard.runs_section(planq)
    workers.workers_html(planq, NotAsked())
    for kind, shown in (
        (FAILED, dashboard.FAILED_SHOWN),
        (PLANS, dashboard.PLANS_SHOWN),
        (JOBS, dashboard.JOBS_SHOWN),
    ):
        kind.render(planq, ListQuery(limit=shown))


def service_ops(planq: Planq, shape: Shape) -> Ops:
    """The services the CLI and the API call (a page and its bounded total), and the dashboard."""
    run, middle = shape.run_id(5), shape.job_id(shape.jobs // 2)
    last = shape.finding_id(shape.run_finding(5, shape.per_run(5) - 51))
    return {
        "jobs page + total (CLI, API)": lambda: services.job_page(planq, None, None, 50),
        "same, status=succeeded": lambda: services.job_page(planq, "succeeded", None, 50),
        "same, status=failed offset 9950": lambda: services.job_page(
            planq, "failed", None, 50, 9_950
        ),
        "same, offset 9950": lambda: services.job_page(planq, None, None, 50, 9_950),
        "same, after=": lambda: services.job_page(planq, None, None, 50, after=middle),
        "plans page + total": lambda: services.plan_page(planq, 50),
        "findings page + counts (first)": lambda: services.finding_page(planq, run, 50),
        "findings page + counts (last, after=)": lambda: services.finding_page(
            planq, run, 50, after=last
        ),
        "runs page, no name (+ count)": lambda: services.run_page(planq, None, 50),
        "dashboard refresh (6 sections)": lambda: dashboard_refresh(planq),
    }


class JobPath:
    """Fresh jobs through queue, claim and finish: each step takes what the one before left."""

    def __init__(self, db: Database, n: int) -> None:
        self.jobs, plans = sql_ledger(db)
        self.todo: deque[AsyncJob] = deque()
        for _ in range(n):
            plan = Plan.with_steps(["a"])
            plans.add(plan)
            self.todo.append(AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize))
        self.queued: deque[AsyncJob] = deque()
        self.running: deque[AsyncJob] = deque()

    def queue(self) -> None:
        """Queue the next new job (its plan moves with it: one statement)."""
        job = self.todo.popleft()
        assert self.jobs.queue([job], utcnow())
        self.queued.append(job)

    def claim(self) -> None:
        """Claim the oldest queued one."""
        job = self.queued.popleft()
        assert self.jobs.claim(job.job_id, "w@h/2", utcnow())
        self.running.append(job)

    def finish(self) -> None:
        """Finish the oldest running one."""
        job = self.running.popleft()
        assert self.jobs.finish(job.job_id, AsyncJobStatus.succeeded, utcnow())

    def ops(self) -> Ops:
        """The three steps, in the order they must run."""
        return {"queue one job": self.queue, "claim it": self.claim, "finish it": self.finish}


@contextmanager
def session(url: str) -> Iterator[Planq]:
    """A Planq as `planq api` builds it (settings, app, runtime) on the throw-away ledger."""
    planq = Planq()
    planq.settings = load_settings(database_url=url, broker_url=BROKER)
    try:
        _ = planq.runtime
        yield planq
    finally:
        planq.close()


# -- the front doors: the CLI and the HTTP API ----------------------------------------------------
def environment(url: str) -> dict[str, str]:
    """The environment, with the throw-away ledger and the private broker."""
    return {**os.environ, "PLANQ_DATABASE_URL": url, "PLANQ_BROKER_URL": BROKER}


CLI = {
    "`planq jobs list`": ["jobs", "list"],
    "`planq jobs list --status succeeded`": ["jobs", "list", "--status", "succeeded"],
    "`planq plans list`": ["plans", "list"],
}


def cli_run(url: str, argv: list[str]) -> Callable[[], None]:
    """The command as a subprocess on the ledger at url; an error if it fails."""

    def run() -> None:
        done = subprocess.run([PLANQ, *argv], env=environment(url), capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(f"planq {' '.join(argv)}: {done.stderr.decode()[-2000:]}")

    return run


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def api_server(url: str) -> Iterator[str]:
    """`planq api` on a free loopback port (no token: reads open); its base URL. Stopped after."""
    port = free_port()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [PLANQ, "api", "--port", str(port), "--log-level", "warning"],
            env=environment(url),
            stdout=log,
            stderr=log,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, proc, log)
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_healthy(base: str, proc: subprocess.Popen[bytes], log: Any) -> None:
    """Wait for /healthz; the server's output in the error if it exits or never answers."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if requests.get(base + "/healthz", timeout=2).ok:
                return
        except requests.ConnectionError:
            time.sleep(0.2)
    log.seek(0)
    raise RuntimeError(f"planq api did not start: {log.read().decode()[-2000:]}")


def http_paths(shape: Shape) -> dict[str, list[str]]:
    """The GETs, by name: each a list of paths fetched one after another."""
    run = shape.run_id(5)
    last = shape.finding_id(shape.run_finding(5, shape.per_run(5) - 51))
    findings = f"/api/admin/jobs/scan/runs/{run}/findings?limit=50"
    jobs = "/api/ledger/jobs"
    return {
        f"`GET {jobs}`": [jobs],
        "`?status=succeeded`": [jobs + "?status=succeeded"],
        "`?status=failed&offset=9950`": [jobs + "?status=failed&offset=9950"],
        "`?offset=9950`": [jobs + "?offset=9950"],
        "`?after=<job id>`": [f"{jobs}?after={shape.job_id(shape.jobs // 2)}"],
        "`GET /api/ledger/plans`": ["/api/ledger/plans"],
        "findings, first page": [findings],
        "findings, last page (`after=`)": [f"{findings}&after={last}"],
        "dashboard refresh (6 fragments, one after another)": DASHBOARD,
    }


def http_get(base: str, paths: list[str]) -> Callable[[], None]:
    """GET the paths one after another; each must answer 200."""

    def get() -> None:
        for path in paths:
            response = requests.get(base + path, timeout=120)
            assert response.status_code == 200, (path, response.status_code, response.text[:300])

    return get


# -- TTL cleanup ----------------------------------------------------------------------------------
def cleanup(db: Database) -> dict[str, Any]:
    """`delete_terminal_before(now - 7 days, 500)` once, as beat runs it: rows, time, sizes."""
    jobs, _ = sql_ledger(db)
    before = sizes(db)
    cutoff = utcnow() - timedelta(seconds=DEFAULT_JOB_TTL)
    started = time.perf_counter()
    deleted = jobs.delete_terminal_before(cutoff, 500)
    seconds = time.perf_counter() - started
    return {"deleted": deleted, "seconds": round(seconds, 2), "before": before, "after": sizes(db)}


# -- the sizes, side by side ----------------------------------------------------------------------
@dataclass
class Ledger:
    """One size's filled throw-away ledger, its Planq session and API server, its results."""

    shape: Shape
    url: str
    db: Database
    planq: Planq
    api: str
    result: dict[str, Any]

    def ops(self) -> dict[str, tuple[Database, Callable[[], object]]]:
        """Every in-process operation, with the database its statements go through."""
        served = service_ops(self.planq, self.shape)
        return (
            {name: (self.db, call) for name, call in store_ops(self.db, self.shape).items()}
            | {name: (self.planq.runtime.db, call) for name, call in served.items()}
            | {name: (self.db, call) for name, call in JobPath(self.db, 1 + RUNS).ops().items()}
        )


@contextmanager
def ledger(rows: int) -> Iterator[Ledger]:
    """A filled ledger of rows jobs, served; the database is dropped whatever happens."""
    shape = shape_for(rows)
    with throwaway() as url:
        upgrade(url)
        db = Database(url)
        try:
            started = time.perf_counter()
            fill(db, shape)
            result: dict[str, Any] = {"fill_seconds": round(time.perf_counter() - started, 1)}
            settle(db)
            result["filled"] = {**sizes(db), "findings": shape.findings, "runs": shape.runs}
            print(f"{rows:,} rows filled: {result}", file=sys.stderr, flush=True)
            with session(url) as planq, api_server(url) as api:
                yield Ledger(shape, url, db, planq, api, result)
        finally:
            db.close()


def in_process(ledgers: list[Ledger]) -> None:
    """Each operation at every size (see `measure`), one operation after another."""
    ops = [lg.ops() for lg in ledgers]
    for name in ops[0]:
        measured = measure([mine[name] for mine in ops])
        for lg, result in zip(ledgers, measured, strict=True):
            lg.result.setdefault("ops", {})[name] = result
        print(f"  {name}: {[m['ms'] for m in measured]} ms", file=sys.stderr, flush=True)


def front_doors(ledgers: list[Ledger]) -> None:
    """The CLI (CLI_RUNS rounds) and the HTTP API (RUNS rounds), after a warm call each."""
    doors = [
        ("cli", name, CLI_RUNS, [cli_run(lg.url, argv) for lg in ledgers])
        for name, argv in CLI.items()
    ]
    for name in http_paths(ledgers[0].shape):
        gets = [http_get(lg.api, http_paths(lg.shape)[name]) for lg in ledgers]
        doors.append(("http", name, RUNS, gets))
    for section, name, runs, calls in doors:
        for call in calls:
            call()
        for lg, took in zip(ledgers, rounds(calls, runs), strict=True):
            lg.result.setdefault(section, {})[name] = median(took)


# -- output ---------------------------------------------------------------------------------------
def about() -> dict[str, Any]:
    """When, at which commit, on which server: figures from a loaded 2-core box, niced."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    with psycopg.connect(ADMIN) as conn:
        server = conn.execute("SHOW server_version").fetchone()
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "postgresql": server[0] if server else "?",
        "cpus": os.cpu_count(),
        "niceness": os.nice(0),
        "load_average": os.getloadavg(),
    }


def cleanup_cell(c: dict[str, Any]) -> str:
    """'3,840,000 rows in 71.6 s (2,812 -> 405 MB)'."""
    mb = f"{c['before']['async_jobs_mb']:,} -> {c['after']['async_jobs_mb']:,} MB"
    return f"{c['deleted']:,} rows in {c['seconds']} s ({mb})"


def cell(measured: dict[str, Any] | None) -> str:
    """'6.41 (1.3/93)': wall ms, then its statements' server ms and shared buffers."""
    if measured is None:
        return "—"
    if "key" not in measured:
        return f"{measured['ms']:,}"
    return f"{measured['ms']:,} ({measured['server_ms']:.1f}/{measured['buffers']:,})"


def table(results: dict[str, Any]) -> str:
    """Operation by size, and the key nodes at the largest size."""
    sizes_ = list(results["sizes"])
    largest = results["sizes"][sizes_[-1]]
    head = " | ".join(f"{int(s):,}" for s in sizes_)
    lines = [
        f"| operation: ms (server ms/buffers) | {head} | key nodes at {int(sizes_[-1]):,}, "
        "slowest statement (planning + execution ms) |",
        "|---" * (len(sizes_) + 2) + "|",
    ]
    for section in ("ops", "cli", "http"):
        for name, last in largest.get(section, {}).items():
            cells = [results["sizes"][s].get(section, {}).get(name) for s in sizes_]
            key = {"cli": "subprocess", "http": "HTTP"}.get(section, "")
            if "key" in last:
                key = f"{last['key']} ({last['planning_ms']} + {last['explain_ms']})"
            lines.append(f"| {name} | {' | '.join(cell(c) for c in cells)} | {key} |")
    cleaned = [results["sizes"][s].get("cleanup") for s in sizes_]
    shown = " | ".join(cleanup_cell(c) if c else "—" for c in cleaned)
    lines.append(f"| TTL cleanup (7 days) | {shown} | drops day partitions |")
    fills = ", ".join(f"{int(s):,}: {results['sizes'][s]['fill_seconds']} s" for s in sizes_)
    return "\n".join(lines) + f"\n\nFill (incl. VACUUM ANALYZE): {fills}"


def main() -> None:
    """Fill every size, measure them side by side, clean up last; save; print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 1_000_000, 5_000_000])
    parser.add_argument("--table", action="store_true", help="Only print the saved results.")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(RESULTS.read_text())))
        return
    results: dict[str, Any] = {"about": about(), "sizes": {}}
    rows = sorted(args.rows)
    with ExitStack() as stack:
        ledgers = [stack.enter_context(ledger(n)) for n in rows]
        in_process(ledgers)
        front_doors(ledgers)
        for n, lg in zip(rows, ledgers, strict=True):
            lg.result["cleanup"] = cleanup(lg.db)  # last: it changes the data
            results["sizes"][str(n)] = lg.result
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
