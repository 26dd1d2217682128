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
from collections.abc import Callable, Iterable

from planq.domain.errors import LedgerUnavailableError
from planq.domain.outage import DEFAULT_OUTAGE_BUDGET, PROCESS_OUTAGES, OutageMonitor
from planq.domain.periodic import PeriodicBatch
from planq.domain.redaction import BUILTIN, Redactor

logger = logging.getLogger("planq.dispatch")

#: Seconds between flushes: far inside the relay's grace (600 s by default).
FLUSH_INTERVAL = 0.1


class DispatchStamps:
    """Collects published job ids and stamps them in one statement per interval.

    The thread is a `PeriodicBatch`. Through a ledger outage the ids are kept and retried
    (the outage is the monitor's to log, once) until the outage has lasted `outage_budget`
    seconds; then they are left to the relay, with one warning. Any other failure drops the
    batch with one redacted line: a stamp is a hint only.
    """

    def __init__(
        self,
        stamp: Callable[[list[str]], object],
        interval: float = FLUSH_INTERVAL,
        outage_budget: float = DEFAULT_OUTAGE_BUDGET,
        outages: OutageMonitor | None = None,
        redactor: Redactor = BUILTIN,
    ):
        self._stamp = stamp
        self.outages = PROCESS_OUTAGES if outages is None else outages
        self._pending: list[str] = []
        self._lock = threading.Lock()
        #: The flush thread: started by add(), ends when nothing is pending.
        self.loop = PeriodicBatch(
            self._stamp_pending,
            interval,
            what="dispatch stamps",
            idle=lambda: not self.pending,
            name="planq-dispatch-stamps",
            outages=self.outages,
            redactor=redactor,
            log=logger,
            outage_budget=outage_budget,
            on_budget_spent=self._leave_to_the_relay,
        )
        atexit.register(self.flush)

    @property
    def interval(self) -> float:
        """Seconds between flushes (a test may stretch it to flush by hand)."""
        return self.loop.interval

    @interval.setter
    def interval(self, seconds: float) -> None:
        self.loop.interval = seconds

    @property
    def outage_budget(self) -> float:
        """Seconds of outage the ids are kept through before they are left to the relay."""
        return self.loop.outage_budget or 0.0

    @property
    def pending(self) -> int:
        """How many ids wait for their stamp (held through an outage, or not yet flushed)."""
        with self._lock:
            return len(self._pending)

    def add(self, job_ids: Iterable[str]) -> None:
        """Remember ids whose message was just published; the thread stamps them soon."""
        with self._lock:
            self._pending.extend(job_ids)
        self.loop.start()

    def flush(self) -> int:
        """Stamp everything pending now; how many ids were stamped (0 if that failed)."""
        return self.loop.run_once()

    def _stamp_pending(self) -> int:
        """The loop's tick: one statement for every pending id; an outage puts them back."""
        with self._lock:
            ids, self._pending = self._pending, []
        if not ids:
            return 0
        try:
            self._stamp(ids)
        except LedgerUnavailableError:  # kept for the next try; the loop counts the budget
            with self._lock:
                self._pending[:0] = ids
            raise
        return len(ids)

    def _leave_to_the_relay(self) -> None:
        """The outage outlasted the budget: drop the held ids (the relay re-publishes them)."""
        with self._lock:
            ids, self._pending = self._pending, []
        if ids:
            logger.warning("dropping %d stamp(s) after %.0fs", len(ids), self.outage_budget)

    def close(self) -> None:
        """Stamp what is pending and stop the thread."""
        self.loop.stop()
        self.flush()
        self.loop.close()
        atexit.unregister(self.flush)
