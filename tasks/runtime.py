"""A Runtime per process (stores, ledger, the service object, the runner), a holder per app.

`RuntimeHolder` (on the app as `app.planq`) is everything planq keeps per app: the config,
the Celery node name this process works for, the recoverable-run handlers. `Runtime` is
everything per process, built from the holder on first use and again after a fork (in
`RuntimeHolder.get`, the one place). Nothing is kept in a module-level registry.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from planq.domain.config import DEFAULT_STUCK_CHECK_INTERVAL, AsyncWorkerConfig
from planq.domain.ledger import JobLedger
from planq.domain.ports import CancelOutcome
from planq.domain.redaction import BUILTIN, Redactor
from planq.domain.runs import RecoverableJobHandler, RunHeartbeat
from planq.domain.runs.heartbeat import interval_for
from planq.domain.webhooks import NO_WEBHOOKS, WebhookPolicy
from planq.store import Database, SqlRunStoreProvider, prepare_partitions, sql_ledger
from planq.store.ledger_scan import LedgerScan
from planq.store.migrate import migrate_sqlite
from planq.store.sql_principals import SqlPrincipalStore
from planq.tasks import metrics
from planq.tasks.engine import AsyncWorker, worker_id_for
from planq.tasks.executors import ExecutorRegistry
from planq.tasks.job_service import JobService
from planq.tasks.plan_service import PlanService
from planq.tasks.publisher import JobPublisher
from planq.tasks.run_service import RunService
from planq.tasks.service import PlanqService
from planq.tasks.traced_lifecycle import TracedLifecycle
from planq.tasks.webhooks import WebhookSender

logger = logging.getLogger("planq.runtime")
#: The revoke argument that says "already recorded in the ledger", with the outcome: set by
#: planq's own cancel (broadcast_cancel), absent from Flower's and `celery control revoke`.
RECORDED = "planq_recorded"


#: The stale-run bound when none is configured (PLANQ_RUN_STALE_AFTER's default).
DEFAULT_RUN_STALE_AFTER = 300.0


@dataclass(frozen=True)
class RuntimeConfig:
    """What a process needs to reach the ledger and run jobs (built by worker_config)."""

    database_url: str
    worker: AsyncWorkerConfig = field(default_factory=AsyncWorkerConfig)
    executors: dict[str, str] = field(default_factory=dict)
    default_executor: str = "walk_steps"
    #: The one redactor, built from settings by the composition root (worker_config).
    redactor: Redactor = BUILTIN
    auto_migrate: bool = False
    metrics_port: int = 0  #: 0 = no metrics endpoint
    #: beat's stuck-sweep schedule: a longer gap between sweeps holds expiry off
    stuck_check_interval: float = DEFAULT_STUCK_CHECK_INTERVAL
    #: PLANQ_RUN_STALE_AFTER: the stale-run bound, and so the run heartbeat's pace
    run_stale_after: float = DEFAULT_RUN_STALE_AFTER
    #: PLANQ_WEBHOOK_*: who is told of pipeline events, and how deliveries are retried
    webhooks: WebhookPolicy = NO_WEBHOOKS
    #: PLANQ_APPROVAL_SELF: whether a pipeline's runner may approve its own gate
    approval_self: bool = False


class Runtime:
    """Everything one process needs, built once here (the composition root) and handed down.

    settings (RuntimeConfig) -> database -> stores -> ledger -> the service object ->
    Celery wiring. The one door for job writes is `ledger` (claim, finish, progress,
    cancel, retry, stamps); reads go through the stores (`jobs`, `plans`, `runs`); every
    action is the service object's (`service`: jobs, plans, runs, publish, redactor). The
    job runner (`worker`) is built only where jobs run: a CLI cancel builds none.
    """

    def __init__(
        self,
        app: Any,
        config: RuntimeConfig,
        node: str | None = None,
        database: Database | None = None,
        *,
        holds_many: bool = False,
        slots: int | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.pid = os.getpid()
        self.node = node
        #: Whether this process runs many jobs at once (a threads/gevent pool): group commit.
        self.holds_many = holds_many
        #: How many jobs its pool holds at once (the Celery concurrency), where known.
        self.slots = slots
        #: The redactor every ledger write, task error and log line of this process uses.
        self.redactor = config.redactor
        if database is None and config.auto_migrate:
            migrate_sqlite(config.database_url)
        #: One pool per process: a command that read the ledger first hands its Database on.
        self.db = database if database is not None else Database(config.database_url)
        self.jobs, self.plans = sql_ledger(self.db)
        self.executors = ExecutorRegistry.from_settings(config.executors, config.default_executor)
        #: The publish door (tasks/publisher.py): messages, then their dispatch stamps.
        self.publisher = JobPublisher(
            app, self.redactor, stamp=lambda ids: self.ledger.mark_dispatched(ids)
        )
        self.publish = self.publisher.publish
        #: the process's one JobLedger (every job write; outages ridden out inside it)
        self.ledger = JobLedger(
            self.jobs,
            self.plans,
            self.redactor,
            enqueue=self.publish,
            on_gate_decided=metrics.gate_decided,
            webhooks=config.webhooks,
        )
        self.lifecycle = TracedLifecycle(
            self.plans, self.jobs, config.worker, redactor=self.redactor, ledger=self.ledger
        )
        settle = self.publisher.stamps.flush
        #: The one service object (tasks/service.py): what every surface calls.
        self.service = PlanqService(
            jobs=JobService(
                self.ledger,
                config.worker,
                broadcast_cancel=self.broadcast_cancel,
                running_here=self._running_here,
                settle=settle,
                sweep_interval=config.stuck_check_interval,
            ),
            plans=PlanService(
                self.lifecycle, self.jobs, settle=settle, allow_self=config.approval_self
            ),
            runs=lambda: RunService(app, self.runs),
            publish=self.publisher,
            redactor=self.redactor,
        )

    @cached_property
    def worker(self) -> AsyncWorker:
        """The job runner (claim, execute, finish, heartbeat): built where jobs run only."""
        runner = AsyncWorker(
            self.config.worker,
            self.jobs,
            self.executors,
            self.plans,
            worker_id=self.worker_id_for(self.pid),
            redactor=self.redactor,
            jobs=self.service.jobs,
        )
        self._group_writes(runner)
        return runner

    def _group_writes(self, runner: AsyncWorker) -> None:
        """The runner's group commit: the setting's window where the process holds many jobs.

        Its slots are the pool's concurrency (not PLANQ_MAX_WORKERS); elsewhere it is off.
        """
        window = self.config.worker.group_commit_ms if self.holds_many else 0.0
        runner.commits.set_window(window, self.slots)

    def hold_many(self, many: bool, slots: int | None = None) -> None:
        """Whether the process runs many jobs at once (slots of them): its runner groups if so."""
        self.holds_many = many
        self.slots = slots
        runner: AsyncWorker | None = self.__dict__.get("worker")
        if runner is not None:
            self._group_writes(runner)

    def _running_here(self, job_id: str) -> bool:
        """Trip the token of job_id if this process's runner holds it (no runner: False)."""
        runner: AsyncWorker | None = self.__dict__.get("worker")
        return runner is not None and runner.tracker.cancel_local(job_id)

    def worker_id_for(self, pid: int) -> str:
        """The ledger worker_id of process pid of this node (`<node name>/<pid>`)."""
        return worker_id_for(pid, self.node)

    def name_node(self, node: str) -> None:
        """Join Celery node `node`: claim jobs as `<node>/<pid>` from now on."""
        self.node = node
        runner: AsyncWorker | None = self.__dict__.get("worker")
        if runner is not None and not runner.rename(self.worker_id_for(self.pid)):
            logger.warning("node %s: jobs in flight, keeping worker id %s", node, runner.worker_id)

    @cached_property
    def runs(self) -> SqlRunStoreProvider:
        """Recoverable runs on this process's ledger (built on first use, same Database)."""
        return SqlRunStoreProvider(self.db, redactor=self.redactor)

    @cached_property
    def principals(self) -> SqlPrincipalStore:
        """The admin API's principals (found by token hash per request; same Database)."""
        return SqlPrincipalStore(self.db)

    @cached_property
    def ledger_scan(self) -> LedgerScan:
        """Read-only pages of the job ledger for the ledger_consistency scan (same Database)."""
        return LedgerScan(self.db)

    @cached_property
    def webhooks(self) -> WebhookSender:
        """Delivers the webhook outbox (beat's sweep; built on first use, same Database)."""
        return WebhookSender(self.plans, self.config.webhooks, self.redactor)

    def prepare_partitions(self) -> list[str]:
        """Create the ledger's job partitions ahead (PostgreSQL; none on SQLite): the names."""
        return prepare_partitions(self.db.engine)

    @cached_property
    def run_heartbeat(self) -> RunHeartbeat:
        """The process's one run heartbeat: every run it holds, one statement per interval."""
        interval = interval_for(self.config.run_stale_after)
        return RunHeartbeat(self.runs.heartbeat_runs, interval, redactor=self.redactor)

    def broadcast_cancel(self, job_id: str, outcome: CancelOutcome) -> None:
        """Tell every worker the cancel of job_id is recorded (a revoke, no terminate).

        The outcome rides along (`revoke_bridge.RECORDED`): the node that runs the job stops
        it and counts the cancel, and no node writes the ledger again.
        """
        arguments = {"task_id": job_id, "terminate": False, "signal": None}
        self.app.control.broadcast("revoke", arguments={**arguments, RECORDED: outcome.value})

    def dispose_after_fork(self) -> None:
        """Forget the parent's pooled connections (never close them: the parent uses them)."""
        self.db.dispose_after_fork()

    def close(self) -> None:
        """Stamp what is pending, stop the heartbeat threads, close the connections."""
        self.publisher.close()
        runner: AsyncWorker | None = self.__dict__.get("worker")
        if runner is not None:
            runner.close()
        heartbeat: RunHeartbeat | None = self.__dict__.get("run_heartbeat")
        if heartbeat is not None:
            heartbeat.stop()
        sender: WebhookSender | None = self.__dict__.get("webhooks")
        if sender is not None:
            sender.close()
        self.db.close()


