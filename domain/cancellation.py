"""A cooperative cancellation token: the executor checks it at safe points."""

from __future__ import annotations

import threading


class CancellationToken:
    """Thread-safe flag that a cancel request trips and an executor polls or waits on."""

    __slots__ = ("_event", "_reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._reason: str | None = None

    def cancel(self, reason: str | None = None) -> None:
        """Trip the token; every waiter wakes up."""
        if not self._event.is_set():
            self._reason = reason
        self._event.set()

    @property
    def is_cancelled(self) -> bool:
        """Whether cancel() has been called since the last reset()."""
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        """Why the token was tripped, when the canceller said."""
        return self._reason

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to timeout seconds; True once cancelled (an interruptible sleep)."""
        return self._event.wait(timeout)

    def reset(self) -> None:
        """Clear the token so it can be reused."""
        self._reason = None
        self._event.clear()

    def __repr__(self) -> str:
        return f"CancellationToken(cancelled={self.is_cancelled})"
