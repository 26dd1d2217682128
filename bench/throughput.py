#!/usr/bin/env python
"""Throughput of planq's ledger-tracked phase jobs against raw Celery and Procrastinate.

A script, not a test. In one run, on the same Redis broker (a dedicated db, flushed at
start), the same PostgreSQL server and, for the Celery rows, the same pool
(`celery worker -P prefork -c 2`, prefetch 1, late acks):

1. raw      N no-op tasks of a bare Celery app (bench/raw_app.py); each INCRs a Redis
            counter, which is polled for completion.
2. planq    N `execute_plan.delay(plan_id)` jobs with the `noop` executor and the ledger on
            a throw-away PostgreSQL database (migrated with store.migrate.upgrade, dropped at
            the end); completion is every job row `succeeded`.
3. procrastinate
            the peer that does the same durable work per job on PostgreSQL (insert, claim,
            finish): N `noop.defer()` calls of bench/procrastinate_app.py, on its own
            throw-away database (schema from Procrastinate's SchemaManager), consumed by
            2 `procrastinate worker` processes x concurrency 4 (2 processes, like prefork
            -c 2; 4 jobs in flight each, as issue 10 measured); completion is every row in
            procrastinate_jobs `succeeded`. End to end only: its workers cannot be paused
            and resumed without restarting them, and start-up would pollute a drain.
4. celery-sql
            plain Celery keeping job states in SQL (bench/celery_sql_app.py): the raw app's
            settings plus `result_backend = db+postgresql+psycopg://...` on its own
            throw-away database, task_track_started, result_extended and task events on;
            N `noop_sql.apply_async()`; completion is N SUCCESS rows in celery_taskmeta.
            Skip it with --no-celery-sql.

Optionally (on by default) a `raw+events` row: the raw app with planq's task-event
settings (worker_send_task_events, task_send_sent_event, task_track_started), so the cost
of events can be told apart from the cost of the ledger; with --threads, a
`raw-threads+events` row too, the same on the threads pool.

For each system the script warms the worker up (not counted), then measures:
  * end to end: from the first enqueue until all N are done (the producer enqueues in a
    loop while the worker consumes); jobs/s = N / that time;
  * enqueue latency of each producer call (raw: apply_async; planq: delay(), which
    includes the ledger transaction, the publish and the dispatched stamp; procrastinate:
    defer(), one INSERT through its sync connector);
  * drain (unless --no-drain; Celery rows only): the worker stops consuming
    (cancel_consumer), N messages are enqueued, the worker resumes (add_consumer) and the
    time to empty the queue is taken: the worker's own throughput, with no producer
    competing for the 2 cores.

Every run prints planq/raw and planq/Procrastinate side by side.

Usage:
  .venv/bin/pip install -e '.[bench]'   # Procrastinate
  .venv/bin/python bench/throughput.py [--jobs 2000] [--rounds 1] [--out FILE]

Needs Redis at 127.0.0.1:6379 and PostgreSQL at 127.0.0.1:5432 (trust auth, user postgres).
Worker subprocesses are started in their own process group and always killed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RAW_QUEUE = "bench.raw"
PLANQ_QUEUE = "planq.execute"
PROCRASTINATE_QUEUE = "bench.procrastinate"
DEFAULT_OUT = ROOT / "bench" / "results" / "throughput.json"


# -- small helpers --------------------------------------------------------------------------
def log(msg: str) -> None:
    """Progress on stderr, so stdout keeps only the table."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def percentile(values: list[float], pct: float) -> float:
    """Linear-interpolated percentile (pct in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * pct / 100.0
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def latency_summary(seconds: list[float]) -> dict[str, float]:
    """p50/p90/p99/mean/max in milliseconds."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "p50_ms": round(percentile(ms, 50), 3),
        "p90_ms": round(percentile(ms, 90), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan"),
        "max_ms": round(max(ms), 3) if ms else float("nan"),
    }


#: Recorded per system, to show that both sides ran with the same delivery settings.
CHECKED_SETTINGS = (
    "task_serializer",
    "accept_content",
    "task_acks_late",
    "task_reject_on_worker_lost",
    "worker_prefetch_multiplier",
    "task_ignore_result",
    "worker_send_task_events",
    "task_send_sent_event",
    "task_track_started",
)


class BenchError(RuntimeError):
    """The benchmark could not complete (a worker died, a job failed, a timeout)."""


# -- worker subprocesses ----------------------------------------------------------------------
class GroupProcess:
    """One command in its own process group; stop() ends the whole group."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], logdir: Path) -> None:
        self.name = name
        self.cmd = cmd
        self.logfile = logdir / f"{name}.log"
        self.env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log(f"starting {self.name}: {' '.join(self.cmd[1:])}")
        out = self.logfile.open("wb")
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the pool children die with it
        )
        out.close()

    def pids(self) -> list[int]:
        """Process-group leaders (for CPU attribution)."""
        return [] if self.proc is None else [self.proc.pid]

    def check_alive(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise BenchError(
                f"{self.name} worker exited (rc={self.proc and self.proc.returncode}); "
                f"log tail:\n{self.tail()}"
            )

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM the group, then SIGKILL whatever is left."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        pgid = proc.pid  # start_new_session: the group id is the leader's pid
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                log(f"{self.name} did not stop on SIGTERM; SIGKILL")
        # The leader may be gone while pool children linger: kill the group regardless.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        log(f"stopped {self.name} (rc={proc.returncode})")


class WorkerProcess(GroupProcess):
    """A `celery worker` in its own process group."""

    def __init__(
        self,
        name: str,
        app_module: str,
        queue: str,
        env: dict[str, str],
        args: Any,
        logdir: Path,
        pool: tuple[str, int] | None = None,
    ) -> None:
        self.nodename = f"{name}-{os.getpid()}@{socket.gethostname()}"
        self.queue = queue
        kind, concurrency = pool or ("prefork", args.concurrency)
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app_module,
            "worker",
            "-P",
            kind,
            "-c",
            str(concurrency),
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
            "-Q",
            queue,
            "-n",
            self.nodename,
            "-l",
            args.worker_loglevel,
        ]
        super().__init__(name, cmd, env, logdir)

    @property
    def display_cmd(self) -> str:
        return " ".join(["celery", *self.cmd[3:]])

    def wait_ready(self, app: Any, timeout: float) -> None:
        """Until the worker answers a ping (its consumer and control channel are up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            replies = app.control.ping(destination=[self.nodename], timeout=1.0)
            if replies:
                return
        raise BenchError(f"{self.name} worker not ready after {timeout}s; log:\n{self.tail()}")


class ProcrastinateWorkers:
    """N `procrastinate worker` processes, each in its own process group, run as one worker.

    Two processes stand in for prefork -c 2; each runs `concurrency` jobs at once (sync
    tasks go to threads). Ready when every process is registered in procrastinate_workers
    and has a LISTEN connection open, so no worker is still starting when a round begins.
    """

    def __init__(
        self,
        name: str,
        dsn: str,
        env: dict[str, str],
        args: Any,
        logdir: Path,
        shape: tuple[int, int] | None = None,
    ) -> None:
        self.name = name
        self.dsn = dsn
        processes, concurrency = shape or (
            args.procrastinate_workers,
            args.procrastinate_concurrency,
        )
        self.args_text = [
            "--app",
            "bench.procrastinate_app.app",
            "--log-level",
            args.worker_loglevel.lower(),
            "worker",
            "--queues",
            PROCRASTINATE_QUEUE,
            "--concurrency",
            str(concurrency),
        ]
        self.procs = [
            GroupProcess(
                f"{name}-{i + 1}",
                [
                    sys.executable,
                    "-m",
                    "procrastinate",
                    *self.args_text,
                    "--name",
                    f"{name}-{i + 1}-{os.getpid()}",
                ],
                env,
                logdir,
            )
            for i in range(processes)
        ]

    @property
    def display_cmd(self) -> str:
        return f"{len(self.procs)} x procrastinate {' '.join(self.args_text)}"

    def start(self) -> None:
        for proc in self.procs:
            proc.start()

    def pids(self) -> list[int]:
        return [pid for proc in self.procs for pid in proc.pids()]

    def check_alive(self) -> None:
        for proc in self.procs:
            proc.check_alive()

    def tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail()}" for p in self.procs)

    def wait_ready(self, _app: Any, timeout: float) -> None:
        import psycopg

        want = len(self.procs)
        listening = (
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query ILIKE 'LISTEN %'"
        )
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                self.check_alive()
                row = conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()
                registered = row[0] if row else 0
                row = conn.execute(listening).fetchone()
                if registered >= want and (row[0] if row else 0) >= want:
                    return
                time.sleep(0.1)
        raise BenchError(f"{self.name} workers not ready after {timeout}s; logs:\n{self.tail()}")

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()


