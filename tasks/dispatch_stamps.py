"""Batched `dispatched_at` stamps: one UPDATE per ~100 ms per process, not one per publish.

The stamp tells the relay a row's message was sent. It is only a hint with a generous
grace (the relay waits `dispatch_grace` before re-publishing an unstamped row), so it can
trail the publish by a fraction of a second, and a stamp lost with its process costs at
most one duplicate message, which the claim's compare-and-set drops. `delay()` therefore
makes one round trip to the database, and a burst of publishes shares one statement.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Iterable

from planq.domain.errors import LedgerUnavailableError
from planq.domain.outage import DEFAULT_OUTAGE_BUDGET, PROCESS_OUTAGES, OutageMonitor

logger = logging.getLogger("planq.dispatch")

#: Seconds between flushes: far inside the relay's grace (600 s by default).
FLUSH_INTERVAL = 0.1


class DispatchStamps:
    """Collects published job ids and stamps them in one statement per interval."""

    def __init__(
        self,
        stamp: Callable[[list[str]], object],
        interval: float = FLUSH_INTERVAL,
        outage_budget: float = DEFAULT_OUTAGE_BUDGET,
        outages: OutageMonitor | None = None,
    ):
        self._stamp = stamp
        self.outages = PROCESS_OUTAGES if outages is None else outages
        self.interval = interval
        self.outage_budget = outage_budget
        self._pending: list[str] = []
        self._outage_since: float | None = None  #: monotonic time the ledger went away
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        atexit.register(self.flush)

    @property
    def pending(self) -> int:
        """How many ids wait for their stamp (held through an outage, or not yet flushed)."""
        with self._lock:
            return len(self._pending)

    def add(self, job_ids: Iterable[str]) -> None:
        """Remember ids whose message was just published; the thread stamps them soon."""
        with self._lock:
            self._pending.extend(job_ids)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="planq-dispatch-stamps", daemon=True
                )
                self._thread.start()

    def flush(self) -> int:
        """Stamp everything pending now; how many ids were sent to the ledger."""
        with self._lock:
            ids, self._pending = self._pending, []
        if not ids:
            return 0
        try:
            self._stamp(ids)
        except LedgerUnavailableError as exc:  # an outage: keep them for the next interval
            self._ride_out(ids, exc)
            return 0
        except Exception as exc:  # a hint only: the relay re-publishes unstamped rows
            logger.warning("could not stamp %d dispatched job(s): %s", len(ids), exc)
        else:
            self.outages.succeeded()
        self._outage_since = None
        return len(ids)

    def _ride_out(self, ids: list[str], exc: LedgerUnavailableError) -> None:
        """Put ids back while the outage is within budget; past it, leave them to the relay.

        The outage itself is the monitor's to log (once per outage, not per flush).
        """
        now = time.monotonic()
        self.outages.failed(f"stamping {len(ids)} dispatched job(s)", exc)
        if self._outage_since is None:
            self._outage_since = now
        if now - self._outage_since > self.outage_budget:
            logger.warning("dropping %d stamp(s) after %.0fs", len(ids), self.outage_budget)
            self._outage_since = None
            return
        with self._lock:
            self._pending[:0] = ids

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.interval)
            self.flush()
            with self._lock:
                if not self._pending:
                    self._thread = None
                    return

    def close(self) -> None:
        """Stamp what is pending and stop the thread."""
        self._closed = True
        self._wake.set()
        self.flush()
        atexit.unregister(self.flush)
