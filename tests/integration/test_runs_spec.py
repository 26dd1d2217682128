"""The tests of recoverable_runs.rs.txt (`mod tests`), step by step, on every run store.

Each test below carries the spec test's name and follows its text line by line, on the
in-memory provider, SQLite and PostgreSQL. The spec's MemProvider helpers (seed_running,
last_status, last_cursor) are in tests/runs_support.py. Where planq must differ, the
comment says so (and docs/architecture.md lists it):

- the spec's mock ignores job names; planq keys a run by its handler's name, as the spec's
  SQL provider does, so the handler that resumes a paused run carries the pauser's name,
  and the two runs the sweep test seeds have two names (one non-terminal run per name).
- `JobRunArgs::default()` is an empty mapping; `JobOutcome::Ok { extra, .. }` is
  `outcome.ok` and `outcome.extra`, `JobOutcome::Err { message }` `outcome.message`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from ulid import ULID

from planq.domain.runs import (
    Completed,
    Failed,
    Paused,
    RunOutcome,
    RunStatus,
    RunStore,
    RunStoreProvider,
    run_or_resume,
)
from planq.store.database import Database
from planq.store.runs_memory import InMemoryRunStoreProvider
from planq.store.runs_sql import SqlRunStoreProvider
from tests.runs_support import last_cursor, last_status, seed_running


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def provider(request: pytest.FixtureRequest) -> RunStoreProvider:
    """Spec: `Arc::new(MemProvider::new())`, here each of planq's three providers."""
    if request.param == "memory":
        return InMemoryRunStoreProvider()
    fixture = "sqlite_database" if request.param == "sqlite" else "pg_database"
    db: Database = request.getfixturevalue(fixture)
    return SqlRunStoreProvider(db)


# -- Handlers (the spec's four) ----------------------------------------------------------------


class CompletingHandler:
    name = "completer"

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        store.checkpoint(bytes([1, 2, 3]), 5)  # .await.unwrap(): an error fails the test
        return Completed()


class PausingHandler:
    name = "pauser"

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        return Paused(b"halfway")


class FailingHandler:
    name = "failer"

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        return Failed("boom")


class ResumeInspectHandler:
    """Spec name "resumer"; here "pauser", the job whose paused run it must resume."""

    name = "pauser"

    def __init__(self, saw_cursor: list[bytes | None]) -> None:
        self.saw_cursor = saw_cursor

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        self.saw_cursor[:] = [resume_cursor]  # *self.saw_cursor.lock().unwrap() = resume_cursor
        return Completed()


# -- Tests ----------------------------------------------------------------------------------------


@pytest.mark.spec("recoverable_runs: fresh_run_completes_and_marks_status_completed")
def test_fresh_run_completes_and_marks_status_completed(provider: RunStoreProvider) -> None:
    outcome = run_or_resume(CompletingHandler(), provider, {})

    assert outcome.ok, f"expected Ok, got {outcome!r}"
    extra = outcome.extra
    assert extra["completed"] is True
    assert isinstance(extra["run_id"], str)
    assert last_status(provider) is RunStatus.Completed


@pytest.mark.spec("recoverable_runs: fresh_run_completes_and_marks_status_completed")
def test_runs_are_looked_up_by_the_spec_uuid_ids(provider: RunStoreProvider) -> None:
    outcome = run_or_resume(CompletingHandler(), provider, {})
    assert outcome.ok and outcome.extra["completed"] is True
    # The spec's ids are Uuids (`get_run_by_id(run_id: Uuid)`, as fetch_outcome_stats calls
    # it): planq's ULID is the same 128 bits, so the run's Uuid finds it.
    run_id = uuid.UUID(bytes=ULID.from_str(outcome.extra["run_id"]).bytes)
    for spelled in (run_id, str(run_id)):
        summary = provider.get_run_by_id(spelled)
        assert summary is not None
        assert summary.id == outcome.extra["run_id"] and summary.status is RunStatus.Completed
        assert summary.stats["scanned_count"] == 5
        assert provider.list_findings(spelled, 10, 0) == []
        assert sum(provider.finding_severity_counts(spelled).values()) == 0
    # "Returns `None` when the id doesn't exist (unknown or pruned)."
    unknown = uuid.uuid4()
    assert provider.get_run_by_id(unknown) is None
    assert provider.get_run_by_id(str(unknown)) is None
    assert provider.list_findings(unknown, 10, 0) == []