# -- CPU attribution --------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class CpuSampler:
    """CPU seconds per process category between two /proc snapshots (Linux only).

    Categories: the worker's main process, its pool children, PostgreSQL backends,
    redis-server, this bench process (the producer), the backend of the bench's own
    completion poll (BENCH_POLL: harness, not the system: left out of "postgres" and of the
    total) and everything else. A process that exits inside the window is not counted
    (none of the measured ones do); one born inside it counts whole. Procrastinate has no
    pool children: its worker processes run the jobs and count as "worker main".
    """

    def __init__(self, worker: Worker, poll_backends: Callable[[], set[int]] = set) -> None:
        self.worker = worker
        self.poll_backends = poll_backends

    def _category(self, pid: int, comm: str, pgid: int) -> str:
        leaders = self.worker.pids()
        if pid in leaders:
            return "worker main"
        if pgid in leaders:
            return "worker children"
        if pid == os.getpid():
            return "bench producer"
        if comm.startswith("postgres") or comm.startswith("postmaster"):
            return "postgres"
        if comm.startswith("redis-server"):
            return "redis"
        return "other"

    def snapshot(self) -> dict[int, tuple[str, int]]:
        out: dict[int, tuple[str, int]] = {}
        polls = self.poll_backends()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                raw = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            comm = raw[raw.index("(") + 1 : raw.rindex(")")]
            fields = raw[raw.rindex(")") + 2 :].split()
            pgid, utime, stime = int(fields[2]), int(fields[11]), int(fields[12])
            pid = int(entry.name)
            category = BENCH_POLL if pid in polls else self._category(pid, comm, pgid)
            if category == "postgres" and not _is_backend(entry.path):
                category = POSTGRES_BACKGROUND
            out[pid] = (category, utime + stime)
        return out

    @staticmethod
    def idle_ticks() -> tuple[int, int]:
        """(idle+iowait, total) jiffies of all CPUs."""
        parts = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return parts[3] + parts[4], sum(parts)

    def window(self) -> CpuWindow:
        return CpuWindow(self, self.snapshot(), self.idle_ticks(), time.perf_counter())


POSTGRES_BACKGROUND = "of which postgres background"
#: The PostgreSQL backend that answers the bench's completion poll (`System.done`, every
#: --poll seconds once the producer is done): the harness's cost, not the system's.
BENCH_POLL = "bench poll"