class RuntimeHolder:
    """What planq keeps per app, and the app's Runtime in this process (rebuilt after a fork).

    It lives on the app (`app.planq`), so there is no registry of apps to keep in step.
    """

    def __init__(self, app: Any, config: RuntimeConfig) -> None:
        self.app = app
        self.config = config
        self._runtime: Runtime | None = None
        self._lock = threading.Lock()
        #: The Celery node name (worker_init's sender), inherited by forked children.
        self.node: str | None = None
        #: Who owns the runs this node starts (`run_owner_name(node)`, fixed at worker_init).
        self.run_owner: str | None = None
        #: Whether a process of this node runs many jobs at once (worker_init tells), how many.
        self.holds_many = False
        self.slots: int | None = None
        #: The recoverable jobs registered on the app, by name (tasks/recoverable.py).
        self.handlers: dict[str, RecoverableJobHandler] = {}

    def name_node(self, node: str) -> None:
        """Record the node name; this process's Runtime (if built) claims under it now."""
        with self._lock:
            self.node = node
            self.run_owner = run_owner_name(node)
            runtime = self._runtime
        if runtime is not None and runtime.pid == os.getpid():
            runtime.name_node(node)

    def hold_many(self, many: bool, slots: int | None = None) -> None:
        """Record whether this node's processes run many jobs at once, and how many.

        A Runtime built before takes it too (its runner, if built, changes its window).
        """
        with self._lock:
            self.holds_many = many
            self.slots = slots
            runtime = self._runtime
        if runtime is not None and runtime.pid == os.getpid():
            runtime.hold_many(many, slots)

    def get(self, database: Database | None = None) -> Runtime:
        """The Runtime of this process (a forked child drops the parent's, builds its own).

        `database`, when given, is the one a new Runtime uses (a CLI command that read
        through it first), so one process keeps one pool; an existing Runtime keeps its own.
        """
        runtime = self._runtime
        if runtime is not None and runtime.pid == os.getpid():
            return runtime
        with self._lock:
            runtime = self._runtime
            if runtime is not None and runtime.pid == os.getpid():
                return runtime
            if runtime is not None:
                runtime.dispose_after_fork()
            self._runtime = Runtime(
                self.app,
                self.config,
                self.node,
                database,
                holds_many=self.holds_many,
                slots=self.slots,
            )
            return self._runtime

    def reset(self) -> None:
        """Close and drop this process's Runtime (tests and embedded restarts)."""
        with self._lock:
            runtime, self._runtime = self._runtime, None
        if runtime is not None and runtime.pid == os.getpid():
            runtime.close()


