"""A process's run heartbeat: ONE fenced statement per interval for every run it holds.

A run's liveness must not depend on how often its handler checkpoints (a batch may take
longer than the stale bound). While run_or_resume holds a run it is tracked here; a daemon
thread stamps every tracked run in one statement (`RunStoreProvider.heartbeat_runs`), under
each run's lease epoch. A run the statement no longer finds under its lease (swept, then
resumed by another worker) is lost: its store is told (`mark_lease_lost`), so the handler's
next `status()` or write raises RunFencedError at once, without waiting for the ledger.
While the ledger is unavailable the thread retries every `retry_period(interval)` (at most
1 s) and reports to the process's outage monitor, so the leases are renewed as soon as the
ledger is back and an outage is logged once, not once per interval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from planq.domain.errors import LedgerUnavailableError
from planq.domain.outage import PROCESS_OUTAGES, OutageMonitor, retry_period
from planq.domain.redaction import BUILTIN, Redactor, describe_exception
from planq.domain.runs.ports import RunStore

logger = logging.getLogger("planq.runs.heartbeat")

#: Stamps the runs held under these leases (run id -> epoch); returns the ids still held.
Beat = Callable[[Mapping[str, int]], set[str]]
#: The interval when none is given: well under the 60 s floor of PLANQ_RUN_STALE_AFTER.
DEFAULT_INTERVAL = 10.0


def interval_for(stale_after: float) -> float:
    """A heartbeat interval safe for stale_after: six beats per stale window, at most 10 s."""
    if isinstance(stale_after, bool) or not isinstance(stale_after, int | float):
        raise TypeError(f"stale_after must be a number of seconds, got {stale_after!r}")
    if not stale_after > 0:
        raise ValueError(f"stale_after must be > 0 seconds, got {stale_after!r}")
    return min(DEFAULT_INTERVAL, stale_after / 6)


class RunHeartbeat:
    """The run heartbeat of one process (one per provider per process; not fork-safe)."""

    def __init__(
        self,
        beat: Beat,
        interval: float = DEFAULT_INTERVAL,
        outages: OutageMonitor | None = None,
        redactor: Redactor = BUILTIN,
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int | float):
            raise TypeError(f"interval must be a number of seconds, got {interval!r}")
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self._beat = beat
        self.redactor = redactor
        self.interval = float(interval)
        self.outages = PROCESS_OUTAGES if outages is None else outages
        self._failing = False  #: the last beat met an outage: retry soon
        self._stores: dict[str, RunStore] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.beats = 0  #: statements written (one per interval while anything is tracked)
        self.lost: list[str] = []  #: run ids found lost, oldest first (for logs and tests)

    def track(self, store: RunStore) -> None:
        """Heartbeat store's run under its lease until untrack()."""
        with self._lock:
            self._stores[store.run_id] = store
            if self._thread is None or not self._thread.is_alive():
                self._wake.clear()
                self._thread = threading.Thread(
                    target=self._run, name="planq-run-heartbeat", daemon=True
                )
                self._thread.start()

    def untrack(self, store: RunStore) -> None:
        """Stop heartbeating store's run (its handler returned)."""
        with self._lock:
            if self._stores.get(store.run_id) is store:
                del self._stores[store.run_id]

    def tracked(self) -> list[str]:
        """Ids of the runs heartbeated now."""
        with self._lock:
            return list(self._stores)

    def beat_now(self) -> set[str]:
        """Write one heartbeat for every tracked run; tell the stores of lost runs. Lost ids."""
        with self._lock:
            stores = dict(self._stores)
        if not stores:
            return set()
        held = self._beat({run_id: s.lease_epoch for run_id, s in stores.items()})
        self.outages.succeeded()
        self.beats += 1
        lost = set(stores) - set(held)
        for run_id in sorted(lost):
            store = stores[run_id]
            if not store.lease_lost:
                logger.warning(
                    "run %s is no longer held by this process (lease epoch %d): its handler "
                    "stops at its next status() or write",
                    run_id,
                    store.lease_epoch,
                )
                self.lost.append(run_id)
            store.mark_lease_lost()
        return lost

    def _run(self) -> None:
        while True:
            self._wake.wait(retry_period(self.interval) if self._failing else self.interval)
            with self._lock:
                if not self._stores:  # nothing left to beat: the next track() restarts us
                    self._thread = None
                    return
            self._failing = False
            try:
                self.beat_now()
            except LedgerUnavailableError as exc:  # the monitor logs the outage, once
                self.outages.failed("run heartbeat", exc)
                self._failing = True
            except Exception as exc:  # not an outage: one line, the next interval tries again
                logger.warning(
                    "run heartbeat failed; retrying in %.1fs: %s",
                    self.interval,
                    describe_exception(exc, self.redactor)[:300],
                )

    def stop(self) -> None:
        """Forget every run and let the thread end (tests, shutdown)."""
        with self._lock:
            self._stores.clear()
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
        self._wake.clear()
