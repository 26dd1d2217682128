"""What the two halves of the jobs door share: the stores, the redactor and the hooks.

`JobLedger` (the job path) and `PipelineLedger` (a plan's pipeline) each hold the same
`LedgerParts`, so the pipeline half writes through the stores it is given, not through a
pointer back to the job half: neither module imports the other's class.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from planq.domain.jobs import AsyncJob
from planq.domain.ports import JobStore, PlanStore
from planq.domain.redaction import BUILTIN, Redactor
from planq.domain.webhooks import NO_WEBHOOKS, WebhookPolicy

logger = logging.getLogger("planq.ledger")

#: Called after commit with the jobs a pipeline queued (the runtime's publish).
Enqueue = Callable[[Sequence[AsyncJob]], None]
#: Called after commit when a wait at a gate ended: (approved|rejected|expired, since when).
GateObserver = Callable[[str, datetime], None]


@dataclass
class LedgerParts:
    """The stores one ledger writes in, and what it calls after a commit."""

    jobs: JobStore
    plans: PlanStore | None = None
    #: Every text the ledger keeps passes through it (planq's: built from settings).
    redactor: Redactor = BUILTIN
    #: Publishes a job a pipeline queued, after its transaction commits (the normal path:
    #: the runtime's publish; the dispatch relay covers a process that dies first).
    enqueue: Enqueue | None = None
    #: Told of every wait at an approval gate that ended, after the decision commits.
    on_gate_decided: GateObserver | None = None
    #: Who hears of a pipeline's events (an outbox row per receiver, with the event).
    webhooks: WebhookPolicy = NO_WEBHOOKS

    def publish_committed(self, jobs: Sequence[AsyncJob]) -> bool:
        """Publish jobs whose rows just committed; whether their messages went out.

        The one "publish after commit": a failure is logged, never raised, since the rows
        are durable and the dispatch relay sends them after its grace.
        """
        if self.enqueue is None or not jobs:
            return False
        try:
            self.enqueue(jobs)
        except Exception:  # the rows are durable; the dispatch relay publishes them later
            logger.exception("%d job(s) committed but not published; the relay will", len(jobs))
            return False
        return True
