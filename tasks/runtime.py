"""One Runtime per process: the ledger, the engine and the publisher, rebuilt after fork."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from domain.config import AsyncWorkerConfig
from domain.jobs import AsyncJob
from domain.lifecycle import PlanLifecycleService
from domain.redaction import Redactor
from store import Database, SqlRunStoreProvider, sql_ledger
from store.migrate import upgrade
from tasks.dispatch_stamps import DispatchStamps
from tasks.engine import AsyncWorker
from tasks.executors import ExecutorRegistry

logger = logging.getLogger("planq.runtime")


@dataclass(frozen=True)
class RuntimeConfig:
    """What a process needs to reach the ledger and run jobs (built by worker_config)."""

    database_url: str
    worker: AsyncWorkerConfig = field(default_factory=AsyncWorkerConfig)
    executors: dict[str, str] = field(default_factory=dict)
    default_executor: str = "walk_steps"
    redaction_patterns: tuple[str, ...] = ()
    auto_migrate: bool = False
    metrics_port: int = 0  #: 0 = no metrics endpoint


class Runtime:
    """The process's ledger connection, engine, lifecycle service and publisher."""

    def __init__(self, app: Any, config: RuntimeConfig) -> None:
        self.app = app
        self.config = config
        self.pid = os.getpid()
        self.redactor = Redactor.from_patterns(config.redaction_patterns)
        if config.auto_migrate:
            upgrade(config.database_url)
        self.db = Database(config.database_url)
        self.jobs, self.plans = sql_ledger(self.db)
        self.executors = ExecutorRegistry.from_settings(config.executors, config.default_executor)
        self.worker = AsyncWorker(
            config.worker, self.jobs, self.executors, self.plans, publish=self.publish, app=app
        )
        self.stamps = DispatchStamps(self.worker.ledger.mark_dispatched)
        self.lifecycle = PlanLifecycleService(
            self.plans, self.jobs, config.worker, enqueue=self.publish
        )

    @cached_property
    def runs(self) -> SqlRunStoreProvider:
        """Recoverable runs on this process's ledger (built on first use, same Database)."""
        return SqlRunStoreProvider(self.db)

    def publish(self, jobs: Sequence[AsyncJob]) -> None:
        """Send the jobs' messages (task id = job id) on one producer; stamp them in batch."""
        if len(jobs) == 1:
            self._task(jobs[0]).publish_job(jobs[0])
        else:
            with self.app.producer_or_acquire() as producer:
                for job in jobs:
                    self._task(job).publish_job(job, producer=producer)
        self.stamps.add(job.job_id for job in jobs)

    def _task(self, job: AsyncJob) -> Any:
        return self.app.tasks[f"planq.{job.phase.value}_plan"]

    def dispose_after_fork(self) -> None:
        """Forget the parent's pooled connections (never close them: the parent uses them)."""
        self.db.dispose_after_fork()


_lock = threading.Lock()
_runtimes: dict[int, Runtime] = {}


def runtime_for(app: Any) -> Runtime:
    """The Runtime for app in this process, built on first use (and again after a fork)."""
    key = id(app)
    runtime = _runtimes.get(key)
    if runtime is not None and runtime.pid == os.getpid():
        return runtime
    with _lock:
        runtime = _runtimes.get(key)
        if runtime is not None and runtime.pid == os.getpid():
            return runtime
        if runtime is not None:
            runtime.dispose_after_fork()
        config: RuntimeConfig = app.conf.planq_runtime
        runtime = Runtime(app, config)
        _runtimes[key] = runtime
        return runtime


def reset_runtime(app: Any) -> None:
    """Drop the cached Runtime (tests and embedded restarts)."""
    with _lock:
        runtime = _runtimes.pop(id(app), None)
    if runtime is not None:
        runtime.stamps.close()
        runtime.worker.tracker.close()
        runtime.db.close()
