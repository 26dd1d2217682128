"""Helpers for tests with real Celery: apps on real brokers, worker processes, polling."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from celery import Celery
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError

from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan
from planq.domain.ports import JobStore
from planq.tasks.embedded import EmbeddedWorker
from planq.tasks.runtime import Runtime, reset_runtime, runtime_for
from planq.worker_config.bootstrap import bootstrap
from planq.worker_config.celery_config import ALL_QUEUES
from planq.worker_config.settings import load_settings
from tests.support import wait_for

ROOT = Path(__file__).resolve().parents[1]
FAST = {
    "heartbeat_interval": 0.2,
    "job_timeout": 5.0,
    "poll_interval": 0.2,
    "dispatch_grace": 2.0,
}


def make_app(broker_url: str, database_url: str, **overrides: Any) -> Celery:
    """A planq app on these services, with fast test timings unless overridden."""
    settings = load_settings(
        broker_url=broker_url, database_url=database_url, **{**FAST, **overrides}
    )
    return bootstrap(settings)


@contextmanager
def embedded_worker(app: Celery, start: bool = True) -> Iterator[EmbeddedWorker]:
    """An in-process Celery worker (threads) for the app's runtime; everything closed after."""
    worker = EmbeddedWorker(runtime_for(app))
    if start:
        worker.start()
    try:
        yield worker
    finally:
        try:
            worker.stop()  # bounded: raises EmbeddedWorkerError naming what did not stop
        finally:
            worker.runtime.worker.stop()  # the store poller, if a test started it
            reset_runtime(app)


@contextmanager
def embedded_runtime(app: Celery, start: bool = True) -> Iterator[Runtime]:
    """The app's runtime with an in-process Celery worker started; everything closed after."""
    with embedded_worker(app, start) as worker:
        yield worker.runtime


def wait_for_status(
    jobs: JobStore, job_id: str, *statuses: AsyncJobStatus, timeout: float = 30.0
) -> Any:
    """Poll the ledger until the job is in one of statuses; return the row."""

    def reached() -> Any:
        job = jobs.get(job_id)
        return job if job is not None and job.status in statuses else None

    return wait_for(reached, timeout=timeout, what=f"job {job_id} to reach {statuses}")


def worker_env(broker_url: str, database_url: str, **settings: Any) -> dict[str, str]:
    """Environment for a `celery -A worker_config worker` process."""
    env = dict(os.environ)
    env.update(
        {
            "PLANQ_BROKER_URL": broker_url,
            "PLANQ_DATABASE_URL": database_url,
            "PYTHONPATH": str(ROOT),
        }
    )
    for key, value in {**FAST, **settings}.items():
        env[f"PLANQ_{key.upper()}"] = str(value)
    return env


class CeleryProcess:
    """A real `celery -A worker_config ...` command in its own process group."""

    def __init__(
        self, env: dict[str, str], name: str, args: list[str], log_path: Path | None
    ) -> None:
        self.name = name
        self.env = env
        self.log_path = log_path
        self._log: Any = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "planq.worker_config", *args],
            env=env,
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        """The main (parent) process id."""
        return self.proc.pid

    def terminate(self, timeout: float = 30.0) -> int:
        """Warm shutdown (SIGTERM) and wait; kill the group if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """Send SIGKILL to the whole process group (kill -9)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def log_tail(self, lines: int = 40) -> str:
        """The end of the process's log, for failure messages."""
        if not self.log_path or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        """Stop the process however it is."""
        try:
            self.terminate(timeout=15)
        finally:
            self.kill()
            if self._log is not subprocess.DEVNULL:
                self._log.close()


def stop_together(processes: list[CeleryProcess], timeout: float = 15.0) -> None:
    """Warm-shut every process down at once (SIGTERM to all, one wait), then close each.

    One warm shutdown's wait for a test's processes, not one per process; whatever is still
    up after `timeout` is killed (kill -9 of its group).
    """
    running = [p for p in processes if p.proc.poll() is None]
    for process in running:
        process.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.proc.poll() is None for p in running):
        time.sleep(0.05)
    for process in processes:
        if process.proc.poll() is None:
            print(f"{process.name}: no warm shutdown within {timeout:.0f}s; killed")
            process.kill()
        process.close()


class WorkerProcess(CeleryProcess):
    """`celery -A worker_config worker` with planq's queues."""

    def __init__(
        self,
        env: dict[str, str],
        name: str,
        pool: str = "prefork",
        concurrency: int = 2,
        queues: list[str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        args = [
            "worker",
            "-P",
            pool,
            "-c",
            str(concurrency),
            "-n",
            f"{name}@%h",
            "-Q",
            ",".join(queues or ALL_QUEUES),
            "--loglevel",
            "INFO",
            "--without-mingle",
            "--without-gossip",
        ]
        super().__init__(env, name, args, log_path)

    def wait_ready(self, app: Celery, timeout: float = 60.0) -> None:
        """Poll with a ping until the worker answers."""

        def answered() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"worker {self.name} exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                replies = app.control.ping(timeout=0.5)
            except (OSError, KombuOperationalError, RedisConnectionError):
                # e.g. the broker was just restarted: the pool reconnects next time
                return False
            return any(self.name in key for reply in replies for key in reply)

        wait_for(answered, timeout=timeout, interval=0.2, what=f"worker {self.name} to be ready")

    def child_pids(self) -> list[int]:
        """Pids of the pool's child processes."""
        out = subprocess.run(
            ["pgrep", "-P", str(self.pid)], capture_output=True, text=True, check=False
        ).stdout
        return [int(p) for p in out.split()]


class BeatProcess(CeleryProcess):
    """`celery -A worker_config beat` with its schedule file in a temp dir."""

    def __init__(self, env: dict[str, str], name: str, schedule: Path, log_path: Path) -> None:
        args = ["beat", "-s", str(schedule), "--loglevel", "INFO"]
        super().__init__(env, name, args, log_path)


def running_slow_job(producer: Celery, runtime: Runtime) -> AsyncJob:
    """A new plan's strategize job, running and checkpointed (a worker on the slow executor)."""
    plan = Plan.with_steps(["long"])
    runtime.plans.add(plan)
    result = producer.tasks["planq.strategize_plan"].delay(plan.plan_id)

    def checkpointed() -> bool:
        job = runtime.jobs.get(result.id)
        return job is not None and bool(job.checkpoint)

    wait_for(checkpointed, timeout=60, what="the job to run and checkpoint")
    job = runtime.jobs.get(result.id)
    assert job is not None and job.status is AsyncJobStatus.running
    return job
