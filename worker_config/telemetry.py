"""The OpenTelemetry SDK, installed from the standard OTEL_* variables when they ask for it.

planq's code uses only the API (a no-op without an SDK). This installs the SDK's tracer
provider once per process, at the composition root, when `planq[otel]` is installed and
`OTEL_TRACES_EXPORTER` names an exporter (`console`, `otlp`, both comma-separated) or an
OTLP endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`, `..._TRACES_ENDPOINT`: otlp then).
Everything else is the SDK's own reading of OTEL_* (service name and resource, the batch
processor's OTEL_BSP_*, the exporter's endpoint, headers and timeout).

Prefork: the provider is built in the `celery worker` parent, before it forks; SDK 1.45's
BatchSpanProcessor and TracerProvider re-create their threads and locks in each child
(`os.register_at_fork`), and planq's worker_process_shutdown handler flushes a child's
spans before billiard ends it with os._exit (atexit never runs there).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry import trace

logger = logging.getLogger("planq.telemetry")

#: OTEL_SERVICE_NAME when none is set.
DEFAULT_SERVICE_NAME = "planq"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def exporters_asked(env: dict[str, str] | None = None) -> list[str]:
    """The exporters OTEL_* asks for: OTEL_TRACES_EXPORTER, else otlp if an endpoint is set."""
    env = dict(os.environ) if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")]
    named = [n for n in named if n]
    if not named:
        return ["otlp"] if any(env.get(key) for key in _ENDPOINTS) else []
    return [n for n in named if n != "none"]


def configure_tracing() -> bool:
    """Install the SDK's tracer provider if OTEL_* asks and nobody installed one; whether done.

    Idempotent; never raises: a missing SDK or an unknown exporter is one warning.
    """
    names = exporters_asked()
    if not names or not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return False
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        logger.warning(
            "OTEL_TRACES_EXPORTER asks for %s but the SDK is not installed "
            "(pip install 'planq[otel]'): no traces",
            ",".join(names),
        )
        return False
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: DEFAULT_SERVICE_NAME}
    provider = TracerProvider(resource=Resource.create(attributes))
    added = 0
    for name in names:
        exporter = _exporter(name)
        if exporter is not None:
            provider.add_span_processor(BatchSpanProcessor(exporter))
            added += 1
    if not added:
        return False
    trace.set_tracer_provider(provider)
    return True


def _exporter(name: str) -> Any:
    """The span exporter called `name` (console, otlp over HTTP/protobuf), or None."""
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        if protocol != "http/protobuf":
            logger.warning("OTEL_EXPORTER_OTLP_PROTOCOL=%s: planq exports http/protobuf", protocol)
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            logger.warning("the OTLP exporter is not installed (pip install 'planq[otel]')")
            return None
        return OTLPSpanExporter()
    logger.warning("OTEL_TRACES_EXPORTER=%s: not an exporter planq knows (console, otlp)", name)
    return None
