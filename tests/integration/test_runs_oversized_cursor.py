"""A handler that pauses with a cursor over the bound keeps its last checkpoint instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from planq.domain.bounds import MAX_CURSOR_BYTES
from planq.domain.runs import (
    Paused,
    RunOutcome,
    RunStatus,
    RunStore,
    RunStoreProvider,
    run_or_resume,
)
from planq.store import Database
from planq.store.runs_memory import InMemoryRunStoreProvider
from planq.store.runs_sql import SqlRunStoreProvider


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def provider(request: pytest.FixtureRequest) -> RunStoreProvider:
    if request.param == "memory":
        return InMemoryRunStoreProvider()
    fixture = "sqlite_database" if request.param == "sqlite" else "pg_database"
    db: Database = request.getfixturevalue(fixture)
    return SqlRunStoreProvider(db)


class PausesTooBig:
    """Checkpoints a good cursor, then pauses with one a byte over the bound."""

    name = "too_big"

    def __init__(self) -> None:
        self.resumed_from: list[bytes | None] = []

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        self.resumed_from.append(resume_cursor)
        store.checkpoint(b"good-7", 7)
        return Paused(b"x" * (MAX_CURSOR_BYTES + 1))


def test_an_oversized_paused_cursor_pauses_at_the_last_checkpoint(
    provider: RunStoreProvider,
) -> None:
    handler = PausesTooBig()

    outcome = run_or_resume(handler, provider)

    assert outcome.status is RunStatus.Paused and outcome.run_id is not None, outcome
    run = provider.get_run_by_id(outcome.run_id)
    assert run is not None and run.status is RunStatus.Paused
    assert run.cursor_hex == b"good-7".hex()  # the refused cursor was never written
    assert run.error_message is not None and "cursor" in run.error_message
    run_or_resume(handler, provider)  # the next trigger resumes where the store kept it
    assert handler.resumed_from == [None, b"good-7"]
