"""Riding out a ledger outage quietly: one monitor per process, fixed short retries.

A PostgreSQL restart, failover or partition makes every write fail for a while; a job that
has done its work must not fail for that. Anything that is not an outage (bad data, a bug)
is not retried: it fails at once with its own error, so a poison message cannot hold a pool
slot for minutes.

Every path that meets an outage (the job heartbeat, the run heartbeat, dispatch stamps,
the job-path writes through `ride_out_outage`, the maintenance sweeps) reports into the
process's ONE `OutageMonitor`, which logs one WARNING when the outage starts, a one-line
reminder every `REMINDER_EVERY` seconds, and one INFO with the duration on recovery. The
failures' tracebacks (with their SQL) go to DEBUG only. While the ledger is away, retries
run at a short fixed period (`RETRY_PERIOD`), so a holder renews its lease within about a
second of the ledger's return, not after an exponential backoff.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from planq.domain.errors import LedgerUnavailableError
from planq.domain.redaction import redact_secrets

T = TypeVar("T")
logger = logging.getLogger("planq.ledger")

#: Seconds a job's ledger write keeps trying through an outage before the job gives up.
DEFAULT_OUTAGE_BUDGET = 120.0
#: While the ledger is unavailable, retry at most this far apart (and renew at once after).
RETRY_PERIOD = 1.0
_FIRST_DELAY = 0.2
#: Seconds between "still unavailable" reminders of one outage.
REMINDER_EVERY = 30.0


def retry_period(interval: float) -> float:
    """How long a periodic writer (a heartbeat) waits before retrying a failed write."""
    return min(interval, RETRY_PERIOD)


def outage_reason(exc: BaseException) -> str:
    """One redacted line for a log: the driver's first line, never the SQL or parameters."""
    text = str(exc).strip().splitlines()
    return redact_secrets(text[0] if text else type(exc).__name__)[:200]


class OutageMonitor:
    """What this process knows about ledger outages, and the only logger of them.

    `failed()` on each transient failure, `succeeded()` after each successful ledger call
    (a cheap attribute read unless an outage is on). Thread-safe; `reset()` after a fork.
    """

    def __init__(
        self,
        remind_every: float = REMINDER_EVERY,
        clock: Callable[[], float] = time.monotonic,
        log: logging.Logger = logger,
    ) -> None:
        self.remind_every = remind_every
        self._clock = clock
        self._log = log
        self.reset()

    def reset(self) -> None:
        """Forget everything (a forked child starts with its own view; tests)."""
        self._lock = threading.Lock()
        self._since: float | None = None  #: when the current outage began (monotonic)
        self._reminded = 0.0
        self._recovered_at: float | None = None
        self.outages = 0  #: outages seen by this process

    @property
    def in_outage(self) -> bool:
        """Whether the last ledger call this process made failed as an outage."""
        return self._since is not None

    def failed(self, what: str, exc: BaseException) -> None:
        """A ledger call (`what`) failed transiently: log it once per outage, remind rarely."""
        now = self._clock()
        with self._lock:
            if self._since is None:
                self._since = self._reminded = now
                self.outages += 1
                line: str | None = "start"
            elif now - self._reminded >= self.remind_every:
                self._reminded = now
                line = "reminder"
            else:
                line = None
            since = self._since
        if line == "start":
            self._log.warning(
                "ledger unavailable (%s: %s); riding it out, retrying every %.0fs",
                what,
                outage_reason(exc),
                RETRY_PERIOD,
            )
        elif line == "reminder":
            self._log.warning("ledger still unavailable after %.0fs (%s)", now - since, what)
        self._log.debug("ledger call %s failed", what, exc_info=exc)

    def succeeded(self) -> None:
        """A ledger call went through: ends the outage if one was on (one INFO line)."""
        if self._since is None:
            return
        now = self._clock()
        with self._lock:
            since, self._since = self._since, None
            if since is None:
                return
            self._recovered_at = now
        self._log.info("ledger available again after %.1fs of outage", now - since)

    def recovered_ago(self) -> float | None:
        """Seconds since this process saw the ledger come back (0 during one; None: never)."""
        if self._since is not None:
            return 0.0
        recovered = self._recovered_at
        return None if recovered is None else max(0.0, self._clock() - recovered)


#: This process's monitor (each process has exactly one: a forked child resets its copy).
PROCESS_OUTAGES = OutageMonitor()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=PROCESS_OUTAGES.reset)


def ride_out_outage(
    fn: Callable[[], T],
    what: str,
    budget: float = DEFAULT_OUTAGE_BUDGET,
    sleep: Callable[[float], None] = time.sleep,
    monitor: OutageMonitor | None = None,
) -> T:
    """Call fn; while it raises LedgerUnavailableError, retry (at most RETRY_PERIOD apart).

    Each failure and the recovery are reported to the monitor (the process's by default).
    When the budget is spent the last LedgerUnavailableError is raised, saying so.
    """
    outages = PROCESS_OUTAGES if monitor is None else monitor
    delay, stop = _FIRST_DELAY, time.monotonic() + budget
    while True:
        try:
            result = fn()
        except LedgerUnavailableError as exc:
            outages.failed(what, exc)
            if time.monotonic() + delay > stop:
                raise LedgerUnavailableError(
                    f"ledger unavailable for {budget:.0f}s during {what}: {outage_reason(exc)}"
                ) from exc
            sleep(delay)
            delay = min(delay * 2, RETRY_PERIOD)
            continue
        outages.succeeded()
        return result
