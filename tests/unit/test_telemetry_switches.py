"""Which exporters the standard OTEL_* variables ask for (worker_config/telemetry.py)."""

from __future__ import annotations

import pytest

from planq.worker_config.telemetry import exporters_asked


@pytest.mark.parametrize(
    ("env", "asked"),
    [
        ({}, []),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ["otlp", "console"]),
        ({"OTEL_TRACES_EXPORTER": "none"}, []),
        ({"OTEL_TRACES_EXPORTER": "OTLP"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, []),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, []),
    ],
)
def test_the_exporters_otel_variables_ask_for(env: dict[str, str], asked: list[str]) -> None:
    assert exporters_asked(env) == asked
