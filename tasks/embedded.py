"""An in-process Celery worker (threads pool) plus a relay for rows no message carries.

The relay thread also delivers the webhook outbox: a laptop runs no beat.

Built by its callers (the demo, tests, a laptop setup) around a process's Runtime: the
job runner does not own it, so nothing below the entry modules imports this one.

It owns its worker's whole life instead of using Celery's
`celery.contrib.testing.worker.start_worker`, which waits for the start without a bound
and stops by setting the process-global `celery.worker.state.should_terminate`: that
stops every in-process worker, and a stop that times out leaves the flag set, so every
later worker in the process stops inside its start and the wait hangs for ever. Here
each worker has its own kombu event loop, is stopped through that loop alone, and both
waits are bounded and fail naming what did not start or stop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

from celery.contrib.testing.worker import setup_app_for_worker
from celery.exceptions import WorkerShutdown
from celery.result import _set_task_join_will_block
from celery.worker import WorkController
from celery.worker import state as worker_state
from kombu.asynchronous import set_event_loop

from planq.domain.errors import EmbeddedWorkerError
from planq.tasks.revoke_bridge import install_revoke_bridge
from planq.tasks.runtime import Runtime
from planq.tasks.tracker import WORKER_SHUTDOWN

logger = logging.getLogger("planq.embedded")

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


class EmbeddedWorker:
    """Runs the app's worker in a thread of this process; stop() waits for in-flight jobs."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.controller: Any = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._relay: threading.Thread | None = None
        self.hostname = f"planq-embedded-{os.getpid()}@{socket.gethostname()}"

    @property
    def is_running(self) -> bool:
        """Whether the worker thread is started."""
        return self.controller is not None

    @property
    def worker_id(self) -> str:
        """The ledger worker id this embedded node's jobs are claimed under."""
        return self.runtime.worker.worker_id

    @property
    def concurrency(self) -> int:
        """How many jobs it runs at once (its thread pool: PLANQ_MAX_WORKERS)."""
        return self.runtime.config.worker.max_workers

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start consuming every planq queue, and relaying unsent rows (idempotent).

        Raises EmbeddedWorkerError when the consumer is not ready within `timeout` s.
        """
        if self.controller is not None:
            return
        install_revoke_bridge()
        app = self.runtime.app
        setup_app_for_worker(app, "WARNING", None)
        ready = threading.Event()
        # A fresh kombu event loop for this worker: kombu keeps one per process, and a
        # second in-process worker would otherwise share (and on stop close) the first's.
        set_event_loop(None)
        controller = WorkController(
            app=app,
            hostname=self.hostname,
            pool="threads",
            concurrency=self.concurrency,
            loglevel="WARNING",
            ready_callback=lambda _consumer: ready.set(),
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
        )
        thread = threading.Thread(target=controller.start, name="planq-embedded", daemon=True)
        thread.start()
        try:
            self._wait_ready(ready, controller, thread, timeout)
        finally:
            # Building the worker marked the whole process as "inside a task"; this thread
            # is not one, so result.get() may wait here, whether the start worked or not.
            _set_task_join_will_block(False)
        self.controller, self._thread = controller, thread
        self._stop.clear()
        self._relay = threading.Thread(target=self._relay_loop, name="planq-relay", daemon=True)
        self._relay.start()

    def _wait_ready(
        self, ready: threading.Event, controller: Any, thread: threading.Thread, timeout: float
    ) -> None:
        """Return once the consumer is ready; else stop it cold and say what did not start."""
        deadline = time.monotonic() + timeout
        while not ready.wait(0.1) and thread.is_alive() and time.monotonic() < deadline:
            pass
        if ready.is_set():
            return
        where = _describe(thread)
        self._abandon(controller, thread)
        broker = self.runtime.redactor(str(self.runtime.app.conf.broker_url))
        raise EmbeddedWorkerError(
            f"embedded worker {self.hostname} did not start within {timeout:.0f}s: "
            f"its consumer never became ready ({where}); is the broker at {broker} answering?"
        )

    def _relay_loop(self) -> None:
        """What beat does for a fleet: relay unsent rows, deliver the webhook outbox."""
        interval = self.runtime.config.worker.poll_interval
        notifies = self.runtime.config.webhooks.enabled
        jobs = self.runtime.service.jobs
        while not self._stop.wait(interval):
            try:
                jobs.relay(unsent_grace=interval)
                if notifies:
                    self.runtime.webhooks.deliver_due()
            except Exception:
                logger.exception("embedded relay failed; retrying")

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Trip in-flight tokens, stop relaying, let those jobs end, stop the worker thread.

        Raises EmbeddedWorkerError naming the thread (and its stack) that did not stop
        within `timeout` s; the worker is then asked to stop cold, never left consuming.
        """
        controller, thread = self.controller, self._thread
        if controller is None or thread is None:
            return
        self.controller = self._thread = None
        in_flight = self.runtime.worker.tracker.cancel_all(WORKER_SHUTDOWN)
        self._stop.set()
        if self._relay is not None:
            self._relay.join(timeout)
        with _warm_stop(controller):
            thread.join(timeout)
        if thread.is_alive():
            where = _describe(thread)
            self._abandon(controller, thread)
            raise EmbeddedWorkerError(
                f"embedded worker {self.hostname} did not stop within {timeout:.0f}s "
                f"(jobs tripped at stop: {', '.join(in_flight) or 'none'}); {where}"
            )

    @staticmethod
    def _abandon(controller: Any, thread: threading.Thread) -> None:
        """Stop a worker that missed its wait cold, so it never keeps consuming."""
        try:
            controller.terminate()
        except Exception:
            logger.exception("embedded worker: cold stop failed")
        thread.join(5.0)


@contextlib.contextmanager
def _warm_stop(controller: Any) -> Iterator[None]:
    """Make this worker, and only it, leave its consumer loop as on a warm shutdown.

    With an event loop (Redis, AMQP) the stop is raised inside the worker's own loop
    thread (kombu's `call_soon` wakes it), where Celery's own warm shutdown raises it.
    A polled transport (memory://) has no loop: its consumer leaves when the flag every
    polled loop checks is set, and the flag is always cleared again after the wait.
    """
    hub = getattr(controller, "hub", None)
    if hub is not None:
        hub.call_soon(_raise_warm_shutdown)
        yield
        return
    worker_state.should_stop = 0
    try:
        yield
    finally:
        worker_state.should_stop = None


def _raise_warm_shutdown() -> None:
    raise WorkerShutdown(0)


def _describe(thread: threading.Thread) -> str:
    """The thread's state and, if it is alive, where it is (for the error message)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if not thread.is_alive() or frame is None:
        return f"thread {thread.name} has exited"
    stack = "".join(traceback.format_stack(frame, limit=12))
    return f"thread {thread.name} is still in:\n{stack}"