@pytest.mark.spec("recoverable_runs: paused_run_persists_cursor_and_marks_status_paused")
def test_paused_run_persists_cursor_and_marks_status_paused(provider: RunStoreProvider) -> None:
    outcome = run_or_resume(PausingHandler(), provider, {})

    assert outcome.ok
    extra = outcome.extra
    assert extra["paused"] is True
    assert extra["cursor_hex"] == b"halfway".hex()
    assert last_status(provider) is RunStatus.Paused
    assert last_cursor(provider) == b"halfway"


@pytest.mark.spec("recoverable_runs: failed_run_marks_status_failed_and_returns_err")
def test_failed_run_marks_status_failed_and_returns_err(provider: RunStoreProvider) -> None:
    outcome = run_or_resume(FailingHandler(), provider, {})

    assert not outcome.ok, f"expected Err, got {outcome!r}"
    message = outcome.message
    assert message.startswith("boom (run_id=")
    assert last_status(provider) is RunStatus.Failed


@pytest.mark.spec("recoverable_runs: resume_hands_cursor_back_to_handler")
def test_resume_hands_cursor_back_to_handler(provider: RunStoreProvider) -> None:
    # Run 1 pauses with cursor.
    run_or_resume(PausingHandler(), provider, {})
    assert last_status(provider) is RunStatus.Paused

    # Run 2 must see resume_cursor = the paused cursor.
    seen: list[bytes | None] = [None]
    run_or_resume(ResumeInspectHandler(seen), provider, {})
    assert seen == [b"halfway"]


@pytest.mark.spec("recoverable_runs: concurrent_trigger_hits_already_active")
def test_concurrent_trigger_hits_already_active(provider: RunStoreProvider) -> None:
    # Seed a Running row (simulates an in-flight prior dispatch).
    seeded_run_id = seed_running(provider, CompletingHandler.name)

    outcome = run_or_resume(CompletingHandler(), provider, {})

    # Must be Ok with skipped=already_running, NOT a fresh dispatch.
    assert outcome.ok
    extra = outcome.extra
    assert extra["skipped"] == "already_running"
    assert extra["run_id"] == str(seeded_run_id)
    assert extra["status"] == "Running"
    # Seeded run's status untouched (no parallel dispatch happened).
    assert last_status(provider) is RunStatus.Running


@pytest.mark.spec("recoverable_runs: boot_recovery_sweep_flips_running_to_paused")
def test_boot_recovery_sweep_flips_running_to_paused(provider: RunStoreProvider) -> None:
    seed_running(provider, "first")  # the spec seeds one job name twice: planq forbids it
    seed_running(provider, "second")

    flipped = provider.boot_recovery_sweep()
    assert flipped == 2
    assert last_status(provider) is RunStatus.Paused
    # The spec's sweep doc: "… flipped to Paused with error_message = 'server restart mid-run'".
    assert {r.error_message for r in provider.list_runs()} == {"server restart mid-run"}


@pytest.mark.spec("recoverable_runs: runstatus_parse_is_symmetric")
def test_runstatus_parse_is_symmetric() -> None:
    for s in [
        RunStatus.Running,
        RunStatus.Paused,
        RunStatus.CancelRequested,
        RunStatus.Completed,
        RunStatus.Failed,
    ]:
        assert RunStatus.parse(s.as_str()) is s
    assert RunStatus.parse("garbage") is None
