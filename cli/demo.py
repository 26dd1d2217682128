"""`planq demo`: the whole lifecycle in ONE process, nothing to install or start.

A SQLite ledger file in a fresh temp dir, the in-process `memory://` broker, an embedded
Celery worker (threads pool) and an embedded Celery beat (a thread). A plan goes through
strategize -> execute -> apply as real Celery jobs, one progress bar per phase job driven
by the ledger row; then a second plan's running job is cancelled; then the ledger.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from celery import Celery
from celery.beat import EmbeddedService
from celery.signals import task_postrun
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from planq.cli.demo_pipeline import PipelineDemoError, run_pipeline_demo
from planq.domain.errors import EmbeddedWorkerError, PlanqError
from planq.domain.jobs import TERMINAL_STATUSES, AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase
from planq.tasks.embedded import EmbeddedWorker
from planq.tasks.runtime import Runtime, reset_runtime, runtime_for
from planq.tasks.service import PlanqService
from planq.worker_config.bootstrap import bootstrap
from planq.worker_config.settings import load_settings

#: Deadlines: the demo fails with a clear message rather than hang.
PHASE_DEADLINE = 30.0
CANCEL_DEADLINE = 15.0
POLL = 0.1
PLAIN_WIDTH = 132  #: table width when stdout is not a terminal (pipes, CI, README)

PHASES = (PlanPhase.strategize, PlanPhase.execute, PlanPhase.apply)
MAIN_STEPS = [
    {"name": "fetch-inventory", "seconds": 0.4},
    {"name": "score-candidates", "seconds": 0.5},
    {"name": "diff-against-live", "seconds": 0.3},
    {"name": "render-changes", "seconds": 0.4},
    {"name": "verify", "seconds": 0.3},
]
SLOW_STEPS = [{"name": f"scan-shard-{i}", "seconds": 0.8} for i in range(8)]

#: Celery/kombu chatter ("No hostname was supplied", revoke without a result backend...)
#: would clutter the output; planq's own warnings still show.
NOISY_LOGGERS = ("celery", "kombu", "amqp", "alembic")


class DemoError(Exception):
    """A step of the demo did not happen in time (or at all)."""


def _quiet_logs() -> None:
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def _demo_app(tmp: Path) -> Celery:
    """A private app on the temp ledger (never the env-configured `worker_config.app`)."""
    settings = load_settings(
        broker_url="memory://",
        database_url=f"sqlite:///{tmp / 'planq.db'}",
        heartbeat_interval=0.5,
        job_timeout=30,
        max_workers=2,
        poll_interval=0.2,
        stuck_check_interval=2,
        relay_interval=2,
        cleanup_interval=60,
    )
    app = bootstrap(settings, main="planq-demo")
    app.conf.beat_schedule_filename = str(tmp / "celerybeat-schedule")
    # memory:// is polled, every 1 s by default: up to a second added to each pickup.
    app.conf.broker_transport_options = {
        **app.conf.broker_transport_options,
        "polling_interval": 0.05,
    }
    app.finalize()
    foreign = foreign_tasks(app)
    if foreign:
        raise DemoError(
            f"tasks bound to another Celery app in this process: {', '.join(foreign)}"
            " (register them with shared=False)"
        )
    return app


def foreign_tasks(app: Celery) -> list[str]:
    """The planq tasks of app whose body closes over ANOTHER Celery app (and its ledger).

    `@app.task` is shared across apps unless `shared=False`; importing `worker_config`
    already built one app from the environment, so a shared planq task would let this demo
    run, say, maintenance against `./planq.db` instead of its own ledger.
    """
    return [
        name
        for name, task in list(app.tasks.items())
        if name.startswith("planq.")
        and any(
            isinstance(cell.cell_contents, Celery) and cell.cell_contents is not app
            for cell in (getattr(task.run, "__closure__", None) or ())
        )
    ]


class EmbeddedBeat:
    """Celery beat in a thread of this process; stop() never hangs.

    `EmbeddedService(..., thread=True)` ticks at most once a second; its own `stop()` waits
    without a timeout for a flag that is set only if the loop got going, so stop() here
    asks it to stop and joins the thread with a bound instead.
    """

    def __init__(self, app: Celery, schedule_file: Path) -> None:
        self.app = app
        self.service: Any = EmbeddedService(app, thread=True, schedule_filename=str(schedule_file))
        self.sent: Counter[str] = Counter()
        self._uid = f"planq-demo-beat-{id(app)}"

    def start(self) -> None:
        """Start ticking; count the maintenance tasks the worker runs."""
        task_postrun.connect(self._on_postrun, weak=False, dispatch_uid=self._uid)
        self.service.start()

    def _on_postrun(self, sender: Any = None, **_: Any) -> None:
        name = getattr(sender, "name", "") or ""
        if getattr(sender, "app", None) is self.app and name.startswith("planq.maintenance."):
            self.sent[name.removeprefix("planq.maintenance.")] += 1

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the scheduler thread (it syncs its schedule file); whether it ended."""
        self.service.service.stop(wait=False)
        self.service.join(timeout)
        task_postrun.disconnect(dispatch_uid=self._uid)
        return not self.service.is_alive()


