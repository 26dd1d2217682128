"""planq's OpenTelemetry traces: one trace per plan, from the producer through every phase.

Why one trace per plan, keyed by the plan: a plan's phases are started from different
processes (the producer, the worker that finished the phase before, the CLI or API process
that approved the gate, beat's relay), and the ledger keeps no trace context. So the trace
id IS the plan id (a ULID is 128 bits, a trace id's size): every process can join the
plan's trace from the plan id alone, and an operator finds a plan's trace by its id
(`planq_trace_id(plan_id)`, 32 hex digits). Spans whose parent is not at hand hang from a
fixed virtual root span id derived from the plan id (never exported); the caller's own
span, if any, is kept as a link on the producer span.

Within a process the context travels as usual: the publisher puts a W3C `traceparent`
into each message's headers when the span publishing it belongs to the plan's trace, and
the worker's job span continues from it (else from the plan's root). Only the API is
imported here: without an SDK every call is a no-op (`worker_config/telemetry.py` installs
the SDK when OTEL_* asks for it). Free text reaching an attribute or event passes through
the one redactor first; exceptions are never recorded raw.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from ulid import ULID

from planq.domain.redaction import BUILTIN, Redactor

TRACER_NAME = "planq"

# -- span names ---------------------------------------------------------------------------
#: the producer: `planq.queue <phase>`, `planq.run_plan`
SPAN_QUEUE = "planq.queue {phase}"
SPAN_RUN_PLAN = "planq.run_plan"
#: a phase job on the worker: `planq.job <phase>`
SPAN_JOB = "planq.job {phase}"
#: one ledger statement of a job: `planq.ledger claim|finish|progress`
SPAN_LEDGER = "planq.ledger {statement}"
#: the wait at an approval gate, from waiting to decided
SPAN_GATE = "planq.gate"
#: a recoverable run: `planq.run <job name>`
SPAN_RUN = "planq.run {name}"

# -- attributes ---------------------------------------------------------------------------
PLAN_ID = "planq.plan.id"
JOB_ID = "planq.job.id"
PHASE = "planq.job.phase"
ATTEMPT = "planq.job.attempt"
RETRY_OF = "planq.job.retry_of"
WORKER = "planq.worker.id"
QUEUE = "messaging.destination.name"
STATUS = "planq.job.status"
RESULT = "planq.job.result"
ERROR = "planq.error"
JOBS = "planq.jobs.count"
GATE_PHASE = "planq.gate.phase"
DECISION = "planq.gate.decision"
APPROVER = "planq.gate.approver"
APPROVERS = "planq.gate.approvers"
RUN_ID = "planq.run.id"
RUN_NAME = "planq.run.job_name"
RUN_STATUS = "planq.run.status"
SCANNED = "planq.run.scanned"
CANCEL_VIA = "planq.cancel.via"
CANCEL_REASON = "planq.cancel.reason"
NEW_JOB_ID = "planq.retry.job_id"

# -- events -------------------------------------------------------------------------------
EVENT_HEARTBEAT_FAILED = "planq.heartbeat_failed"
EVENT_CANCEL_REQUESTED = "planq.cancel_requested"
EVENT_TOKEN_TRIPPED = "planq.token_tripped"
EVENT_RETRY = "planq.retry_queued"
EVENT_CHECKPOINT = "planq.checkpoint"

#: The message header W3C trace context travels in (the propagator's own key).
TRACEPARENT = "traceparent"


#: The API's proxy tracer: it delegates to whichever provider is installed, whenever that
#: happens. Kept once: the SDK's get_tracer takes a lock and builds a scope on every call
#: (a fifth of a job span's cost when asked per span).
_TRACER = trace.get_tracer(TRACER_NAME)


def tracer() -> trace.Tracer:
    """The tracer of planq (the global provider's: a no-op one until an SDK is installed)."""
    return _TRACER


# -- the plan's trace ------------------------------------------------------------------------
def plan_trace_id(plan_id: str) -> int:
    """The trace id of a plan: its ULID's 128 bits."""
    return int(ULID.from_str(plan_id))


def planq_trace_id(plan_id: str) -> str:
    """The plan's trace id as a tracing backend shows it (32 hex digits)."""
    return trace.format_trace_id(plan_trace_id(plan_id))


def _root_span_id(plan_id: str) -> int:
    """The plan's virtual root span id: fixed per plan, never 0, never exported."""
    digest = hashlib.sha256(plan_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def plan_context(plan_id: str) -> otel_context.Context:
    """A context whose parent is the plan's virtual root: what joins the plan's trace."""
    root = SpanContext(
        trace_id=plan_trace_id(plan_id),
        span_id=_root_span_id(plan_id),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(root))


def _in_plan(ctx: otel_context.Context, plan_id: str) -> bool:
    span_context = trace.get_current_span(ctx).get_span_context()
    return span_context.is_valid and span_context.trace_id == plan_trace_id(plan_id)


def parent_for(plan_id: str) -> otel_context.Context:
    """The current context if it is in the plan's trace, else the plan's root."""
    current = otel_context.get_current()
    return current if _in_plan(current, plan_id) else plan_context(plan_id)


def _caller_links() -> list[Link]:
    """The caller's own span (a web request, a script's), kept as a link on the producer."""
    caller = trace.get_current_span().get_span_context()
    return [Link(caller)] if caller.is_valid else []


def active() -> bool:
    """Whether an SDK (any provider but the API's default proxy) records spans here."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


@contextmanager
def _span(
    name: str, kind: SpanKind, attributes: Mapping[str, Any], **options: Any
) -> Iterator[Span]:
    """The one way planq opens a span: a failure records the exception's type only.

    An exception's message may hold a secret, so neither it nor a traceback reaches a span.
    With no SDK nothing records: no span is started and no context attached (the job's
    hot path opens three of them).
    """
    if not active():
        yield trace.INVALID_SPAN
        return
    with tracer().start_as_current_span(
        name,
        kind=kind,
        attributes=dict(attributes),
        record_exception=False,
        set_status_on_exception=False,
        **options,
    ) as span:
        try:
            yield span
        except Exception as exc:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


# -- producer side -----------------------------------------------------------------------------
@contextmanager
def producer_span(
    name: str, plan_ids: Iterable[str], attributes: Mapping[str, Any] | None = None
) -> Iterator[Span]:
    """A producer's span in the (first) plan's trace; the caller's span as a link.

    Several plans at once (`delay_many`) share one span in the first plan's trace; each
    message still carries its own plan's context (`message_headers`).
    """
    if not active():  # no SDK: `_span` starts nothing, so the parent is not computed either
        yield trace.INVALID_SPAN
        return
    first = next(iter(plan_ids), None)
    ctx = None if first is None else parent_for(first)
    joined = first is not None and _in_plan(otel_context.get_current(), first)
    links = [] if joined else _caller_links()
    attrs = dict(attributes or {})
    if first is not None:
        attrs.setdefault(PLAN_ID, first)
    with _span(name, SpanKind.PRODUCER, attrs, context=ctx, links=links) as span:
        yield span


def message_headers(plan_id: str) -> dict[str, str] | None:
    """The W3C context a job's message carries: the publishing span, if in the plan's trace.

    None when nothing here records (no SDK, or a publish outside any planq span such as the
    relay's): the worker then continues from the plan's root, which needs no header.
    """
    current = otel_context.get_current()
    if not trace.get_current_span(current).is_recording() or not _in_plan(current, plan_id):
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=current)
    return carrier or None


# -- worker side ---------------------------------------------------------------------------------
def context_from(plan_id: str | None, carrier: Any) -> otel_context.Context | None:
    """The parent of a job span: the message's context if in the plan's trace, else its root.

    carrier is Celery's task request (custom headers are its attributes) or a mapping.
    """
    if plan_id is None or not active():  # no SDK: no parent to compute
        return None
    value = carrier.get(TRACEPARENT) if isinstance(carrier, Mapping) else None
    if value is None:
        value = getattr(carrier, TRACEPARENT, None)
    if isinstance(value, str):
        extracted = propagate.extract({TRACEPARENT: value})
        if _in_plan(extracted, plan_id):
            return extracted
    return plan_context(plan_id)


class _LiveSpans:
    """The spans of the jobs running in this process, by job id (events from other threads)."""

    def __init__(self) -> None:
        self._spans: dict[str, Span] = {}
        self._lock = threading.Lock()

    def put(self, job_id: str, span: Span) -> None:
        with self._lock:
            self._spans[job_id] = span

    def drop(self, job_id: str) -> None:
        with self._lock:
            self._spans.pop(job_id, None)

    def get(self, job_id: str) -> Span | None:
        with self._lock:
            return self._spans.get(job_id)


LIVE = _LiveSpans()


@contextmanager
def job_span(
    job_id: str,
    worker_id: str,
    parent: otel_context.Context | None = None,
    phase: str | None = None,
    queue: str | None = None,
) -> Iterator[Span]:
    """A phase job's span on the worker, from before its claim to after its finish."""
    attrs: dict[str, Any] = {JOB_ID: job_id, WORKER: worker_id}
    if queue:
        attrs[QUEUE] = queue
    if phase:
        attrs[PHASE] = phase
    name = SPAN_JOB.format(phase=phase or "?")
    with _span(name, SpanKind.CONSUMER, attrs, context=parent) as span:
        LIVE.put(job_id, span)
        try:
            yield span
        finally:
            LIVE.drop(job_id)


def describe_job(span: Span, plan_id: str, phase: str, attempt: int, retry_of: str | None) -> None:
    """What the claim told about the job (the span is named by its phase from here)."""
    span.update_name(SPAN_JOB.format(phase=phase))
    span.set_attributes({PLAN_ID: plan_id, PHASE: phase, ATTEMPT: attempt})
    if retry_of:
        span.set_attribute(RETRY_OF, retry_of)


def job_ended(span: Span, result: str, status: str | None, error: str | None) -> None:
    """The job's end: its status as written, the engine's result, the (redacted) error."""
    span.set_attribute(RESULT, result)
    if status is not None:
        span.set_attribute(STATUS, status)
    if status == "failed":
        span.set_status(Status(StatusCode.ERROR, error or "failed"))
        if error:
            span.set_attribute(ERROR, error)


@contextmanager
def ledger_span(statement: str, job_id: str) -> Iterator[Span]:
    """One ledger statement of a job (claim, finish, progress), a child of its job span."""
    name = SPAN_LEDGER.format(statement=statement)
    with _span(name, SpanKind.CLIENT, {JOB_ID: job_id}) as span:
        yield span


def job_event(job_id: str, name: str, attributes: Mapping[str, Any] | None = None) -> None:
    """An event on the span of a job running here, from any thread (nothing if none)."""
    span = LIVE.get(job_id)
    if span is not None and span.is_recording():
        span.add_event(name, dict(attributes or {}))


def jobs_event(job_ids: Iterable[str], name: str, attributes: Mapping[str, Any]) -> None:
    """The same event on each running job's span (a failed batched heartbeat)."""
    for job_id in job_ids:
        job_event(job_id, name, attributes)


def current_event(name: str, attributes: Mapping[str, Any] | None = None) -> None:
    """An event on the current span (a retry queued from inside the job's span)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.add_event(name, dict(attributes or {}))


# -- the gate -------------------------------------------------------------------------------------
def gate_span(
    plan_id: str,
    phase: str | None,
    since: datetime,
    decision: str,
    approver: str | None,
    redactor: Redactor = BUILTIN,
) -> Span:
    """The wait at a plan's gate, from when it began waiting; the caller ends it when decided.

    Started late, with the wait's start as its start time: a span cannot stay open across
    the processes of the worker that reached the gate and the one that decided.
    """
    attrs: dict[str, Any] = {PLAN_ID: plan_id, DECISION: decision}
    if phase:
        attrs[GATE_PHASE] = phase
    if approver:
        attrs[APPROVER] = redactor(approver)
    return tracer().start_span(
        SPAN_GATE,
        context=plan_context(plan_id),
        kind=SpanKind.INTERNAL,
        attributes=attrs,
        links=_caller_links(),
        start_time=int(since.timestamp() * 1e9),
        record_exception=False,
        set_status_on_exception=False,
    )


# -- recoverable runs ---------------------------------------------------------------------------
@contextmanager
def run_span(name: str, owner: str | None = None) -> Iterator[Span]:
    """A recoverable run's trigger, a span in a trace of its own; checkpoints as events."""
    attrs: dict[str, Any] = {RUN_NAME: name}
    if owner:
        attrs[WORKER] = owner
    with _span(SPAN_RUN.format(name=name), SpanKind.CONSUMER, attrs) as span:
        yield span


def run_ended(span: Span, run_id: str | None, status: object, scanned: int) -> None:
    """What the run's trigger left: its id, its status (None: skipped or lost), rows scanned."""
    if run_id:
        span.set_attribute(RUN_ID, run_id)
    span.set_attribute(RUN_STATUS, "none" if status is None else str(status))
    span.set_attribute(SCANNED, scanned)


def flush(timeout_millis: int = 5000) -> None:
    """Export what the process's span processors hold (a prefork child exits with os._exit)."""
    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if callable(force_flush):
        force_flush(timeout_millis)
