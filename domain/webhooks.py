"""Webhooks: which plan events notify, what a delivery carries, how it is signed and retried.

A notification is a row in the ledger's outbox, written in the transaction of the event
it tells of (PipelineLedger.record), so an event is never told without being kept nor kept
without being told. Delivery is the maintenance task's (tasks/webhooks.py): signed with
GitHub's scheme (`X-Planq-Signature: sha256=HMAC-SHA256(secret, body)`), the event id as
the idempotency key, retried with exponential backoff up to a bound, then given up.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from planq.domain.clock import as_utc, utcnow
from planq.domain.errors import ConfigurationError, PipelineError
from planq.domain.ids import new_id
from planq.domain.pipeline import EventKind, PlanEvent
from planq.domain.plans import Plan
from planq.domain.redaction import BUILTIN, Redactor

#: The events that notify, by the type a receiver sees (the issue's list: a gate waiting,
#: approved, rejected or expired; a phase failed or cancelled; a cancel asked; plan done).
NOTIFY: dict[EventKind, str] = {
    EventKind.awaiting_approval: "gate.waiting",
    EventKind.approved: "gate.approved",
    EventKind.rejected: "gate.rejected",
    EventKind.expired: "gate.expired",
    EventKind.failed: "phase.failed",
    EventKind.cancelled: "phase.cancelled",
    EventKind.cancel_requested: "plan.cancel_requested",
    EventKind.done: "plan.finished",
}
SIGNATURE_HEADER = "X-Planq-Signature"
EVENT_ID_HEADER = "X-Planq-Event-Id"  #: the idempotency key: one id per event, every retry
EVENT_TYPE_HEADER = "X-Planq-Event"
MAX_URL_LENGTH = 2000
MAX_NOTIFY_URLS = 5  #: per pipeline (`--notify`)
DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_BACKOFF_MAX = 300.0
MAX_ERROR_LENGTH = 500


def check_url(url: object, what: str = "notify") -> str:
    """An http(s) URL with a host, at most MAX_URL_LENGTH; else a PipelineError naming it."""
    if not isinstance(url, str) or not url.strip():
        raise PipelineError(f"{what} must be an http(s) URL, got {str(url)[:40]!r}")
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        raise PipelineError(f"{what} must be an http(s) URL with a host, got {_shown(url)!r}")
    if len(url) > MAX_URL_LENGTH:
        raise PipelineError(f"{what} must be at most {MAX_URL_LENGTH} characters")
    return url


def check_notify(urls: object) -> list[str]:
    """A pipeline's own receivers: a list of URLs (None: none), deduplicated, bounded."""
    if urls is None:
        return []
    if isinstance(urls, str) or not isinstance(urls, Sequence):
        raise PipelineError("notify must be a list of http(s) URLs")
    checked = list(dict.fromkeys(check_url(u) for u in urls))
    if len(checked) > MAX_NOTIFY_URLS:
        raise PipelineError(f"notify takes at most {MAX_NOTIFY_URLS} URLs, got {len(checked)}")
    return checked