@contextmanager
def _progress(console: Console) -> Iterator[Progress]:
    progress = Progress(
        TextColumn("{task.description:<28}"),
        BarColumn(bar_width=30),
        TaskProgressColumn(),
        TextColumn("{task.fields[status]:<10}"),
        TimeElapsedColumn(),
        console=console,
        refresh_per_second=10,
    )
    with progress:
        yield progress


def _wait_for(
    what: str,
    deadline: float,
    probe: Callable[[], AsyncJob | None],
    done: Callable[[AsyncJob], bool],
    poll: float = POLL,
) -> AsyncJob:
    """Poll the ledger until done(row) or raise DemoError naming what did not happen."""
    stop = time.monotonic() + deadline
    row = None
    while time.monotonic() < stop:
        row = probe()
        if row is not None and done(row):
            return row
        time.sleep(poll)
    seen = "no row" if row is None else f"status {row.status.value}, progress {row.progress}"
    raise DemoError(f"{what} did not happen within {deadline:.0f}s ({seen})")


def _run_phase(
    service: PlanqService,
    ledger: Runtime,
    app: Celery,
    plan: Plan,
    phase: PlanPhase,
    bars: Progress,
) -> tuple[str, str]:
    """Queue one phase with `.delay(plan_id)`, follow its job's row; (job id, plan label)."""
    result = app.tasks[f"planq.{phase.value}_plan"].delay(plan.plan_id)
    if result is None:
        raise DemoError(f"{phase.value}: no job was queued (async jobs disabled?)")
    job_id = str(result.id)
    bar = bars.add_task(f"{phase.value:<10} {job_id[-8:]}", total=100, status="queued")
    stop = time.monotonic() + PHASE_DEADLINE
    while True:
        row = ledger.jobs.get(job_id)
        if row is not None:
            bars.update(bar, completed=(row.progress or 0.0) * 100, status=row.status.value)
            if row.status in TERMINAL_STATUSES:
                break
        if time.monotonic() > stop:
            state = row.status.value if row else "missing"
            raise DemoError(f"{phase.value} job {job_id} still {state} after {PHASE_DEADLINE:.0f}s")
        time.sleep(POLL)
    if row.status is not AsyncJobStatus.succeeded:
        raise DemoError(f"{phase.value} job {job_id} ended {row.status.value}: {row.error_message}")
    return job_id, service.plans.find(plan.plan_id).label


def _cancel_running_job(
    service: PlanqService, ledger: Runtime, app: Celery, console: Console
) -> float:
    """Start a slow job, cancel it mid-run, wait for the ledger to say so; the latency."""
    plan = service.plans.create(SLOW_STEPS, name="slow-backfill")
    result = app.tasks["planq.strategize_plan"].delay(plan.plan_id)
    if result is None:
        raise DemoError("strategize of slow-backfill queued no job")
    job_id = str(result.id)
    row = _wait_for(
        f"slow-backfill job {job_id} running with progress",
        CANCEL_DEADLINE,
        lambda: ledger.jobs.get(job_id),
        lambda r: r.status is AsyncJobStatus.running and (r.progress or 0.0) > 0,
    )
    console.print(
        f"slow-backfill job {job_id} is running at {(row.progress or 0) * 100:.0f}% "
        f"on {row.worker_id}: cancel_job()"
    )
    asked = time.monotonic()
    service.jobs.cancel(job_id)  # refused: a typed error, the demo fails
    row = _wait_for(
        f"job {job_id} cancelled",
        CANCEL_DEADLINE,
        lambda: ledger.jobs.get(job_id),
        lambda r: r.status in TERMINAL_STATUSES,
        poll=0.01,
    )
    latency = time.monotonic() - asked
    if row.status is not AsyncJobStatus.cancelled:
        raise DemoError(f"job {job_id} ended {row.status.value}, not cancelled")
    label = service.plans.find(plan.plan_id).label
    if label != "Strategize/CANCELLED":
        raise DemoError(f"slow-backfill is {label}, expected Strategize/CANCELLED")
    console.print(
        f"job {job_id} -> cancelled at {(row.progress or 0) * 100:.0f}%, "
        f"checkpoint {row.checkpoint}, cancel latency {latency * 1000:.0f} ms"
    )
    console.print(f"plan slow-backfill -> {label}")
    return latency


def _duration(job: AsyncJob) -> str:
    if job.started_at is None or job.finished_at is None:
        return "-"
    return f"{(job.finished_at - job.started_at).total_seconds():.2f}s"