def run_owner_name(hostname: str | None = None) -> str:
    """Who owns a run: the Celery node name (stable across a restart of the node).

    Outside a worker (a direct call), the process stands in: `planq-<pid>@<host>`.
    """
    if isinstance(hostname, str) and "@" in hostname:
        return hostname
    return f"planq-{os.getpid()}@{socket.gethostname()}"


def attach_runtime(app: Any, config: RuntimeConfig) -> RuntimeHolder:
    """Give app its holder (the composition root calls this once; the signals name its node).

    The holder learns the Celery node name on worker_init (in the worker's parent, before
    any child forks), so every process of the node claims jobs as `<node name>/<pid>`.
    """
    holder: RuntimeHolder = RuntimeHolder(app, config)
    app.planq = holder
    return holder


def holder_of(app: Any) -> RuntimeHolder:
    """The app's holder; RuntimeError if app was not built by planq's composition root."""
    holder: RuntimeHolder | None = getattr(app, "planq", None)
    if holder is None:
        raise RuntimeError(f"{app!r} is not a planq app (build it with worker_config.bootstrap)")
    return holder


def runtime_for(app: Any, database: Database | None = None) -> Runtime:
    """The Runtime for app in this process, built on first use (and again after a fork)."""
    return holder_of(app).get(database)


def service_for(app: Any, database: Database | None = None) -> PlanqService:
    """The one service object for app in this process (`runtime_for(app).service`)."""
    return runtime_for(app, database).service


def reset_runtime(app: Any) -> None:
    """Drop the app's Runtime in this process, closing its connections."""
    holder: RuntimeHolder | None = getattr(app, "planq", None)
    if holder is not None:
        holder.reset()
