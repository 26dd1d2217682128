"""The run engine's edges, on the in-memory provider: optional hooks, failures around a scan."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from planq.domain.redaction import REDACTED
from planq.domain.runs import (
    Completed,
    Failed,
    Paused,
    ProgressKind,
    RunOutcome,
    RunStatus,
    RunStore,
    run_or_resume,
)
from planq.store.runs_memory import InMemoryRunStore, InMemoryRunStoreProvider

ENGINE_LOG = "planq.domain.runs.engine"


class Minimal:
    """A handler with only the required members: no count_total, no progress_kind."""

    name = "minimal"

    def __init__(self, outcome: RunOutcome | None = None) -> None:
        self.outcome = outcome or Completed()

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        store.checkpoint(b"c", 3)
        return self.outcome


class Hooked(Minimal):
    """A handler whose optional hooks misbehave in configurable ways."""

    name = "hooked"

    def __init__(self, total: object = 10, kind: object = ProgressKind.count) -> None:
        super().__init__()
        self.total = total
        self.kind = kind

    def count_total(self) -> object:
        return self.total

    def progress_kind(self) -> object:
        if isinstance(self.kind, Exception):
            raise self.kind
        return self.kind


def test_handler_without_optional_hooks_runs_with_unknown_progress() -> None:
    provider = InMemoryRunStoreProvider()
    outcome = run_or_resume(Minimal(), provider)
    assert outcome.completed and outcome.scanned_count == 3
    summary = provider.get_run_by_id(outcome.run_id or "")
    assert summary is not None and summary.progress is None


def test_progress_kind_accepts_a_string_value() -> None:
    provider = InMemoryRunStoreProvider()
    outcome = run_or_resume(Hooked(total=2, kind="approximate"), provider)
    summary = provider.get_run_by_id(outcome.run_id or "")
    assert summary is not None and summary.progress is not None
    assert summary.progress.kind is ProgressKind.approximate and summary.progress.fraction == 1.5


@pytest.mark.parametrize(
    ("total", "kind", "logged"),
    [
        (-1, ProgressKind.count, "count_total() failed"),
        ("ten", ProgressKind.count, "count_total() failed"),
        (10, "sideways", "progress_kind() failed"),
        (10, RuntimeError("boom"), "progress_kind() failed"),
    ],
)
def test_misbehaving_hooks_are_logged_not_fatal(
    caplog: pytest.LogCaptureFixture, total: object, kind: object, logged: str
) -> None:
    provider = InMemoryRunStoreProvider()
    with caplog.at_level(logging.WARNING, logger=ENGINE_LOG):
        outcome = run_or_resume(Hooked(total=total, kind=kind), provider)
    assert outcome.completed and logged in caplog.text
    summary = provider.get_run_by_id(outcome.run_id or "")
    assert summary is not None
    if summary.progress is not None:
        assert summary.progress.kind is ProgressKind.count


def test_a_failed_seed_write_is_logged_not_fatal(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: InMemoryRunStore, total: int | None, kind: ProgressKind) -> None:
        raise ConnectionError("ledger away")

    monkeypatch.setattr(InMemoryRunStore, "seed_progress_params", broken)
    with caplog.at_level(logging.WARNING, logger=ENGINE_LOG):
        outcome = run_or_resume(Hooked(), InMemoryRunStoreProvider())
    assert outcome.completed and "could not seed progress" in caplog.text


def test_failed_message_from_the_handler_is_redacted() -> None:
    provider = InMemoryRunStoreProvider()
    outcome = run_or_resume(Minimal(Failed("dsn postgresql://u:pw123@db/x refused")), provider)
    summary = provider.get_run_by_id(outcome.run_id or "")
    assert summary is not None and summary.error_message is not None
    assert "pw123" not in summary.error_message and REDACTED in summary.error_message
    assert "pw123" not in outcome.message


def test_a_failed_final_write_is_only_logged_and_the_sweep_recovers_the_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    provider = InMemoryRunStoreProvider()

    def broken(self: InMemoryRunStore) -> bool:
        raise ConnectionError("ledger away")

    monkeypatch.setattr(InMemoryRunStore, "mark_completed", broken)
    with caplog.at_level(logging.WARNING, logger=ENGINE_LOG):
        outcome = run_or_resume(Minimal(), provider, owner="w1")  # no exception
    assert outcome.ok and outcome.completed and outcome.status is None  # spec: Ok, logged
    assert "mark_completed failed: ConnectionError: ledger away" in outcome.message
    assert "mark_completed failed" in caplog.text
    [run] = provider.list_runs("minimal")
    assert run.status is RunStatus.Running
    assert provider.boot_recovery_sweep("w1", stale_after=3600).run_ids == (run.id,)
    resumed = run_or_resume(Minimal(Paused(b"again")), provider, owner="w1")
    assert resumed.paused and resumed.run_id == run.id


def test_a_base_exception_is_not_swallowed() -> None:
    class Interrupted(Minimal):
        def run_resumable(
            self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
        ) -> RunOutcome:
            raise KeyboardInterrupt

    provider = InMemoryRunStoreProvider()
    with pytest.raises(KeyboardInterrupt):
        run_or_resume(Interrupted(), provider)
    [run] = provider.list_runs()
    assert run.status is RunStatus.Running  # left for the boot sweep, never marked Failed


def test_args_default_to_an_empty_mapping() -> None:
    seen: list[Mapping[str, Any]] = []

    class Recording(Minimal):
        def run_resumable(
            self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
        ) -> RunOutcome:
            seen.append(args)
            return Completed()

    assert run_or_resume(Recording(), InMemoryRunStoreProvider()).completed
    assert seen == [{}]