def _shown(url: str) -> str:
    """A URL as an error shows it: no user info, no query, clipped."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{parts.path}"[:60] if parts.scheme else url[:40]


@dataclass(frozen=True, slots=True)
class WebhookPolicy:
    """Where notifications go and how they are retried (PLANQ_WEBHOOK_*; validated here).

    Without a secret nothing is sent and `--notify` is refused: every delivery is signed.
    """

    urls: tuple[str, ...] = ()
    secret: str | None = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_max: float = DEFAULT_BACKOFF_MAX
    #: Hosts a pipeline's own `--notify` URL may name (`*`: any); empty: those of `urls`.
    #: Whoever may run a pipeline may not make the fleet POST to any address it reaches
    #: (a cloud's metadata service, an internal admin port): the operator says where.
    notify_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        try:
            for url in self.urls:
                check_url(url, "PLANQ_WEBHOOK_URLS")
        except PipelineError as exc:
            raise ConfigurationError(str(exc)) from None
        if self.urls and not self.secret:
            raise ConfigurationError(
                "PLANQ_WEBHOOK_URLS needs PLANQ_WEBHOOK_SECRET: every delivery is signed"
            )

    def allowed_hosts(self) -> frozenset[str]:
        """The hosts `--notify` may name: the configured ones, else the fleet receivers'."""
        hosts = self.notify_hosts or tuple(urlsplit(u).hostname or "" for u in self.urls)
        return frozenset(h.lower() for h in hosts if h)

    def check_receivers(self, urls: object) -> list[str]:
        """A pipeline's own receivers, checked; PipelineError for one this fleet refuses."""
        receivers = check_notify(urls)
        if receivers and not self.enabled:
            raise PipelineError("notify needs PLANQ_WEBHOOK_SECRET: every delivery is signed")
        allowed = self.allowed_hosts()
        for url in receivers:
            host = (urlsplit(url).hostname or "").lower()
            if "*" not in allowed and host not in allowed:
                raise PipelineError(
                    f"notify: host {host[:60]!r} is not among PLANQ_WEBHOOK_NOTIFY_HOSTS "
                    f"({', '.join(sorted(allowed)) or 'none'})"
                )
        return receivers

    @property
    def enabled(self) -> bool:
        """Whether notifications can be signed, and so sent."""
        return bool(self.secret)

    def targets(self, plan: Plan) -> list[str]:
        """Every receiver of plan's events: the fleet's, then the pipeline's own, once each."""
        if not self.enabled:
            return []
        return list(dict.fromkeys([*self.urls, *plan.pipeline_notify]))

    def retry_in(self, attempts: int) -> float:
        """Seconds before the next try after `attempts` failed ones: 1, 2, 4 … backoff_max."""
        return float(min(2.0 ** max(attempts - 1, 0), self.backoff_max))

    def sign(self, body: bytes) -> str:
        """The signature header's value (GitHub's scheme)."""
        return sign(self.secret or "", body)


NO_WEBHOOKS = WebhookPolicy()


def sign(secret: str, body: bytes) -> str:
    """`sha256=` and the hex HMAC-SHA256 of body under secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, signature: str | None) -> bool:
    """Whether signature is body's under secret (constant time): what a receiver checks."""
    return signature is not None and hmac.compare_digest(sign(secret, body), signature)


class Delivery(BaseModel):
    """One notification to one receiver, as the outbox keeps it until it is delivered."""

    model_config = ConfigDict(frozen=True)

    delivery_id: str = Field(default_factory=new_id)
    event_id: str
    plan_id: str
    url: str
    body: str  #: the JSON sent, already redacted
    attempts: int = Field(default=0, ge=0)
    next_at: datetime | None = Field(default_factory=utcnow)  #: None: given up
    created_at: datetime = Field(default_factory=utcnow)
    last_error: str | None = None

    @field_validator("next_at", "created_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)

    @property
    def event_type(self) -> str:
        """The receiver's name for what happened (`gate.waiting` …)."""
        return str(json.loads(self.body)["type"])


def body_of(event: PlanEvent, plan: Plan, redactor: Redactor = BUILTIN) -> str:
    """The JSON a receiver gets: the event, and the plan as it stands after it."""
    document = {
        "id": event.event_id,
        "type": NOTIFY[event.kind],
        "kind": event.kind.value,
        "at": event.at.isoformat(),
        "plan": {
            "id": plan.plan_id,
            "name": redactor(plan.name),
            "phase": plan.phase.value if plan.phase else None,
            "status": plan.status.value if plan.status else None,
            "pipeline": plan.pipeline_dict(),
        },
        "phase": event.phase.value if event.phase else None,
        "job_id": event.job_id,
        "actor": event.actor,  # the event's texts are redacted when it is made
        "note": event.note,
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True)


def deliveries_for(
    event: PlanEvent, plan: Plan, policy: WebhookPolicy, redactor: Redactor = BUILTIN
) -> list[Delivery]:
    """The outbox rows an event makes: one per receiver, none for a kind that does not notify."""
    if event.kind not in NOTIFY:
        return []
    urls = policy.targets(plan)
    if not urls:
        return []
    body = body_of(event, plan, redactor)
    return [
        Delivery(event_id=event.event_id, plan_id=plan.plan_id, url=u, body=body, next_at=event.at)
        for u in urls
    ]


def next_try(policy: WebhookPolicy, attempts: int, now: datetime) -> datetime | None:
    """When a delivery that failed its attempts-th try goes again; None: give it up."""
    if attempts >= policy.max_attempts:
        return None
    return now + timedelta(seconds=policy.retry_in(attempts))
