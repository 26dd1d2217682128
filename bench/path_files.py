"""Which of planq's files a path crosses: `delay()` to its row's end, and a dashboard cancel.

Counted, not guessed: a profile hook in every thread records the planq source files whose
code runs between the call and the ledger's answer. The worker is the embedded one (broker,
worker threads, revoke bridge and ledger in one process); the API is a second app in the
same process, without a runner, so its cancel is broadcast like a real dashboard's. A
prefork child's own poke handler is not seen (one process cannot see another's frames).
Setup (settings, the app, a first job) runs before recording starts: only the path counts.

    python bench/path_files.py            # both counts, and the files of each
    python bench/path_files.py --quiet    # the counts only

Needs Redis (PLANQ_BROKER_URL, default redis://127.0.0.1:6379/14); the ledger is a fresh
SQLite file.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OWN = tuple(str(ROOT / d) + os.sep for d in ("domain", "store", "tasks", "worker_config", "cli"))
SLOW = [{"name": f"shard-{i}", "seconds": 0.5} for i in range(20)]
QUICK = [{"name": "one", "seconds": 0.01}]


class Recorder:
    """A profile hook for every thread: the planq files that ran while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.files: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.on and event == "call":
            name = frame.f_code.co_filename
            if name.startswith(OWN):
                self.files.add(os.path.relpath(name, ROOT))

    def record(self, action: Callable[[], None]) -> list[str]:
        self.files.clear()
        self.on = True
        try:
            action()
        finally:
            self.on = False
        return sorted(self.files)


def wait(what: str, probe: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quiet", action="store_true")
    options = parser.parse_args()
    recorder = Recorder()
    threading.setprofile(recorder)  # threads started from here on: the worker's, the API's
    sys.setprofile(recorder)

    from fastapi.testclient import TestClient

    from planq.cli.api.app import create_api
    from planq.cli.context import Planq
    from planq.tasks.embedded import EmbeddedWorker
    from planq.tasks.runtime import reset_runtime, runtime_for
    from planq.worker_config.bootstrap import bootstrap
    from planq.worker_config.settings import load_settings

    folder = tempfile.mkdtemp(prefix="planq-path-")
    broker = os.environ.get("PLANQ_BROKER_URL", "redis://127.0.0.1:6379/14")
    os.environ.update(
        PLANQ_DATABASE_URL=f"sqlite:///{folder}/ledger.db",
        PLANQ_BROKER_URL=broker,
        PLANQ_CANCEL_WAIT="0",
    )
    settings = load_settings()
    app = bootstrap(settings)
    runtime = runtime_for(app)
    embedded = EmbeddedWorker(runtime)
    embedded.start()
    task = app.tasks["planq.strategize_plan"]

    from celery.worker import state as worker_state

    def ended(job_id: str) -> Callable[[], bool]:
        """The row ended and its task returned (its postrun signal and ack are done too)."""

        def probe() -> bool:
            row = runtime.jobs.get(job_id)
            return row is not None and row.is_terminal and not worker_state.active_requests

        return probe

    try:
        warm = runtime.lifecycle.create_plan(QUICK, name="warm-up")
        first = task.delay(warm.plan_id)
        wait("the warm-up job", ended(first.id))

        plan = runtime.lifecycle.create_plan(QUICK, name="delay-path")

        def delay_path() -> None:
            result = task.delay(plan.plan_id)
            wait("the job to end", ended(result.id))

        delay_files = recorder.record(delay_path)

        api = TestClient(create_api(Planq(), settings=settings), base_url="http://127.0.0.1")

        def start_slow(name: str) -> str:
            slow = runtime.lifecycle.create_plan(SLOW, name=name)
            job_id = str(task.delay(slow.plan_id).id)

            def is_running() -> bool:
                row = runtime.jobs.get(job_id)
                return row is not None and row.status.value == "running" and (row.progress or 0) > 0

            wait(f"{name} to run", is_running)
            return job_id

        def cancel(job_id: str) -> Callable[[], None]:
            def path() -> None:
                answer = api.post(f"/api/ledger/jobs/{job_id}/cancel")
                if answer.status_code != 200:
                    raise SystemExit(f"cancel answered {answer.status_code}: {answer.text}")
                wait("the cancelled row", ended(job_id))

            return path

        cancel(start_slow("cancel-warm-up"))()  # the API's session and runtime, built once
        running = start_slow("cancel-path")
        cancel_path = cancel(running)
        cancel_files = recorder.record(cancel_path)
        row = runtime.jobs.get(running)
        assert row is not None and row.status.value == "cancelled", row
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        embedded.stop()
        reset_runtime(app)
    for title, files in (
        ("delay() to its terminal row", delay_files),
        ("a dashboard cancel to the cancelled row", cancel_files),
    ):
        print(f"{title}: {len(files)} files")
        if not options.quiet:
            for name in files:
                print(f"  {name}")


if __name__ == "__main__":
    main()
