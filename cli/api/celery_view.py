"""Celery's own view of the workers, asked without ever holding a page on a slow broker.

One `inspect().active()` broadcast, waited on for at most BROADCAST_TIMEOUT and kept for
BROADCAST_TTL; only one request at a time asks, the others show the last answer. The API
process keeps one CeleryAsker (state.py `ApiState.celery`): per app, never module-wide.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from planq.cli.output import one_line

#: Seconds one Celery broadcast may take, and how long its answer is reused.
BROADCAST_TIMEOUT = 0.5
BROADCAST_TTL = 5.0


@dataclass(frozen=True)
class CeleryView:
    """What one broadcast answered: {node: active task count}, when, or why it failed."""

    active: dict[str, int]
    asked_at: float  #: the monotonic clock's time, for the cache
    asked_utc: datetime  #: the same moment, shown
    error: str = ""


class CeleryAsker:
    """One bounded `inspect().active()` at a time, its answer kept for BROADCAST_TTL."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: CeleryView | None = None

    def view(self, app: Any, clock: Callable[[], float] = time.monotonic) -> CeleryView | None:
        """The last answer, refreshed first if old and no other request is refreshing it."""
        last = self._last
        if last is not None and clock() - last.asked_at < BROADCAST_TTL:
            return last
        if not self._lock.acquire(blocking=False):
            return last  # another request is asking: show what is known
        try:
            self._last = ask_celery(app, clock)
        finally:
            self._lock.release()
        return self._last


def ask_celery(app: Any, clock: Callable[[], float] = time.monotonic) -> CeleryView:
    """Broadcast `active` and wait at most BROADCAST_TIMEOUT; an error is kept, not raised."""
    try:
        replies = app.control.inspect(timeout=BROADCAST_TIMEOUT).active() or {}
    except Exception as exc:
        return CeleryView({}, clock(), datetime.now(UTC), one_line(exc))
    active = {str(k): len(v or []) for k, v in replies.items()}
    return CeleryView(active, clock(), datetime.now(UTC))
