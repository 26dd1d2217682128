"""An in-process Celery worker (threads pool) plus a relay for rows no message carries."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

from celery.contrib.testing.worker import start_worker

if TYPE_CHECKING:
    from tasks.engine import AsyncWorker

logger = logging.getLogger("planq.embedded")


class EmbeddedWorker:
    """Runs the app's worker in a thread of this process; stop() waits for in-flight jobs."""

    def __init__(self, engine: AsyncWorker) -> None:
        self.engine = engine
        self._stack = contextlib.ExitStack()
        self._stop = threading.Event()
        self._relay: threading.Thread | None = None
        self.controller: Any = None

    def start(self) -> None:
        """Start consuming every planq queue, and relaying unsent rows."""
        from tasks.revoke_bridge import install_revoke_bridge

        install_revoke_bridge()
        self.controller = self._stack.enter_context(
            start_worker(
                self.engine.app,
                pool="threads",
                concurrency=self.engine.config.max_workers,
                perform_ping_check=False,
                shutdown_timeout=60.0,
                loglevel="WARNING",
                hostname=f"planq-embedded-{self.engine.worker_id}@localhost",
            )
        )
        self._relay = threading.Thread(target=self._relay_loop, name="planq-relay", daemon=True)
        self._relay.start()

    def _relay_loop(self) -> None:
        interval = self.engine.config.poll_interval
        while not self._stop.wait(interval):
            try:
                self.engine.relay_dispatch(unsent_grace=interval)
            except Exception:
                logger.exception("embedded relay failed; retrying")

    def stop(self, timeout: float) -> None:
        """Stop relaying, let in-flight jobs end, stop the worker thread."""
        self._stop.set()
        if self._relay is not None:
            self._relay.join(timeout)
        self._stack.close()
