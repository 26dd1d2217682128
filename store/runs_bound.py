"""What every run store shares: the run it is bound to, and the clock it reads."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

Clock = Callable[[], datetime]


class BoundRun:
    """A store bound to one run: its id and its start time never change."""

    def __init__(self, run_id: str, started_at: datetime, clock: Clock) -> None:
        self._run_id = run_id
        self._started_at = started_at
        self._clock = clock

    @property
    def run_id(self) -> str:
        """The run's ULID."""
        return self._run_id

    @property
    def started_at(self) -> datetime:
        """When the run first started (long scans use it as their time reference)."""
        return self._started_at
