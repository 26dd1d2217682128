"""Acceptance tier: real `celery worker` processes on Redis, the ledger on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from planq.store import Database
from planq.tasks.runtime import Runtime, reset_runtime, runtime_for
from tests.acceptance.flower_support import (
    FLOWER_PASSWORD,
    FLOWER_USER,
    FlowerServer,
    StartFlower,
    flower_args,
)
from tests.browser_support import Browser, installed_chromium
from tests.celery_support import (
    BeatProcess,
    CeleryProcess,
    WorkerProcess,
    make_app,
    stop_together,
    worker_env,
)
from tests.executors_for_tests import REDIS
from tests.resources import free_port
from tests.support import wait_for

EXEC = "tests.executors_for_tests"


@pytest.fixture
def producer(redis_url: str, pg_database: Database, pg_url: str) -> Iterator[Celery]:
    """The test process is the producer: a planq app on the same Redis and PostgreSQL."""
    REDIS.delete("planq-test:concurrent", "planq-test:max-concurrent", "planq-test:pids")
    app = make_app(redis_url, pg_url, default_executor=f"{EXEC}:counted")
    yield app
    reset_runtime(app)


@pytest.fixture
def runtime(producer: Celery) -> Runtime:
    """The producer's runtime (ledger access, lifecycle)."""
    return runtime_for(producer)


StartWorker = Callable[..., WorkerProcess]


@pytest.fixture
def celery_processes() -> Iterator[list[CeleryProcess]]:
    """Every worker, beat and Flower a test started: stopped together at its end.

    One warm shutdown's wait for all of them (a worker's takes a second or two), not one
    per process in turn.
    """
    started: list[CeleryProcess] = []
    yield started
    stop_together(started)


@pytest.fixture
def start_worker(
    redis_url: str,
    pg_url: str,
    producer: Celery,
    tmp_path: Path,
    celery_processes: list[CeleryProcess],
) -> StartWorker:
    """Start `celery -A worker_config worker` processes; all are stopped after the test."""

    def start(
        name: str = "w1",
        pool: str = "prefork",
        concurrency: int = 2,
        wait: bool = True,
        queues: list[str] | None = None,
        **settings: Any,
    ) -> WorkerProcess:
        settings.setdefault("default_executor", f"{EXEC}:counted")
        env = worker_env(redis_url, pg_url, **settings)
        worker = WorkerProcess(
            env, name, pool, concurrency, queues, log_path=tmp_path / f"{name}.log"
        )
        celery_processes.append(worker)
        if wait:
            worker.wait_ready(producer)
        return worker

    return start


StartBeat = Callable[..., BeatProcess]


@pytest.fixture
def start_beat(
    redis_url: str, pg_url: str, tmp_path: Path, celery_processes: list[CeleryProcess]
) -> StartBeat:
    """Start `celery -A worker_config beat` processes (fast maintenance intervals)."""

    def start(name: str = "beat1", **settings: Any) -> BeatProcess:
        for key, value in {
            "stuck_check_interval": 1.0,
            "relay_interval": 1.0,
            "cleanup_interval": 60.0,
        }.items():
            settings.setdefault(key, value)
        env = worker_env(redis_url, pg_url, **settings)
        beat = BeatProcess(env, name, tmp_path / f"{name}-schedule", tmp_path / f"{name}.log")
        celery_processes.append(beat)
        return beat

    return start


@pytest.fixture
def start_flower(
    redis_url: str, pg_url: str, tmp_path: Path, celery_processes: list[CeleryProcess]
) -> StartFlower:
    """Start Flower on the test Redis; every Flower started is stopped after the test."""

    def start(basic_auth: bool = True) -> FlowerServer:
        env = worker_env(redis_url, pg_url)
        env.pop("FLOWER_UNAUTHENTICATED_API", None)
        if basic_auth:
            env["FLOWER_BASIC_AUTH"] = f"{FLOWER_USER}:{FLOWER_PASSWORD}"
        else:  # the UI is open without auth; the API needs this to answer
            env["FLOWER_UNAUTHENTICATED_API"] = "true"
        port = free_port()
        process = CeleryProcess(env, "flower", flower_args(port), tmp_path / "flower.log")
        celery_processes.append(process)
        server = FlowerServer(process, port, basic_auth)
        wait_for(server.answers, timeout=60, interval=0.2, what="Flower's /healthcheck")
        return server

    return start


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium, installed with apt-get when missing (a failed install fails)."""
    return installed_chromium()


@pytest.fixture
def browser(chromium: Path) -> Iterator[Browser]:
    """One headless Chromium tab, driven over the DevTools pipe."""
    tab = Browser(chromium)
    yield tab
    tab.close()
