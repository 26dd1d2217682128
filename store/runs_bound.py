"""What every run store shares: the run it is bound to, its lease, and the clock it reads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from planq.domain.errors import RunFencedError
from planq.domain.redaction import BUILTIN, Redactor

Clock = Callable[[], datetime]


class BoundRun:
    """A store bound to one run under one lease: its id, start time and epoch never change.

    Once the run is known lost (a refused write, or the heartbeat found it gone), status()
    and every write raise RunFencedError before touching the ledger.
    """

    def __init__(
        self,
        run_id: str,
        started_at: datetime,
        clock: Clock,
        lease_epoch: int = 0,
        redactor: Redactor = BUILTIN,
    ) -> None:
        #: What every error, finding detail and param value passes through before a write.
        self.redactor = redactor
        self._run_id = run_id
        self._started_at = started_at
        self._clock = clock
        self._epoch = lease_epoch
        self._lost = threading.Event()
        self._lost_to: tuple[int | None, str | None] = (None, None)

    @property
    def run_id(self) -> str:
        """The run's ULID."""
        return self._run_id

    @property
    def started_at(self) -> datetime:
        """When the run first started (long scans use it as their time reference)."""
        return self._started_at

    @property
    def lease_epoch(self) -> int:
        """The lease this store holds; every write carries it in its WHERE."""
        return self._epoch

    @property
    def lease_lost(self) -> bool:
        """Whether this store knows the run is no longer its own."""
        return self._lost.is_set()

    def mark_lease_lost(self) -> None:
        """The heartbeat found the run no longer held under this lease."""
        self._lost.set()

    def _fenced(self, current_epoch: int | None, status: str | None) -> RunFencedError:
        """Remember the loss and build the error a refused write raises."""
        if current_epoch is not None or status is not None:
            self._lost_to = (current_epoch, status)
        self._lost.set()
        epoch, known = self._lost_to
        return RunFencedError(self._run_id, self._epoch, epoch, known)

    def _check_held(self) -> None:
        """Raise RunFencedError at once when the loss is already known (no ledger read)."""
        if self._lost.is_set():
            raise self._fenced(None, None)