def _is_backend(proc: str) -> bool:
    """Whether a PostgreSQL process serves a client (its title names the client's address)."""
    try:
        title = Path(proc, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return ("(" in title and ")" in title) or "[local]" in title


class CpuWindow:
    """An open measurement window; close(jobs) gives CPU ms per job by category."""

    def __init__(
        self, sampler: CpuSampler, snap: dict[int, tuple[str, int]], idle: tuple[int, int], t: float
    ) -> None:
        self.sampler, self.snap, self.idle, self.t = sampler, snap, idle, t

    def close(self, jobs: int) -> dict[str, float]:
        end = self.sampler.snapshot()
        idle_end, total_end = self.sampler.idle_ticks()
        wall = time.perf_counter() - self.t
        per: Counter[str] = Counter()
        for pid, (cat, ticks) in end.items():
            # A process born inside the window (a backend a pool opened as its threads
            # needed one) spent all its CPU inside it.
            per[cat] += ticks - self.snap[pid][1] if pid in self.snap else ticks
        busy = (total_end - self.idle[1]) - (idle_end - self.idle[0])
        # CPU the snapshots cannot name: processes that started and ended inside the window
        # (another test run, say). A large value means the numbers are not trustworthy.
        per["unattributed"] = max(busy - sum(per.values()), 0)
        # "postgres" is every PostgreSQL process; POSTGRES_BACKGROUND says how much of it was
        # not a client's backend (WAL writer, checkpointer, autovacuum, ...).
        background = per.pop(POSTGRES_BACKGROUND, 0)
        per["postgres"] += background
        out = {cat: round(ticks / _TICK * 1000.0 / jobs, 3) for cat, ticks in sorted(per.items())}
        out[POSTGRES_BACKGROUND] = round(background / _TICK * 1000.0 / jobs, 3)
        measured = sum(v for k, v in per.items() if k not in ("unattributed", BENCH_POLL))
        out["total"] = round(measured / _TICK * 1000.0 / jobs, 3)
        out["machine_busy_pct"] = round(100.0 * busy / max(total_end - self.idle[1], 1), 1)
        out["wall_s"] = round(wall, 3)
        return out


# -- one system under test ---------------------------------------------------------------------
@dataclass
class SystemResult:
    """What was measured for one system."""

    name: str
    jobs: int
    rounds: int
    e2e_seconds: list[float] = field(default_factory=list)
    enqueue_seconds: list[float] = field(default_factory=list)
    drain_seconds: list[float] = field(default_factory=list)
    drain_jobs: list[int] = field(default_factory=list)
    latencies: list[list[float]] = field(default_factory=list)  # per e2e round
    cpu_e2e: list[dict[str, float]] = field(default_factory=list)
    cpu_drain: list[dict[str, float]] = field(default_factory=list)
    worker_cmd: str = ""
    celery_settings: dict[str, Any] = field(default_factory=dict)
    worker_settings: dict[str, Any] = field(default_factory=dict)  # non-Celery systems
    notes: list[str] = field(default_factory=list)

    def _clean(self, cpu: list[dict[str, float]]) -> list[int]:
        """Indexes of the rounds no foreign process disturbed (all of them if none is clean)."""
        clean = [i for i, c in enumerate(cpu) if not disturbed(c)]
        return clean or list(range(len(cpu)))

    @property
    def jobs_per_s(self) -> float:
        keep = self._clean(self.cpu_e2e)
        return statistics.median(self.jobs / self.e2e_seconds[i] for i in keep)

    @property
    def enqueue_per_s(self) -> float:
        keep = self._clean(self.cpu_e2e)
        return statistics.median(self.jobs / self.enqueue_seconds[i] for i in keep)

    @property
    def drain_per_s(self) -> float | None:
        if not self.drain_seconds:
            return None
        keep = self._clean(self.cpu_drain)
        return statistics.median(self.drain_jobs[i] / self.drain_seconds[i] for i in keep)

    @property
    def clean_latencies(self) -> list[float]:
        return [x for i in self._clean(self.cpu_e2e) for x in self.latencies[i]]

    def clean_rounds(self) -> str:
        e2e = sum(not disturbed(c) for c in self.cpu_e2e)
        drain = sum(not disturbed(c) for c in self.cpu_drain)
        text = f"{e2e}/{len(self.cpu_e2e)}"
        return f"{text}, {drain}/{len(self.cpu_drain)}" if self.cpu_drain else text

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("latencies")
        data["disturbed_e2e_rounds"] = [i + 1 for i, c in enumerate(self.cpu_e2e) if disturbed(c)]
        data["disturbed_drain_rounds"] = [
            i + 1 for i, c in enumerate(self.cpu_drain) if disturbed(c)
        ]
        data["jobs_per_s"] = round(self.jobs_per_s, 1)
        data["enqueue_per_s"] = round(self.enqueue_per_s, 1)
        data["drain_jobs_per_s"] = None if self.drain_per_s is None else round(self.drain_per_s, 1)
        data["enqueue_latency"] = latency_summary(self.clean_latencies)
        return data


def disturbed(cpu: dict[str, float]) -> bool:
    """Whether processes outside the benchmark burned a noticeable share of CPU in a window.

    Another engineer's test run on the same 2 cores skews a round; such rounds are kept in
    the JSON but left out of the medians when at least one clean round exists.
    """
    foreign = cpu.get("other", 0.0) + cpu.get("unattributed", 0.0)
    return foreign > max(0.5, 0.1 * cpu.get("total", 0.0))


Worker = WorkerProcess | ProcrastinateWorkers


@dataclass
class System:
    """How to start, feed and watch one system."""

    name: str
    worker: Worker
    app: Any  # the producer-side Celery app (for control commands); None for Procrastinate
    make_enqueue: Callable[[int], list[Callable[[], Any]]]  # n -> n producer calls
    done: Callable[[], int]  # how many jobs have finished (monotonic)
    reset: Callable[[], None] = lambda: None
    prepare: Callable[[], None] = lambda: None  # before the worker starts (producer conf)
    worker_settings: dict[str, Any] = field(default_factory=dict)  # set for non-Celery systems
    #: PostgreSQL backend pids of the completion poll's connection (CpuSampler: BENCH_POLL).
    poll_backends: Callable[[], set[int]] = set


def wait_done(system: System, target: int, args: Any, started: float) -> float:
    """Poll until system.done() >= target; the perf_counter time it was seen."""
    deadline = started + args.timeout
    checks = 0
    last, moved = -1, time.perf_counter()
    while True:
        now = time.perf_counter()
        count = system.done()
        if count >= target:
            return now
        if count != last:
            last, moved = count, now
        if now > deadline or now - moved > args.stall:
            raise BenchError(
                f"{system.name}: only {count} of {target} done after {now - started:.0f}s "
                f"(no progress for {now - moved:.0f}s; were Redis or PostgreSQL restarted?)"
            )
        checks += 1
        if checks % 50 == 0:
            system.worker.check_alive()
        time.sleep(args.poll)


def run_calls(calls: list[Callable[[], Any]], latencies: list[float] | None) -> float:
    """Make every producer call, timing each; the perf_counter time of the first."""
    first = time.perf_counter()
    for call in calls:
        t = time.perf_counter()
        call()
        if latencies is not None:
            latencies.append(time.perf_counter() - t)
    return first


def quiesce(system: System, settle: float = 0.3, timeout: float = 30.0) -> int:
    """Wait until done() stops moving (messages reserved before a cancel_consumer ran)."""
    deadline = time.monotonic() + timeout
    last = system.done()
    while time.monotonic() < deadline:
        time.sleep(settle)
        now = system.done()
        if now == last:
            return now
        last = now
    return last


def start_py_spy(system: System, args: Any, round_no: int) -> subprocess.Popen[bytes] | None:
    """Sample the worker and its pool children during a drain (--py-spy DIR), if asked."""
    if args.py_spy is None or not isinstance(system.worker, WorkerProcess):
        return None
    if system.worker.proc is None:
        return None
    args.py_spy.mkdir(parents=True, exist_ok=True)
    out = args.py_spy / f"{system.name}-drain{round_no + 1}.txt"
    cmd = [
        str(Path(sys.executable).with_name("py-spy")),
        "record",
        "--subprocesses",
        "--idle",
        "--rate",
        "250",
        "--format",
        "raw",
        "-o",
        str(out),
        "-p",
        str(system.worker.proc.pid),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # let it attach before the drain starts
    log(f"py-spy sampling {system.name} into {out}")
    return proc


def stop_py_spy(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGINT makes py-spy write its output."""
    if proc is None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def bench_system(system: System, args: Any) -> SystemResult:
    """Start the worker, warm up, then the measured rounds; the worker is always stopped."""
    result = SystemResult(system.name, args.jobs, args.rounds)
    cpu = CpuSampler(system.worker, system.poll_backends)
    result.worker_cmd = system.worker.display_cmd
    worker = system.worker
    drain = args.drain and isinstance(worker, WorkerProcess)
    if isinstance(worker, ProcrastinateWorkers) and args.job_seconds > 0:
        slots = args.procrastinate_workers * args.procrastinate_concurrency
        if slots != args.concurrency:
            result.notes.append(
                f"{slots} job slots against prefork's {args.concurrency}: with --job-seconds it "
                f"can sleep {slots} jobs at once (--procrastinate-concurrency "
                f"{max(args.concurrency // args.procrastinate_workers, 1)} for equal slots)"
            )
    if args.drain and not drain:
        result.notes.append(
            "drain not measured: its workers cannot stop and resume fetching without a "
            "restart, and worker start-up would be in the timing"
        )
    try:
        system.prepare()
        if system.app is not None:
            conf = system.app.conf
            result.celery_settings = {k: conf.get(k) for k in CHECKED_SETTINGS}
        result.worker_settings = system.worker_settings
        system.worker.start()
        system.worker.wait_ready(system.app, timeout=90)
        system.reset()

        log(f"{system.name}: warm-up with {args.warmup} jobs")
        base = system.done()
        started = run_calls(system.make_enqueue(args.warmup), None)
        wait_done(system, base + args.warmup, args, started)

        for r in range(args.rounds):
            # End to end: the producer enqueues while the worker consumes.
            calls = system.make_enqueue(args.jobs)
            base = system.done()
            window = cpu.window()
            result.latencies.append([])
            started = run_calls(calls, result.latencies[-1])
            enqueued = time.perf_counter()
            finished = wait_done(system, base + args.jobs, args, started)
            result.cpu_e2e.append(window.close(args.jobs))
            result.enqueue_seconds.append(enqueued - started)
            result.e2e_seconds.append(finished - started)
            log(
                f"{system.name} round {r + 1}: {args.jobs} jobs in {finished - started:.2f}s "
                f"({args.jobs / (finished - started):.0f}/s; enqueue {enqueued - started:.2f}s)"
            )

            if drain and isinstance(worker, WorkerProcess):
                result.drain_jobs.append(0)
                result.drain_seconds.append(float("nan"))
                control = system.app.control
                dest = [worker.nodename]
                control.cancel_consumer(worker.queue, destination=dest, reply=True)
                before = quiesce(system)
                run_calls(system.make_enqueue(args.jobs), None)
                ran = quiesce(system) - before  # reserved before the cancel took effect
                pending = args.jobs - ran
                spy = start_py_spy(system, args, r)
                window = cpu.window()
                started = time.perf_counter()
                control.add_consumer(worker.queue, destination=dest, reply=True)
                finished = wait_done(system, before + args.jobs, args, started)
                result.cpu_drain.append(window.close(pending))
                stop_py_spy(spy)
                result.drain_jobs[-1] = pending
                result.drain_seconds[-1] = finished - started
                log(
                    f"{system.name} drain {r + 1}: {pending} queued jobs in "
                    f"{finished - started:.2f}s ({pending / (finished - started):.0f}/s)"
                )
    finally:
        system.worker.stop()
    return result


# -- raw Celery ---------------------------------------------------------------------------------
def raw_system(
    args: Any, logdir: Path, name: str, events: bool, pool: tuple[str, int] | None = None
) -> System:
    os.environ["BENCH_BROKER_URL"] = args.redis_url
    import redis

    import bench.raw_app as raw_app

    client = redis.Redis.from_url(args.redis_url)
    task = raw_app.app.tasks["bench.noop"]
    worker = WorkerProcess(
        name,
        "bench.raw_app",
        RAW_QUEUE,
        {
            "BENCH_BROKER_URL": args.redis_url,
            "BENCH_RAW_EVENTS": "1" if events else "0",
            "BENCH_JOB_SECONDS": str(args.job_seconds),
        },
        args,
        logdir,
        pool,
    )
    return System(
        name=name,
        worker=worker,
        app=raw_app.app,
        make_enqueue=lambda n: [task.apply_async] * n,
        done=lambda: int(client.get(raw_app.COUNTER_KEY) or 0),
        reset=lambda: client.set(raw_app.COUNTER_KEY, 0),
        prepare=lambda: set_events(raw_app.app, events),
    )


# -- planq ------------------------------------------------------------------------------------
def create_pg_database(admin_url: str, prefix: str = "planq_bench") -> tuple[str, str]:
    """A fresh database; (its name, its URL)."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = admin_url.rsplit("/", 1)[0]
    return name, f"{base}/{name}"


def drop_pg_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def seed_plans(database_url: str, count: int) -> list[str]:
    """Plans in Strategize/COMPLETE, written through the plan store (500 per transaction)."""
    from planq.domain.plans import Plan, PlanPhase, PlanStatus
    from planq.store import Database, sql_ledger

    db = Database(database_url)
    try:
        _, plans = sql_ledger(db)
        ids: list[str] = []
        for start in range(0, count, 500):
            with plans.transaction():
                for i in range(start, min(start + 500, count)):
                    plan = Plan(
                        name=f"bench-{i}",
                        phase=PlanPhase.strategize,
                        status=PlanStatus.complete,
                    )
                    plans.add(plan)
                    ids.append(plan.plan_id)
        return ids
    finally:
        db.close()


EVENT_SETTINGS = ("worker_send_task_events", "task_send_sent_event", "task_track_started")


def set_events(app: Any, on: bool) -> None:
    """Producer side of the task-event settings (the worker side comes from its module)."""
    app.conf.update(dict.fromkeys(EVENT_SETTINGS, on))


LEDGER_SYSTEMS = ("planq", "planq-noev")
#: planq with tracing on: the SDK, its batch processor, OTLP/HTTP to bench/otlp_sink.py.
#: Last: the SDK is installed in the producer process once, for the rest of the run.
OTEL_SYSTEM = "planq+otel"
#: The suffix of a ledger row run with group commit off (PLANQ_GROUP_COMMIT_MS=0).
NO_GROUP_COMMIT = "-nogc"
#: The rows of `--threads N` (one worker process, N jobs at once): raw Celery, planq with
#: group commit on and off, and Procrastinate (one process, concurrency N).
RAW_THREADS, PLANQ_THREADS, PEER_THREADS = "raw-threads", "planq-threads", "procrastinate-threads"
#: raw Celery on the same threads pool with planq's task events on (what Flower needs):
#: Celery's own share of a planq-threads worker's CPU (with the raw+events row's flag).
RAW_THREADS_EVENTS = RAW_THREADS + "+events"


def otlp_sink(logdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start the local OTLP receiver (its own process): (process, traces endpoint)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    out = open(logdir / "otlp-sink.log", "ab")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.otlp_sink", str(port)], cwd=ROOT, stdout=out, stderr=out
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe, contextlib.suppress(OSError):
            probe.connect(("127.0.0.1", port))
            return proc, f"http://127.0.0.1:{port}/v1/traces"
        time.sleep(0.05)
    proc.kill()
    raise BenchError("the OTLP sink did not start")


def ledger_system(
    name: str,
    args: Any,
    logdir: Path,
    database_url: str,
    plan_ids: list[str],
    pool: tuple[str, int] | None = None,
) -> tuple[System, Callable[[], None]]:
    """One ledger-backed system on its own database: (system, close).

    A name ending in NO_GROUP_COMMIT runs with PLANQ_GROUP_COMMIT_MS=0 (on a threads pool:
    every claim and finish alone); the others keep the default window.
    """
    import psycopg

    env = {
        "PLANQ_BROKER_URL": args.redis_url,
        "PLANQ_DATABASE_URL": database_url,
        "PLANQ_DEFAULT_EXECUTOR": "bench.executors:sleep" if args.job_seconds else "noop",
        "BENCH_JOB_SECONDS": str(args.job_seconds),
        "PLANQ_GROUP_COMMIT_MS": "0" if name.endswith(NO_GROUP_COMMIT) else "2",
    }
    sink: subprocess.Popen[bytes] | None = None
    if name == OTEL_SYSTEM:  # tracing on in the producer (bootstrap) and every worker process
        sink, endpoint = otlp_sink(logdir)
        env.update(
            {
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
                "OTEL_SERVICE_NAME": "planq-bench",
            }
        )
    os.environ.update(env)  # the producer apps read the same environment as the workers
    from planq.worker_config.bootstrap import bootstrap
    from planq.worker_config.settings import load_settings

    remaining = iter(plan_ids)
    conn_url = database_url.replace("postgresql+psycopg://", "postgresql://")
    conn = {"pg": psycopg.connect(conn_url, autocommit=True)}

    def done() -> int:
        query = "SELECT status, count(*) FROM async_jobs GROUP BY status"
        try:
            rows = dict(conn["pg"].execute(query).fetchall())
        except psycopg.OperationalError:  # PostgreSQL restarted under us: say so, go on
            log("ledger poll connection lost; reconnecting (this round is suspect)")
            conn["pg"] = psycopg.connect(conn_url, autocommit=True)
            rows = dict(conn["pg"].execute(query).fetchall())
        bad = {s: n for s, n in rows.items() if s in ("failed", "cancelled")}
        if bad:
            raise BenchError(f"{name} jobs ended badly: {bad}")
        return int(rows.get("succeeded", 0))

    # planq itself, configured as it ships; "planq-noev" is the same app with every Celery
    # task event off (its worker module, bench/planq_noevents.py, turns them off too).
    events = not name.startswith("planq-noev")
    app = bootstrap(load_settings())
    if not events:
        set_events(app, False)
    execute_plan = app.tasks["planq.execute_plan"]

    def delay(plan_id: str) -> Callable[[], Any]:
        def call() -> Any:
            result = execute_plan.delay(plan_id)
            if result is None:
                raise BenchError(f"execute_plan.delay({plan_id}) queued no job")
            return result

        return call

    def make_enqueue(n: int) -> list[Callable[[], Any]]:
        return [delay(next(remaining)) for _ in range(n)]

    module = "planq.worker_config" if events else "bench.planq_noevents"
    worker = WorkerProcess(name, module, PLANQ_QUEUE, env, args, logdir, pool)

    def close() -> None:
        from planq.tasks.runtime import reset_runtime

        reset_runtime(app)
        conn["pg"].close()
        if sink is not None:
            from planq.tasks.tracing import flush

            flush()
            sink.terminate()
            sink.wait(10)
            for key in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
                os.environ.pop(key, None)

    def polls() -> set[int]:
        return {conn["pg"].info.backend_pid}

    system = System(name, worker, app, make_enqueue, done, poll_backends=polls)
    return system, close


# -- Celery with its SQL result backend --------------------------------------------------------
def celery_sql_system(args: Any, logdir: Path, dsn: str) -> tuple[System, Callable[[], None]]:
    """Plain Celery keeping job states in its own throw-away database (bench/celery_sql_app.py)."""
    import psycopg

    url = dsn.replace("postgresql://", "postgresql+psycopg://", 1)
    env = {
        "BENCH_BROKER_URL": args.redis_url,
        "BENCH_CELERY_SQL_URL": url,
        "BENCH_JOB_SECONDS": str(args.job_seconds),
    }
    os.environ.update(env)  # read by bench.celery_sql_app, here and in the worker
    import bench.celery_sql_app as sql_app

    if url != sql_app.DATABASE_URL:  # the module reads its database once, at import
        raise BenchError("bench.celery_sql_app was already imported for another database")
    sql_app.app.backend.ResultSession().close()  # creates celery_taskmeta before the worker
    set_events(sql_app.app, True)
    conn = {"pg": psycopg.connect(dsn, autocommit=True)}

    def done() -> int:
        query = "SELECT status, count(*) FROM celery_taskmeta GROUP BY status"
        try:
            rows = dict(conn["pg"].execute(query).fetchall())
        except psycopg.OperationalError:  # PostgreSQL restarted under us: say so, go on
            log("celery-sql poll connection lost; reconnecting (this round is suspect)")
            conn["pg"] = psycopg.connect(dsn, autocommit=True)
            rows = dict(conn["pg"].execute(query).fetchall())
        bad = {s: n for s, n in rows.items() if s in ("FAILURE", "REVOKED")}
        if bad:
            raise BenchError(f"celery-sql tasks ended badly: {bad}")
        return int(rows.get("SUCCESS", 0))

    def close() -> None:
        session = sql_app.app.backend.ResultSession()
        engine = session.get_bind()
        session.close()
        engine.dispose()  # the producer's pool: the database is dropped next
        conn["pg"].close()

    task = sql_app.app.tasks["bench.noop_sql"]
    worker = WorkerProcess("celery-sql", "bench.celery_sql_app", sql_app.QUEUE, env, args, logdir)
    system = System(
        "celery-sql",
        worker,
        sql_app.app,
        lambda n: [task.apply_async] * n,
        done,
        poll_backends=lambda: {conn["pg"].info.backend_pid},
    )
    return system, close


# -- Procrastinate ----------------------------------------------------------------------------
def procrastinate_system(
    args: Any,
    logdir: Path,
    dsn: str,
    name: str = "procrastinate",
    shape: tuple[int, int] | None = None,
) -> tuple[System, Callable[[], None]]:
    """Procrastinate on its own fresh database, schema applied by its SchemaManager.

    `shape`: (worker processes, concurrency each); default the prefork peer's. A second
    row on the same database (the module reads its DSN once) starts from emptied tables.
    """
    import psycopg

    env = {"BENCH_PROCRASTINATE_DSN": dsn, "BENCH_JOB_SECONDS": str(args.job_seconds)}
    os.environ.update(env)  # read by bench.procrastinate_app, here and in the workers
    import bench.procrastinate_app as peer

    if dsn != peer.DSN:  # the module reads its database once, at import
        raise BenchError("bench.procrastinate_app was already imported for another database")
    # Not opened async, the app's PsycopgConnector hands sync calls (schema, defer) to a
    # SyncPsycopgConnector; app.open() opens that one's psycopg pool.
    peer.app.open()
    conn = psycopg.connect(dsn, autocommit=True)
    if conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone() == (None,):
        peer.app.schema_manager.apply_schema()
    else:  # the same database as the row before: its rows out of the way
        conn.execute("TRUNCATE procrastinate_jobs CASCADE")

    def done() -> int:
        query = "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY status"
        rows = dict(conn.execute(query).fetchall())
        bad = {s: n for s, n in rows.items() if s in ("failed", "cancelled", "aborted")}
        if bad:
            raise BenchError(f"procrastinate jobs ended badly: {bad}")
        return int(rows.get("succeeded", 0))

    def close() -> None:
        peer.app.close()
        conn.close()

    worker = ProcrastinateWorkers(name, dsn, env, args, logdir, shape)
    processes, concurrency = shape or (args.procrastinate_workers, args.procrastinate_concurrency)
    settings = {
        "procrastinate": version("procrastinate"),
        "worker_processes": processes,
        "concurrency_per_process": concurrency,
        "listen_notify": True,
        "task": "sync def (Procrastinate runs it in a thread)",
        "producer": "Task.defer(), one call per job, through SyncPsycopgConnector "
        "(psycopg_pool.ConnectionPool with check_connection, Procrastinate's default)",
    }
    system = System(
        name,
        worker,
        None,
        lambda n: [peer.noop.defer] * n,
        done,
        worker_settings=settings,
        poll_backends=lambda: {conn.info.backend_pid},
    )
    return system, close


# -- environment ------------------------------------------------------------------------------
def machine_info(args: Any) -> dict[str, Any]:
    import psycopg
    import redis

    info: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    pkgs = ("celery", "kombu", "billiard", "redis", "sqlalchemy", "psycopg", "pydantic")
    for pkg in (*pkgs, "procrastinate", "psycopg-pool"):
        with contextlib.suppress(Exception):
            info[pkg] = version(pkg)
    with contextlib.suppress(Exception):
        info["redis_server"] = redis.Redis.from_url(args.redis_url).info("server")["redis_version"]
    with contextlib.suppress(Exception), psycopg.connect(args.pg_admin_url) as conn:
        info["postgres_server"] = conn.execute("SHOW server_version").fetchone()[0]
    return info


def source_info() -> dict[str, Any]:
    """Which planq was measured: the git commit of ROOT (and whether it had local edits).

    A snapshot made with `git archive` has no .git: a `.bench-source-rev` file in ROOT
    names its commit instead.
    """
    info: dict[str, Any] = {"root": str(ROOT)}
    stamp = ROOT / ".bench-source-rev"
    if stamp.exists():
        info["rev"] = stamp.read_text().strip()
        info["snapshot"] = True
        return info
    with contextlib.suppress(Exception):
        git = ["git", "-C", str(ROOT)]
        info["rev"] = subprocess.check_output([*git, "rev-parse", "HEAD"], text=True).strip()
        dirty = subprocess.check_output(
            [*git, "status", "--porcelain", "--untracked-files=no"], text=True
        )
        info["local_edits"] = sorted(line[3:] for line in dirty.splitlines())
    return info


def machine_busy(seconds: float) -> float:
    """How busy all CPUs were over the next `seconds` (percent)."""
    idle0, total0 = CpuSampler.idle_ticks()
    time.sleep(seconds)
    idle1, total1 = CpuSampler.idle_ticks()
    return round(100.0 * (1 - (idle1 - idle0) / max(total1 - total0, 1)), 1)


# -- report -----------------------------------------------------------------------------------
def table(results: dict[str, SystemResult], args: Any) -> str:
    header = (
        f"{'system':<22} {'jobs/s e2e':>10} {'drain/s':>8} {'enqueue/s':>9} "
        f"{'enq p50 ms':>10} {'enq p99 ms':>10} {'clean rounds':>12}"
    )
    lines = [header, "-" * len(header)]
    for r in results.values():
        lat = latency_summary(r.clean_latencies)
        drain = "-" if r.drain_per_s is None else f"{r.drain_per_s:.0f}"
        lines.append(
            f"{r.name:<22} {r.jobs_per_s:>10.0f} {drain:>8} {r.enqueue_per_s:>9.0f} "
            f"{lat['p50_ms']:>10.3f} {lat['p99_ms']:>10.3f} {r.clean_rounds():>12}"
        )
    return "\n".join(lines)


def cpu_table(results: dict[str, SystemResult], which: str) -> str:
    """CPU ms per job by process category (first clean round), and how busy the machine was."""
    cats = ["worker main", "worker children", "postgres", "redis", "bench producer"]
    cats += [BENCH_POLL, "other", "unattributed"]
    cols = [*cats, "total", "machine busy %"]
    header = f"{'system':<22} " + " ".join(f"{c:>{max(len(c), 7)}}" for c in cols)
    lines = [f"CPU ms per job ({which}, first clean round):", header, "-" * len(header)]
    for r in results.values():
        rows = r.cpu_drain if which == "drain" else r.cpu_e2e
        if not rows:
            continue
        row = next((c for c in rows if not disturbed(c)), rows[0])
        cells = [f"{row.get(c, 0.0):>{max(len(c), 7)}.2f}" for c in [*cats, "total"]]
        cells.append(f"{row['machine_busy_pct']:>14.0f}")
        lines.append(f"{r.name:<22} " + " ".join(cells))
    return "\n".join(lines)


def ratios(results: dict[str, SystemResult]) -> dict[str, float | None]:
    """Ratios over raw Celery: planq's, and the other rows'."""
    raw, planq = results.get("raw"), results.get("planq")
    if raw is None or planq is None:
        return {}
    out: dict[str, float | None] = {"e2e": round(planq.jobs_per_s / raw.jobs_per_s, 3)}
    if raw.drain_per_s and planq.drain_per_s:
        out["drain"] = round(planq.drain_per_s / raw.drain_per_s, 3)
    for name in ("planq-noev", "procrastinate", "celery-sql"):
        other = results.get(name)
        if other is not None:
            out[f"{name}_e2e"] = round(other.jobs_per_s / raw.jobs_per_s, 3)
            if raw.drain_per_s and other.drain_per_s:
                out[f"{name}_drain"] = round(other.drain_per_s / raw.drain_per_s, 3)
    events = results.get("raw+events")
    if events is not None:
        out["e2e_vs_raw_events"] = round(planq.jobs_per_s / events.jobs_per_s, 3)
        if events.drain_per_s and planq.drain_per_s:
            out["drain_vs_raw_events"] = round(planq.drain_per_s / events.drain_per_s, 3)
    return out


def sql_backend_ratios(results: dict[str, SystemResult]) -> dict[str, float | None]:
    """Ratios of planq over Celery with its SQL result backend (issue 23: 1.5x e2e at least)."""
    peer, planq = results.get("celery-sql"), results.get("planq")
    if peer is None or planq is None:
        return {}
    out: dict[str, float | None] = {"e2e": round(planq.jobs_per_s / peer.jobs_per_s, 3)}
    if peer.drain_per_s and planq.drain_per_s:
        out["drain"] = round(planq.drain_per_s / peer.drain_per_s, 3)
    return out


def peer_ratios(results: dict[str, SystemResult]) -> dict[str, float | None]:
    """Ratios over Procrastinate, the peer doing the same durable work per job."""
    peer, planq = results.get("procrastinate"), results.get("planq")
    if peer is None or planq is None:
        return {}
    out: dict[str, float | None] = {"e2e": round(planq.jobs_per_s / peer.jobs_per_s, 3)}
    noev = results.get("planq-noev")
    if noev is not None:
        out["planq-noev_e2e"] = round(noev.jobs_per_s / peer.jobs_per_s, 3)
    return out


def tracing_ratios(results: dict[str, SystemResult]) -> dict[str, float]:
    """The planq row with tracing on over planq as it ships (the API only, no SDK set up)."""
    on, off = results.get(OTEL_SYSTEM), results.get("planq")
    if on is None or off is None:
        return {}
    out = {
        "e2e": round(on.jobs_per_s / off.jobs_per_s, 3),
        "enqueue": round(on.enqueue_per_s / off.enqueue_per_s, 3),
    }
    if on.drain_per_s and off.drain_per_s:
        out["drain"] = round(on.drain_per_s / off.drain_per_s, 3)
    return out


def threads_ratios(results: dict[str, SystemResult], threads: int) -> dict[str, float]:
    """The rows of one process with many jobs at once (issue 36), over Procrastinate's.

    PostgreSQL CPU per job is the e2e window's `postgres` category (every PostgreSQL
    process, background included), from the first clean round, as the CPU table shows.
    """
    peer = results.get(PEER_THREADS)
    out: dict[str, float] = {}
    if peer is None:
        return out

    def pg(result: SystemResult) -> float:
        rows = result.cpu_e2e
        row = next((c for c in rows if not disturbed(c)), rows[0])
        return row.get("postgres", 0.0)

    for name in (PLANQ_THREADS, PLANQ_THREADS + NO_GROUP_COMMIT, RAW_THREADS, RAW_THREADS_EVENTS):
        mine = results.get(name)
        if mine is None:
            continue
        out[f"{name}/{PEER_THREADS} e2e"] = round(mine.jobs_per_s / peer.jobs_per_s, 3)
        if not name.startswith(RAW_THREADS) and pg(peer) > 0:
            out[f"{name}/{PEER_THREADS} postgres cpu per job"] = round(pg(mine) / pg(peer), 3)
            out[f"{name} postgres ms per job"] = pg(mine)
    out[f"{PEER_THREADS} postgres ms per job"] = pg(peer)
    return out


def ratio_label(key: str, over: str) -> str:
    """'procrastinate_e2e' over raw reads 'procrastinate/raw (e2e)'; plain keys are planq's."""
    for name in ("planq-noev", "procrastinate", "celery-sql"):
        if key.startswith(f"{name}_"):
            return f"{name}/{over} ({key.removeprefix(f'{name}_')})"
    if key.endswith("_vs_raw_events"):
        return f"planq/raw+events ({key.removesuffix('_vs_raw_events')})"
    return f"planq/{over} ({key})"


# -- main -------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=2000, help="jobs per measured round (2000)")
    p.add_argument(
        "--job-seconds",
        type=float,
        default=0.0,
        help="each job sleeps this long (raw task, planq executor and Procrastinate task\n"
        "alike); 0 = no-op (0)",
    )
    p.add_argument("--warmup", type=int, default=50, help="uncounted warm-up jobs (50)")
    p.add_argument("--rounds", type=int, default=1, help="measured rounds; median reported (1)")
    p.add_argument("--concurrency", type=int, default=2, help="prefork processes (2)")
    p.add_argument(
        "--procrastinate-workers",
        type=int,
        default=2,
        help="`procrastinate worker` processes, the peer of prefork -c 2 (2)",
    )
    p.add_argument(
        "--procrastinate-concurrency",
        type=int,
        default=4,
        help="jobs in flight per Procrastinate worker process (4, as issue 10 measured)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=16,
        help="also the rows of one process running this many jobs at once: raw Celery and\n"
        "planq (group commit on and off) on `-P threads -c N`, Procrastinate with one\n"
        "process of concurrency N; 0 = prefork rows only (16)",
    )
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/14", help="dedicated db")
    p.add_argument(
        "--pg-admin-url",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="where the throw-away database is created",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON result ({DEFAULT_OUT})")
    p.add_argument("--timeout", type=float, default=600.0, help="per batch, seconds (600)")
    p.add_argument(
        "--stall", type=float, default=60.0, help="give up after no progress for this long (60)"
    )
    p.add_argument("--poll", type=float, default=0.01, help="completion poll interval (0.01)")
    p.add_argument("--worker-loglevel", default="WARNING")
    p.add_argument("--no-drain", dest="drain", action="store_false", help="skip drain rounds")
    p.add_argument(
        "--no-raw-events",
        dest="raw_events",
        action="store_false",
        help="skip the raw+events attribution row",
    )
    p.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="sample each worker with py-spy during its drain (collapsed stacks into DIR)",
    )
    p.add_argument(
        "--attribution",
        action="store_true",
        help="also run planq with task events off (bench/planq_noevents.py) and raw+events",
    )
    p.add_argument(
        "--tracing",
        action="store_true",
        help="also run planq with tracing on (planq+otel: SDK, batch processor, OTLP/HTTP\n"
        "to a local receiver, bench/otlp_sink.py); needs planq[otel]",
    )
    p.add_argument(
        "--no-celery-sql",
        dest="celery_sql",
        action="store_false",
        help="skip the celery-sql row (Celery with its SQL result backend)",
    )
    p.add_argument(
        "--only",
        choices=["raw", "planq", "procrastinate", "celery-sql"],
        help="run one system only",
    )
    args = p.parse_args(argv)
    if args.threads < 0 or args.threads == 1:
        p.error("--threads must be 0 (off) or at least 2")
    if args.jobs < 1 or args.warmup < 1 or args.rounds < 1:
        p.error("--jobs, --warmup and --rounds must be >= 1")
    if args.procrastinate_workers < 1 or args.procrastinate_concurrency < 1:
        p.error("--procrastinate-workers and --procrastinate-concurrency must be >= 1")
    if args.only in (None, "procrastinate") and importlib.util.find_spec("procrastinate") is None:
        p.error("Procrastinate is not installed: pip install -e '.[bench]' (or --only raw|planq)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import redis

    def _terminate(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)  # run the finally blocks: workers, database

    signal.signal(signal.SIGTERM, _terminate)
    logdir = Path(tempfile.mkdtemp(prefix="planq-bench-"))
    broker = redis.Redis.from_url(args.redis_url)
    broker.flushdb()
    log(f"flushed {args.redis_url}; worker logs in {logdir}")

    busy_before = machine_busy(2.0)
    if busy_before > 25:
        log(f"WARNING: the machine is {busy_before:.0f}% busy before the run: expect noise")
    results: dict[str, SystemResult] = {}
    databases: list[str] = []  # created and not yet dropped
    ok = False
    try:
        if args.only in (None, "raw"):
            results["raw"] = bench_system(raw_system(args, logdir, "raw", events=False), args)
            if args.raw_events or args.attribution:
                results["raw+events"] = bench_system(
                    raw_system(args, logdir, "raw+events", events=True), args
                )
            if args.threads:
                results[RAW_THREADS] = bench_system(
                    raw_system(args, logdir, RAW_THREADS, False, ("threads", args.threads)), args
                )
                if args.raw_events or args.attribution:
                    results[RAW_THREADS_EVENTS] = bench_system(
                        raw_system(
                            args, logdir, RAW_THREADS_EVENTS, True, ("threads", args.threads)
                        ),
                        args,
                    )
        if args.only in (None, "planq"):
            from planq.store.migrate import upgrade

            names: list[tuple[str, tuple[str, int] | None]] = [
                (name, None) for name in (LEDGER_SYSTEMS if args.attribution else ("planq",))
            ]
            if args.tracing:
                names.append((OTEL_SYSTEM, None))
            if args.threads:
                threads = ("threads", args.threads)
                names += [(PLANQ_THREADS, threads), (PLANQ_THREADS + NO_GROUP_COMMIT, threads)]
            count = args.warmup + args.rounds * args.jobs * (2 if args.drain else 1)
            for name, pool in names:
                # Each system gets a fresh ledger, so none pays for another's table growth.
                db_name, database_url = create_pg_database(args.pg_admin_url)
                databases.append(db_name)
                upgrade(database_url)
                t = time.perf_counter()
                plan_ids = seed_plans(database_url, count)
                log(
                    f"{name}: seeded {count} Strategize/COMPLETE plans in a fresh database "
                    f"({time.perf_counter() - t:.1f}s)"
                )
                system, close = ledger_system(name, args, logdir, database_url, plan_ids, pool)
                try:
                    results[name] = bench_system(system, args)
                finally:
                    close()
                drop_pg_database(args.pg_admin_url, db_name)
                databases.remove(db_name)
        if args.only == "celery-sql" or (args.only is None and args.celery_sql):
            db_name, dsn = create_pg_database(args.pg_admin_url, "celery_sql_bench")
            databases.append(db_name)
            system, close = celery_sql_system(args, logdir, dsn)
            try:
                results["celery-sql"] = bench_system(system, args)
            finally:
                close()
            drop_pg_database(args.pg_admin_url, db_name)
            databases.remove(db_name)
        if args.only in (None, "procrastinate"):
            db_name, dsn = create_pg_database(args.pg_admin_url, "procrastinate_bench")
            databases.append(db_name)
            system, close = procrastinate_system(args, logdir, dsn)
            try:
                results["procrastinate"] = bench_system(system, args)
            finally:
                close()
            if args.threads:  # the same database (its module reads the DSN once), emptied
                shape = (1, args.threads)
                system, close = procrastinate_system(args, logdir, dsn, PEER_THREADS, shape)
                try:
                    results[PEER_THREADS] = bench_system(system, args)
                finally:
                    close()
            drop_pg_database(args.pg_admin_url, db_name)
            databases.remove(db_name)
        ok = True
    finally:
        for name in databases:  # each system's close() already released its runtime
            drop_pg_database(args.pg_admin_url, name)  # WITH (FORCE): left connections too
            log(f"dropped database {name}")
        broker.flushdb()
        if not ok:
            log(f"FAILED; worker logs kept in {logdir}")

    out: dict[str, Any] = {
        "benchmark": "planq throughput vs raw Celery, Celery's SQL backend and Procrastinate",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": {
            "jobs": args.jobs,
            "warmup": args.warmup,
            "rounds": args.rounds,
            "pool": f"prefork -c {args.concurrency}",
            "threads_rows": f"-P threads -c {args.threads}" if args.threads else "off",
            "procrastinate_workers": (
                f"{args.procrastinate_workers} processes x concurrency "
                f"{args.procrastinate_concurrency}"
            ),
            "broker": args.redis_url,
            "drain": args.drain,
            "job_seconds": args.job_seconds,
            "executor": "bench.executors:sleep" if args.job_seconds else "noop",
        },
        "machine": {**machine_info(args), "busy_before_pct": busy_before},
        "source": source_info(),
        "results": {k: v.as_dict() for k, v in results.items()},
        "ratio_planq_over_raw": ratios(results),
        "ratio_planq_over_procrastinate": peer_ratios(results),
        "ratio_planq_over_celery_sql": sql_backend_ratios(results),
        "ratio_tracing_on_over_off": tracing_ratios(results),
        "threads": threads_ratios(results, args.threads),
        # Issue 10's targets (2,000 no-op jobs, one run); 0.9x raw is for --job-seconds 0.02.
        "targets": {
            "e2e_over_raw": 0.5,
            "drain_over_raw": 0.6,
            "e2e_over_procrastinate": 1.0,
            "e2e_over_raw_20ms_jobs": 0.9,
            "e2e_over_celery_sql": 1.5,  # issue 23
            # issue 36, at -P threads -c 16 against Procrastinate with concurrency 16:
            "threads_postgres_cpu_over_procrastinate": 0.5,
            "threads_e2e_over_procrastinate": 1.0,
            "e2e_over_raw_prefork_floor": 0.28,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")

    print(table(results, args))
    print()
    print(cpu_table(results, "end to end"))
    if any(r.cpu_drain for r in results.values()):
        print()
        print(cpu_table(results, "drain"))
    for r in results.values():
        for note in r.notes:
            print(f"{r.name}: {note}")
    print()
    over_raw, over_peer = out["ratio_planq_over_raw"], out["ratio_planq_over_procrastinate"]
    if over_raw or over_peer:
        raw_text = "-" if "e2e" not in over_raw else f"{over_raw['e2e']}x raw Celery"
        peer_text = "-" if "e2e" not in over_peer else f"{over_peer['e2e']}x Procrastinate"
        print(f"planq end to end: {raw_text}, {peer_text}")
    for key, value in over_raw.items():
        print(f"ratio {ratio_label(key, 'raw')}: {value}")
    for key, value in over_peer.items():
        print(f"ratio {ratio_label(key, 'procrastinate')}: {value}")
    for key, value in out["ratio_planq_over_celery_sql"].items():
        print(f"ratio {ratio_label(key, 'celery-sql')}: {value}")
    for key, value in out["ratio_tracing_on_over_off"].items():
        print(f"ratio {OTEL_SYSTEM}/planq ({key}): {value}")
    for key, value in out["threads"].items():
        print(f"threads -c {args.threads}: {key}: {value}")
    print(f"results: {args.out}")
    with contextlib.suppress(Exception):
        for f in logdir.iterdir():
            f.unlink()
        logdir.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
