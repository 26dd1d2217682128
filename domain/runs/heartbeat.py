"""A process's run heartbeat: ONE fenced statement per interval for every run it holds.

A run's liveness must not depend on how often its handler checkpoints (a batch may take
longer than the stale bound). While run_or_resume holds a run it is tracked here; a daemon
thread stamps every tracked run in one statement (`RunStoreProvider.heartbeat_runs`), under
each run's lease epoch. A run the statement no longer finds under its lease (swept, then
resumed by another worker) is lost: its store is told (`mark_lease_lost`), so the handler's
next `status()` or write raises RunFencedError at once, without waiting for the ledger.
The thread is a `PeriodicBatch`: while the ledger is unavailable it retries every
`retry_period(interval)` (at most 1 s) and reports to the process's outage monitor, so the
leases are renewed as soon as the ledger is back and an outage is logged once, not once per
interval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from planq.domain.outage import PROCESS_OUTAGES, OutageMonitor
from planq.domain.periodic import PeriodicBatch
from planq.domain.redaction import BUILTIN, Redactor
from planq.domain.runs.ports import RunStore

logger = logging.getLogger("planq.runs.heartbeat")

#: Stamps the runs held under these leases (run id -> epoch); returns the ids still held.
Beat = Callable[[Mapping[str, int]], set[str]]
#: The interval when none is given: interval_for(300), PLANQ_RUN_STALE_AFTER's default (its
#: 5 s floor beats every 0.83 s).
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
        self._beat = beat
        self.redactor = redactor
        self.outages = PROCESS_OUTAGES if outages is None else outages
        self._stores: dict[str, RunStore] = {}
        self._lock = threading.Lock()
        self.beats = 0  #: statements written (one per interval while anything is tracked)
        self.lost: list[str] = []  #: run ids found lost, oldest first (for logs and tests)
        #: The heartbeat thread (it checks the interval): started by track(), ends when idle.
        self.loop = PeriodicBatch(
            self._tick,
            interval,
            what="run heartbeat",
            idle=lambda: not self.tracked(),
            name="planq-run-heartbeat",
            outages=self.outages,
            redactor=redactor,
            log=logger,
        )

    @property
    def interval(self) -> float:
        """Seconds between heartbeats."""
        return self.loop.interval

    def track(self, store: RunStore) -> None:
        """Heartbeat store's run under its lease until untrack()."""
        with self._lock:
            self._stores[store.run_id] = store
        self.loop.start()

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
        return self._beat_stores(stores) if stores else set()

    def _tick(self) -> int:
        with self._lock:
            stores = dict(self._stores)
        if stores:
            self._beat_stores(stores)
        return len(stores)

    def _beat_stores(self, stores: dict[str, RunStore]) -> set[str]:
        held = self._beat({run_id: s.lease_epoch for run_id, s in stores.items()})
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

    def stop(self) -> None:
        """Forget every run and let the thread end (tests, shutdown)."""
        with self._lock:
            self._stores.clear()
        self.loop.stop()
