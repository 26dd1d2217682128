"""`OTEL_TRACES_EXPORTER=console planq demo`: spans that share one trace id per plan."""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

from planq.tasks.tracing import PLAN_ID, SPAN_GATE, planq_trace_id
from tests.acceptance.test_demo import _planq


def console_spans(text: str) -> list[dict[str, Any]]:
    """The JSON spans the SDK's console exporter printed among the demo's own lines."""
    decoder, spans, at = json.JSONDecoder(), [], 0
    while (start := text.find('{\n    "name"', at)) >= 0:
        span, at = decoder.raw_decode(text, start)
        spans.append(span)
    return spans


def test_the_demo_prints_one_trace_per_plan_naming_each_phase(tmp_path: Path) -> None:
    """The whole demo as a process (~13 s: its own plans run their phases; a real floor)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLANQ_", "OTEL_"))}
    env.update(CI="true", TMPDIR=str(tmp_path), OTEL_TRACES_EXPORTER="console")
    proc = subprocess.run(
        [_planq(), "demo"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    spans = console_spans(proc.stdout)
    traces: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for span in spans:
        traces[span["context"]["trace_id"]].append(span)

    jobs = [s for s in spans if s["name"].startswith("planq.job ")]
    # every job's span is in its plan's trace: the trace id is the plan's id
    for span in jobs:
        assert span["context"]["trace_id"] == "0x" + planq_trace_id(span["attributes"][PLAN_ID])
    plans = {s["attributes"][PLAN_ID] for s in jobs}
    assert len(plans) == 3, plans  # the lifecycle, the cancelled plan, the gated pipeline
    full = {"planq.job strategize", "planq.job execute", "planq.job apply"}
    whole = [t for t in traces.values() if full <= {s["name"] for s in t}]
    assert len(whole) == 2, {t: sorted(s["name"] for s in v) for t, v in traces.items()}
    assert any(SPAN_GATE in {s["name"] for s in t} for t in whole)
