"""Helpers the recoverable-run tests share: ledger_consistency runs, the spec's mock helpers.

The spec's MemProvider helpers (seed_running, last_status, last_cursor) work on any backend.
"""

from __future__ import annotations

from typing import Any

from planq.domain.runs import Fresh, RunStatus, RunStoreProvider, RunSummary
from planq.tasks.runtime import Runtime
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


# -- the spec's MemProvider test helpers, on any RunStoreProvider ------------------------------
def seed_running(provider: RunStoreProvider, job_name: str) -> str:
    """A Running run, as an in-flight prior dispatch left it; its id (spec: seed_running).

    The spec's mock pushes a row past open_or_start; here the row is what open_or_start
    writes for a dispatch that is still running (no other public way exists on every backend).
    """
    opened = provider.open_or_start(job_name, owner="prior-dispatch@elsewhere")
    assert isinstance(opened, Fresh), opened
    return opened.store.run_id


def last_status(provider: RunStoreProvider) -> RunStatus | None:
    """The newest run's status (spec: last_status)."""
    runs = provider.list_runs(limit=1)
    return runs[0].status if runs else None


def last_cursor(provider: RunStoreProvider) -> bytes | None:
    """The newest run's cursor (spec: last_cursor)."""
    runs = provider.list_runs(limit=1)
    if not runs or runs[0].cursor_hex is None:
        return None
    return bytes.fromhex(runs[0].cursor_hex)
