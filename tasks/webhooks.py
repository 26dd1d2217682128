"""Webhook delivery: beat reads the outbox and POSTs each due notification, signed.

At least once, and once in practice: a row is leased before its POST and deleted after a
2xx, so a process that dies in between leaves it due again when its lease ends; the
receiver drops the repeat by the event id (`X-Planq-Event-Id`, also `Idempotency-Key`).
A failure backs off (1, 2, 4 … s up to PLANQ_WEBHOOK_BACKOFF_MAX, or a longer
Retry-After) and after PLANQ_WEBHOOK_MAX_ATTEMPTS tries is given up: kept in the outbox
with its last error, logged once. Nothing here runs on a phase's path.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit

import httpx

from planq.domain.clock import utcnow
from planq.domain.ports import PlanStore
from planq.domain.redaction import Redactor, describe_exception
from planq.domain.webhooks import (
    EVENT_ID_HEADER,
    EVENT_TYPE_HEADER,
    SIGNATURE_HEADER,
    Delivery,
    WebhookPolicy,
    next_try,
)
from planq.tasks import metrics

logger = logging.getLogger("planq.webhooks")
#: Rows leased per read: each is one POST of at most the timeout, inside the lease.
BATCH = 10
_GONE = 410  #: the receiver says it will never take one again: no retry


@dataclass
class DeliveryReport:
    """What one sweep did (the maintenance task's result)."""

    delivered: list[str] = field(default_factory=list)  #: event ids
    retried: list[str] = field(default_factory=list)
    gave_up: list[str] = field(default_factory=list)


def receiver(url: str) -> str:
    """A receiver as logs and errors name it: scheme, host and port, never its path or query.

    A chat's webhook URL carries its secret in the path.
    """
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}"


class WebhookSender:
    """Delivers the outbox's due rows; one per process (the Runtime's)."""

    def __init__(
        self,
        plans: PlanStore,
        policy: WebhookPolicy,
        redactor: Redactor,
        client: httpx.Client | None = None,
    ) -> None:
        self.plans = plans
        self.policy = policy
        self.redactor = redactor
        self.client = client or httpx.Client(
            timeout=policy.timeout, follow_redirects=False, headers={"User-Agent": "planq"}
        )

    def deliver_due(self, batches: int = 10) -> DeliveryReport:
        """Lease and send due rows, a batch at a time, until none is due (or `batches` ran)."""
        report = DeliveryReport()
        for _ in range(batches):
            now = utcnow()
            lease = now + timedelta(seconds=(self.policy.timeout + 5.0) * BATCH)
            due = self.plans.claim_deliveries(now, lease, BATCH)
            for delivery in due:
                self._send(delivery, report)
            if len(due) < BATCH:
                break
        metrics.webhook_tries(len(report.delivered), len(report.retried), len(report.gave_up))
        return report

    def _send(self, delivery: Delivery, report: DeliveryReport) -> None:
        body = delivery.body.encode()
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: self.policy.sign(body),
            EVENT_ID_HEADER: delivery.event_id,
            "Idempotency-Key": delivery.event_id,
            EVENT_TYPE_HEADER: delivery.event_type,
            "X-Planq-Delivery": delivery.delivery_id,
        }
        wait: float | None = None
        try:
            answer = self.client.post(delivery.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            error = describe_exception(exc, self.redactor)
        else:
            if answer.is_success:
                self.plans.delivered(delivery.delivery_id)
                report.delivered.append(delivery.event_id)
                return
            error = f"HTTP {answer.status_code}"
            wait = _retry_after(answer)
            if answer.status_code == _GONE:
                self._give_up(delivery, error, report)
                return
        retry_at = next_try(self.policy, delivery.attempts, utcnow())
        if retry_at is None:
            self._give_up(delivery, error, report)
            return
        if wait is not None:
            longest = min(wait, self.policy.backoff_max)
            retry_at = max(retry_at, utcnow() + timedelta(seconds=longest))
        self.plans.delivery_failed(delivery.delivery_id, error, retry_at)
        report.retried.append(delivery.event_id)

    def _give_up(self, delivery: Delivery, error: str, report: DeliveryReport) -> None:
        self.plans.delivery_failed(delivery.delivery_id, error, None)
        report.gave_up.append(delivery.event_id)
        logger.warning(
            "webhook %s for event %s (%s) given up after %d tries: %s",
            receiver(delivery.url),
            delivery.event_id,
            delivery.event_type,
            delivery.attempts,
            error,
        )

    def close(self) -> None:
        """Close the HTTP connections."""
        self.client.close()


def _retry_after(answer: httpx.Response) -> float | None:
    """A 429's or 503's Retry-After in seconds (the date form is not taken)."""
    value = answer.headers.get("Retry-After", "")
    return float(value) if value.isdigit() else None
