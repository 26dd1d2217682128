"""Riding out a ledger outage: retry transient failures only, within a bounded budget.

A PostgreSQL restart or failover makes every write fail for a few seconds; a job that has
done its work must not fail for that. Anything that is not an outage (bad data, a bug) is
not retried: it fails at once with its own error, so a poison message cannot hold a pool
slot for minutes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from domain.errors import LedgerUnavailableError
from domain.redaction import redact_secrets

T = TypeVar("T")
logger = logging.getLogger("planq.ledger")

#: Seconds a job's ledger write keeps trying through an outage before the job gives up.
DEFAULT_OUTAGE_BUDGET = 120.0
_FIRST_DELAY, _MAX_DELAY = 0.2, 5.0


def ride_out_outage(
    fn: Callable[[], T],
    what: str,
    budget: float = DEFAULT_OUTAGE_BUDGET,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call fn; while it raises LedgerUnavailableError, back off and retry for `budget` s.

    When the budget is spent the last LedgerUnavailableError is raised, saying so.
    """
    delay, stop = _FIRST_DELAY, time.monotonic() + budget
    while True:
        try:
            return fn()
        except LedgerUnavailableError as exc:
            if time.monotonic() + delay > stop:
                raise LedgerUnavailableError(
                    f"ledger unavailable for {budget:.0f}s during {what}: {exc}"
                ) from exc
            logger.warning(
                "ledger write %s failed (%s); retrying in %.1fs",
                what,
                redact_secrets(str(exc))[:200],
                delay,
            )
            sleep(delay)
            delay = min(delay * 2, _MAX_DELAY)
