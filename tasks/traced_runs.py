"""Recoverable runs in traces: the run store a handler writes to, its checkpoints as events.

The run engine (domain/runs/engine.py) is plain Python; the trigger task opens the run's
span around it (tasks/recoverable.py), and the provider it is given here hands the handler
a store whose `checkpoint` also adds an event to that span. Everything else is delegated.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from planq.domain.runs.ports import Fresh, OpenResult, Resumed, RunStore, RunStoreProvider
from planq.tasks import tracing


class _TracedRunStore:
    """A run's store whose checkpoints are events on the current (the run's) span."""

    def __init__(self, store: RunStore) -> None:
        self._store = store

    def checkpoint(self, cursor: bytes, delta_count: int) -> None:
        """Checkpoint as the store does, then say so on the span (the cursor's size only)."""
        self._store.checkpoint(cursor, delta_count)
        tracing.current_event(
            tracing.EVENT_CHECKPOINT,
            {tracing.SCANNED: delta_count, "planq.run.cursor_bytes": len(cursor)},
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class _TracedRunProvider:
    """A run store provider whose opened runs are `_TracedRunStore`s."""

    def __init__(self, provider: RunStoreProvider) -> None:
        self._provider = provider

    def open_or_start(self, job_name: str, owner: str | None = None) -> OpenResult:
        """Open as the provider does; a run this process now holds gets the traced store."""
        opened = self._provider.open_or_start(job_name, owner=owner)
        if isinstance(opened, Fresh | Resumed):
            store = cast(RunStore, _TracedRunStore(opened.store))
            return dataclasses.replace(opened, store=store)
        return opened

    def __getattr__(self, name: str) -> Any:
        return getattr(self._provider, name)


def traced_runs(provider: RunStoreProvider) -> RunStoreProvider:
    """provider, with checkpoint events on the run's span (no-op without an SDK)."""
    return cast(RunStoreProvider, _TracedRunProvider(provider))
