"""planq's own Prometheus metrics, safe under prefork (multiprocess mode).

`serve_metrics()` sets PROMETHEUS_MULTIPROC_DIR in the worker's parent before any child
forks (and re-selects prometheus_client's value store, which is chosen at import); every
metric is created on first use, so each process writes its own file in that directory.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from functools import cache
from typing import Any

from planq.domain.clock import utcnow
from planq.domain.pipeline import GateSummary

logger = logging.getLogger("planq.metrics")
_lock = threading.Lock()
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
#: a person decides: from seconds to days
APPROVAL_BUCKETS = (1, 10, 60, 300, 900, 3600, 4 * 3600, 86400, 7 * 86400)
#: the gate gauges count no further than this many waiting plans (then "at least")
GATE_COUNT_CAP = 10_000


@cache
def _metrics() -> dict[str, Any]:
    from prometheus_client import Counter, Gauge, Histogram

    return {
        "queue_wait": Histogram(
            "planq_job_queue_wait_seconds",
            "Job queued -> claimed by a worker (broker and worker backlog)",
            ["phase"],
            buckets=DURATION_BUCKETS,
        ),
        "running": Gauge(
            "planq_jobs_running",
            "Jobs running now (claimed, not yet finished), summed over live processes",
            ["phase"],
            multiprocess_mode="livesum",
        ),
        "webhooks": Counter(
            "planq_webhook_deliveries_total",
            "Webhook delivery tries, by outcome (delivered, retried, gave_up)",
            ["outcome"],
        ),
        "ledger_errors": Counter(
            "planq_ledger_errors_total",
            "A job's ledger statement that failed (after riding out an outage), by kind",
            ["statement", "kind"],
        ),
        "jobs": Counter(
            "planq_jobs_total", "Jobs that ended, by phase and status", ["phase", "status"]
        ),
        "duration": Histogram(
            "planq_job_duration_seconds",
            "Job run time (claim to finish)",
            ["phase"],
            buckets=DURATION_BUCKETS,
        ),
        "stuck": Counter(
            "planq_stuck_jobs_detected_total", "Running jobs failed because their heartbeat expired"
        ),
        "cancels": Counter("planq_cancellations_total", "Cancel requests, by outcome", ["outcome"]),
        "cancel_latency": Histogram(
            "planq_cancel_latency_seconds",
            "Cancel request recorded -> job ended cancelled",
            buckets=LATENCY_BUCKETS,
        ),
        "relay": Counter(
            "planq_relay_dispatches_total", "Queued rows re-published by the dispatch relay"
        ),
        "runs": Counter(
            "planq_recoverable_runs_total",
            "Recoverable runs that stopped, by status",
            ["job_name", "status"],
        ),
        "findings": Counter(
            "planq_findings_total", "Findings recorded, by severity", ["job_name", "severity"]
        ),
        "approval_wait": Histogram(
            "planq_plan_approval_wait_seconds",
            "Time a plan waited at its approval gate, by how the wait ended",
            ["decision"],
            buckets=APPROVAL_BUCKETS,
        ),
    }


def _safe(fn: Any) -> Any:
    """Metrics must never break a job: failures are logged, not raised."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:
            logger.exception("metrics update failed")

    return wrapper


@_safe
def job_finished(phase: str, status: str, seconds: float | None) -> None:
    """A job reached a terminal status."""
    m = _metrics()
    m["jobs"].labels(phase=phase, status=status).inc()
    if seconds is not None:
        m["duration"].labels(phase=phase).observe(max(seconds, 0.0))


@_safe
def job_claimed(phase: str, queued_for: float) -> None:
    """A worker claimed a job that waited `queued_for` seconds since it was queued."""
    m = _metrics()
    m["queue_wait"].labels(phase=phase).observe(max(queued_for, 0.0))
    m["running"].labels(phase=phase).inc()


@_safe
def job_left(phase: str) -> None:
    """A job this process claimed stopped running here (whatever it ended as)."""
    _metrics()["running"].labels(phase=phase).dec()


@_safe
def ledger_error(statement: str, kind: str) -> None:
    """A job's ledger statement failed: unavailable (outage past its budget), rejected, other."""
    _metrics()["ledger_errors"].labels(statement=statement, kind=kind).inc()