def _ledger_table(ledger: Runtime) -> Table:
    names = {p.plan_id: p.name for p in ledger.plans.list_all()}
    table = Table(title="job ledger", title_justify="left")
    for column in ("job id", "plan", "phase", "status", "attempt", "progress", "worker"):
        table.add_column(column, no_wrap=column in ("job id", "worker"))
    table.add_column("duration", justify="right")
    for job in ledger.jobs.list_all():
        progress = "-" if job.progress is None else f"{job.progress * 100:.0f}%"
        table.add_row(
            job.job_id,
            names.get(job.plan_id, job.plan_id),
            job.phase.value,
            job.status.value,
            str(job.attempt),
            progress,
            job.worker_id or "-",
            _duration(job),
        )
    return table


def _plans_table(ledger: Runtime) -> Table:
    table = Table(title="plans", title_justify="left")
    for column in ("plan id", "name", "state", "steps"):
        table.add_column(column, no_wrap=True)
    for plan in ledger.plans.list_all():
        table.add_row(plan.plan_id, plan.name, plan.label, str(len(plan.steps)))
    return table


def run_demo() -> int:
    """Run the embedded demo; 0 on success, 1 with a clear message on any failure."""
    began = time.monotonic()
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PLAIN_WIDTH
    _quiet_logs()
    tmp = Path(tempfile.mkdtemp(prefix="planq-demo-"))
    # soft_wrap: a path stays one line, to copy (rich would break it at the width)
    console.print(f"ledger: sqlite:///{tmp / 'planq.db'}   broker: memory://", soft_wrap=True)
    app: Celery | None = None
    embedded: EmbeddedWorker | None = None
    beat: EmbeddedBeat | None = None
    code = 0
    try:
        app = _demo_app(tmp)
        runtime = runtime_for(app)  # migrates the fresh SQLite ledger
        embedded = EmbeddedWorker(runtime)
        embedded.start()
        beat = EmbeddedBeat(app, tmp / "celerybeat-schedule")
        beat.start()
        console.print(
            f"worker {embedded.worker_id} (threads x{embedded.concurrency})"
            " and beat running in this process"
        )

        service = runtime.service
        plan = service.plans.create(MAIN_STEPS, name="nightly-rebalance")
        console.print(f"\nplan nightly-rebalance {plan.plan_id}: {len(MAIN_STEPS)} steps")
        with _progress(console) as bars:
            finished = [_run_phase(service, runtime, app, plan, phase, bars) for phase in PHASES]
        for phase, (job_id, label) in zip(PHASES, finished, strict=True):
            console.print(f"  {phase.value:<10} job {job_id} succeeded -> plan {label}")
        console.print()

        _cancel_running_job(service, runtime, app, console)
        console.print()
        run_pipeline_demo(service, app, console)  # a plan that runs itself through a gate
        console.print()
        console.print(_ledger_table(runtime))
        console.print(_plans_table(runtime))
    except (DemoError, PipelineDemoError, PlanqError) as exc:
        console.print(f"[bold red]demo failed:[/bold red] {exc}")
        code = 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; stopping the worker and beat[/yellow]")
        code = 130
    except Exception:
        console.print("[bold red]demo failed with an unexpected error:[/bold red]")
        console.print_exception()
        code = 1
    finally:
        try:
            if not _shutdown(app, embedded, beat, console):
                code = code or 1
        except KeyboardInterrupt:  # a second Ctrl-C: leave the daemon threads behind
            console.print("[yellow]interrupted during shutdown[/yellow]")
            code = 130
    console.print(
        f"done in {time.monotonic() - began:.1f}s; ledger kept at {tmp / 'planq.db'}",
        soft_wrap=True,
    )
    return code


def _shutdown(
    app: Celery | None, embedded: EmbeddedWorker | None, beat: EmbeddedBeat | None, console: Console
) -> bool:
    """Stop beat, then the worker, each with a bound; whether both stopped cleanly."""
    clean = True
    if beat is not None:
        if not beat.stop():
            console.print("[yellow]beat thread did not stop within 5s[/yellow]")
            clean = False
        ran = ", ".join(f"{name} x{n}" for name, n in sorted(beat.sent.items()))
        console.print(f"beat maintenance runs: {ran or 'none yet'}")
    if app is not None and embedded is not None and not _stop_worker(embedded, app, console):
        clean = False
    return clean


def _stop_worker(embedded: EmbeddedWorker, app: Celery, console: Console) -> bool:
    """Stop the embedded worker (a bounded wait) and release the ledger; whether it stopped."""
    try:
        embedded.stop(10.0)
    except EmbeddedWorkerError as exc:
        console.print(f"[yellow]{str(exc).splitlines()[0]}[/yellow]")
        return False
    reset_runtime(app)
    return True
