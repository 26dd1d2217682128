"""Helpers the recoverable-run tests share: the newest ledger_consistency run, its findings."""

from __future__ import annotations

from typing import Any

from domain.runs import RunSummary
from tasks.runtime import Runtime
from tests.support import wait_for

JOB = "ledger_consistency"


def newest(rt: Runtime) -> RunSummary | None:
    """The newest run of the ledger_consistency job (the active one, if any)."""
    runs = rt.runs.list_runs(JOB, limit=1)
    return runs[0] if runs else None


def wait_run(rt: Runtime, what: str, ok: Any, timeout: float = 30.0) -> RunSummary:
    """Poll until the newest run satisfies ok(run)."""

    def check() -> RunSummary | None:
        run = newest(rt)
        return run if run is not None and ok(run) else None

    return wait_for(check, timeout=timeout, interval=0.02, what=what)


def findings(rt: Runtime, run_id: str) -> list[tuple[str, str, str]]:
    """A run's findings as (kind, severity, resource id)."""
    return [
        (f.kind, f.severity.value, f.resource_id or "")
        for f in rt.runs.list_findings(run_id, limit=1000)
    ]