@_safe
def webhook_tries(delivered: int, retried: int, gave_up: int) -> None:
    """One delivery sweep's outcomes (tasks/webhooks.py)."""
    counter = _metrics()["webhooks"]
    for outcome, count in (("delivered", delivered), ("retried", retried), ("gave_up", gave_up)):
        if count:
            counter.labels(outcome=outcome).inc(count)


@_safe
def stuck_detected(count: int) -> None:
    """The stuck sweep failed `count` jobs."""
    if count:
        _metrics()["stuck"].inc(count)


@_safe
def cancel_requested(outcome: str) -> None:
    """A cancel request was recorded with this outcome."""
    _metrics()["cancels"].labels(outcome=outcome).inc()


@_safe
def cancel_latency(seconds: float) -> None:
    """From the recorded cancel request to the job ending cancelled."""
    _metrics()["cancel_latency"].observe(max(seconds, 0.0))


@_safe
def relayed(count: int) -> None:
    """The relay re-published `count` rows."""
    if count:
        _metrics()["relay"].inc(count)


@_safe
def run_stopped(job_name: str, status: str) -> None:
    """A recoverable run stopped (Completed, Paused, Failed)."""
    _metrics()["runs"].labels(job_name=job_name, status=status).inc()


@_safe
def findings_recorded(job_name: str, counts: dict[str, int]) -> None:
    """Findings a run recorded, by severity."""
    for severity, count in counts.items():
        if count:
            _metrics()["findings"].labels(job_name=job_name, severity=severity).inc(count)


@_safe
def gate_decided(decision: str, reached_gate: datetime) -> None:
    """A wait at the approval gate ended: approved, rejected or expired."""
    waited = (utcnow() - reached_gate).total_seconds()
    _metrics()["approval_wait"].labels(decision=decision).observe(max(waited, 0.0))


class GateCollector:
    """The plans waiting at an approval gate, read from the ledger at each scrape.

    Decisions come from any process (the CLI, the API, beat's expiry), so a counter kept
    in one of them would miss the others: the ledger is the one place that knows. One
    statement over the gate index per scrape; a failed read yields nothing (logged).
    """

    def __init__(self, read: Callable[[int], GateSummary]) -> None:
        self.read = read

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        try:
            gate = self.read(GATE_COUNT_CAP)
        except Exception:
            logger.exception("could not read the plans waiting at a gate")
            return
        since = gate.oldest_since
        oldest = 0.0 if since is None else max((utcnow() - since).total_seconds(), 0.0)
        yield GaugeMetricFamily(
            "planq_plans_awaiting_approval",
            f"Plans waiting at their approval gate (counted up to {GATE_COUNT_CAP})",
            value=gate.waiting,
        )
        yield GaugeMetricFamily(
            "planq_plan_approval_oldest_wait_seconds",
            "How long the longest-waiting plan has waited at its gate (0: none waits)",
            value=oldest,
        )


def exposition(gate: Callable[[int], GateSummary]) -> tuple[bytes, str]:
    """(body, content type): this process's metrics and the gate gauges, for the admin API."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

    _metrics()  # the families exist (at zero) before the first decision
    gauges = CollectorRegistry()
    gauges.register(GateCollector(gate))
    return generate_latest(REGISTRY) + generate_latest(gauges), CONTENT_TYPE_LATEST


def serve_metrics(
    port: int,
    addr: str = "0.0.0.0",
    directory: str | None = None,
    gate: Callable[[int], GateSummary] | None = None,
) -> str:
    """Serve /metrics on port, aggregating every process of this worker; the data dir.

    gate reads the plans waiting at a gate (the ledger's `gate_summary`) at each scrape.
    """
    with _lock:
        directory = directory or os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not directory:
            directory = tempfile.mkdtemp(prefix="planq-metrics-")
        os.makedirs(directory, exist_ok=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        from prometheus_client import CollectorRegistry, start_http_server, values
        from prometheus_client.multiprocess import MultiProcessCollector

        # `celery` (via Flower's CLI plugin) may have imported prometheus_client before this
        # ran, fixing its value store to single-process: pick the store again now. Our
        # metrics are created lazily, so every one of them uses the multiprocess store.
        values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]

        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
        if gate is not None:
            registry.register(GateCollector(gate))
        start_http_server(port, addr=addr, registry=registry)
        logger.info("planq metrics on %s:%d (multiprocess dir %s)", addr, port, directory)
        return directory


def process_exited(pid: int) -> None:
    """Drop a dead child's live gauges (counters and histograms keep their totals)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
