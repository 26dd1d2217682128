"""An in-process Celery worker (threads pool) plus a relay for rows no message carries.

Built by its callers (the demo, tests, a laptop setup) around a process's Runtime: the
job runner does not own it, so nothing below the entry modules imports this one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from typing import Any

from celery.contrib.testing.worker import start_worker

from tasks.revoke_bridge import install_revoke_bridge
from tasks.runtime import Runtime
from tasks.tracker import WORKER_SHUTDOWN

logger = logging.getLogger("planq.embedded")


class EmbeddedWorker:
    """Runs the app's worker in a thread of this process; stop() waits for in-flight jobs."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._stack: contextlib.ExitStack | None = None
        self._stop = threading.Event()
        self._relay: threading.Thread | None = None
        self.controller: Any = None

    @property
    def is_running(self) -> bool:
        """Whether the worker thread is started."""
        return self._stack is not None

    def start(self) -> None:
        """Start consuming every planq queue, and relaying unsent rows (idempotent)."""
        if self._stack is not None:
            return
        install_revoke_bridge()
        worker, stack = self.runtime.worker, contextlib.ExitStack()
        self.controller = stack.enter_context(
            start_worker(
                self.runtime.app,
                pool="threads",
                concurrency=worker.config.max_workers,
                perform_ping_check=False,
                shutdown_timeout=60.0,
                loglevel="WARNING",
                hostname=f"planq-embedded-{os.getpid()}@{socket.gethostname()}",
            )
        )
        self._stack = stack
        self._stop.clear()
        self._relay = threading.Thread(target=self._relay_loop, name="planq-relay", daemon=True)
        self._relay.start()

    def _relay_loop(self) -> None:
        interval = self.runtime.worker.config.poll_interval
        while not self._stop.wait(interval):
            try:
                self.runtime.worker.relay_dispatch(unsent_grace=interval)
            except Exception:
                logger.exception("embedded relay failed; retrying")

    def stop(self, timeout: float = 30.0) -> None:
        """Trip in-flight tokens, stop relaying, let those jobs end, stop the worker thread."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        self.runtime.worker.tracker.cancel_all(WORKER_SHUTDOWN)
        self._stop.set()
        if self._relay is not None:
            self._relay.join(timeout)
        stack.close()
