"""One contract, three run stores: memory, SQLite and PostgreSQL behave the same."""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from planq.domain.clock import utcnow
from planq.domain.errors import RunNotActiveError, RunNotFoundError
from planq.domain.ids import new_id
from planq.domain.redaction import REDACTED
from planq.domain.runs import (
    AlreadyActive,
    Completed,
    Failed,
    Fresh,
    Paused,
    ProgressKind,
    RecoverableJobHandler,
    Resumed,
    RunOutcome,
    RunStatus,
    RunStore,
    RunStoreProvider,
    Severity,
    record_or_log,
    run_or_resume,
)
from planq.store.database import Database
from planq.store.runs_memory import InMemoryRunStoreProvider
from planq.store.runs_sql import SqlRunStoreProvider

Body = Callable[[RunStore, Mapping[str, Any], bytes | None], RunOutcome]
OWNER = "worker-a@host1"
OTHER = "worker-b@host2"
SECRET = "hunter2-secret"


class FakeClock:
    """A settable 'now', so staleness and retention need no sleeping."""

    def __init__(self) -> None:
        self._now = utcnow()
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, **delta: float) -> None:
        with self._lock:
            self._now += timedelta(**delta)


@dataclass
class ScriptedHandler:
    """A handler whose scan is a function; records what the engine handed it."""

    name: str
    body: Body
    total: int | None = None
    kind: ProgressKind = ProgressKind.count
    total_calls: int = 0
    cursors_seen: list[bytes | None] = field(default_factory=list)

    def count_total(self) -> int | None:
        self.total_calls += 1
        return self.total

    def progress_kind(self) -> ProgressKind:
        return self.kind

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        self.cursors_seen.append(resume_cursor)
        return self.body(store, args, resume_cursor)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def provider(request: pytest.FixtureRequest, clock: FakeClock) -> RunStoreProvider:
    """The run store provider of each backend, on the test's clock."""
    if request.param == "memory":
        return InMemoryRunStoreProvider(clock)
    fixture = "sqlite_database" if request.param == "sqlite" else "pg_database"
    db: Database = request.getfixturevalue(fixture)
    return SqlRunStoreProvider(db, clock)


def completes(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
    return Completed()


def open_fresh(provider: RunStoreProvider, name: str, owner: str | None = OWNER) -> RunStore:
    opened = provider.open_or_start(name, owner=owner)
    assert isinstance(opened, Fresh)
    return opened.store


# -- the engine's paths ----------------------------------------------------------------------


def test_fresh_run_completes_with_counts(provider: RunStoreProvider) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        assert cursor is None and args == {"depth": 2}
        assert store.status() is RunStatus.Running
        store.checkpoint(b"row-5", 5)
        record_or_log(store, "orphan", Severity.data_loss, "res-1", {"why": "gone"})
        store.checkpoint(b"row-10", 5)
        record_or_log(store, "drift", "anomaly", None, None)
        return Completed()

    handler = ScriptedHandler("scan", scan, total=10)
    outcome = run_or_resume(handler, provider, {"depth": 2}, owner=OWNER)

    assert outcome.ok and outcome.completed and not outcome.paused and outcome.skipped is None
    assert outcome.status is RunStatus.Completed
    assert (outcome.scanned_count, outcome.finding_count) == (10, 2)
    assert outcome.severity_counts == {"data_loss": 1, "anomaly": 1}  # only those present
    assert outcome.cursor_hex == b"row-10".hex()
    assert outcome.run_id is not None and outcome.message.endswith(f"(run_id={outcome.run_id})")
    assert outcome.count == 2 and outcome.extra == {
        "completed": True,
        "run_id": outcome.run_id,
        "finding_count": 2,
        "scanned_count": 10,
        "severity_counts": {"data_loss": 1, "anomaly": 1},
    }
    summary = provider.get_run_by_id(outcome.run_id)
    assert summary is not None
    assert summary.status is RunStatus.Completed and summary.completed_at is not None
    assert summary.owner == OWNER and summary.job_name == "scan"
    assert summary.stats == {"scanned_count": 10, "finding_count": 2, "progress_total": 10}
    assert summary.progress is not None and summary.progress.fraction == 1.0
    assert summary.started_at.tzinfo is not None
    assert handler.total_calls == 1


def test_paused_run_keeps_its_cursor(provider: RunStoreProvider) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        store.checkpoint(b"\x00\x01", 3)
        return Paused(b"\x00\x02")

    outcome = run_or_resume(ScriptedHandler("scan", scan), provider, {})

    assert outcome.ok and outcome.paused and not outcome.completed
    assert outcome.status is RunStatus.Paused and outcome.cursor_hex == "0002"
    assert outcome.run_id is not None
    assert outcome.extra == {
        "paused": True,
        "run_id": outcome.run_id,
        "cursor_hex": "0002",
        "finding_count": 0,
        "scanned_count": 3,
        "severity_counts": {},
    }
    summary = provider.get_run_by_id(outcome.run_id)
    assert summary is not None and summary.cursor_hex == "0002" and summary.completed_at is None
    assert summary.scanned_count == 3


def test_failed_run_message_is_the_specs(provider: RunStoreProvider) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        return Failed("source table missing")

    outcome = run_or_resume(ScriptedHandler("scan", scan), provider, {})

    assert not outcome.ok and not outcome.completed and not outcome.paused
    assert outcome.status is RunStatus.Failed and outcome.run_id is not None
    assert outcome.message == f"source table missing (run_id={outcome.run_id})"
    assert outcome.error == "source table missing" and outcome.extra == {}
    summary = provider.get_run_by_id(outcome.run_id)
    assert summary is not None and summary.error_message == "source table missing"
    assert summary.completed_at is not None


def test_handler_exception_pauses_the_run_redacted_and_keeps_the_cursor(
    provider: RunStoreProvider,
) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        if cursor is None:
            store.checkpoint(b"row-4", 4)
            raise RuntimeError(f"cannot connect: password={SECRET}")  # the spec's panic
        assert cursor == b"row-4"
        store.checkpoint(b"row-9", 5)
        return Completed()

    handler = ScriptedHandler("scan", scan)
    outcome = run_or_resume(handler, provider, {})

    error = f"RuntimeError: cannot connect: password={REDACTED}"
    assert not outcome.ok and outcome.paused and not outcome.completed
    assert outcome.status is RunStatus.Paused and outcome.run_id
    assert outcome.cursor_hex == b"row-4".hex() and outcome.error == error
    assert outcome.message.startswith(f"{error} (run_id={outcome.run_id})")
    assert SECRET not in outcome.message and outcome.extra["error"] == error
    summary = provider.get_run_by_id(outcome.run_id)
    assert summary is not None and summary.status is RunStatus.Paused
    assert summary.error_message == error and summary.cursor_hex == b"row-4".hex()
    assert summary.completed_at is None and summary.scanned_count == 4

    again = run_or_resume(handler, provider, {})  # the next trigger resumes at the checkpoint

    assert again.ok and again.completed and again.run_id == outcome.run_id
    assert handler.cursors_seen == [None, b"row-4"]
    done = provider.get_run_by_id(outcome.run_id)
    assert done is not None and done.scanned_count == 9 and done.error_message is None


def test_handler_exception_before_any_checkpoint_resumes_from_empty(
    provider: RunStoreProvider,
) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        if cursor is None:
            raise KeyError("first batch")
        return Completed()

    handler = ScriptedHandler("scan", scan)
    outcome = run_or_resume(handler, provider, {})

    assert outcome.status is RunStatus.Paused and outcome.cursor_hex == ""
    summary = provider.get_run_by_id(outcome.run_id or "")
    assert summary is not None and summary.cursor_hex is None
    assert summary.error_message == "KeyError: 'first batch'"
    assert run_or_resume(handler, provider, {}).completed
    assert handler.cursors_seen == [None, b""]


def test_resume_hands_back_the_cursor_and_does_not_recount(provider: RunStoreProvider) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        if cursor is None:
            store.checkpoint(b"half", 4)
            return Paused(b"half")
        assert cursor == b"half"
        store.checkpoint(b"end", 4)
        return Completed()

    handler = ScriptedHandler("scan", scan, total=8)
    first = run_or_resume(handler, provider, {}, owner=OWNER)
    before = provider.get_run_by_id(first.run_id or "")
    second = run_or_resume(handler, provider, {}, owner=OTHER)

    assert first.paused and second.completed and first.run_id == second.run_id
    assert handler.cursors_seen == [None, b"half"]
    assert handler.total_calls == 1
    after = provider.get_run_by_id(first.run_id or "")
    assert before is not None and after is not None
    assert after.started_at == before.started_at and after.owner == OTHER
    assert after.scanned_count == 8 and after.stats["progress_total"] == 8
    assert len(provider.list_runs("scan")) == 1


@pytest.mark.parametrize("status", [RunStatus.Running, RunStatus.CancelRequested])
def test_trigger_while_active_is_skipped_and_touches_nothing(
    provider: RunStoreProvider, status: RunStatus
) -> None:
    store = open_fresh(provider, "scan", owner=OTHER)
    store.checkpoint(b"mid", 7)
    if status is RunStatus.CancelRequested:
        assert provider.request_cancel("scan") == store.run_id
    before = provider.get_run_by_id(store.run_id)
    handler = ScriptedHandler("scan", completes, total=99)

    outcome = run_or_resume(handler, provider, {}, owner=OWNER)

    assert outcome.ok and outcome.skipped == "already_running"
    assert outcome.run_id == store.run_id and outcome.status is status
    assert not outcome.completed and not outcome.paused
    assert handler.cursors_seen == [] and handler.total_calls == 0
    assert provider.get_run_by_id(store.run_id) == before
    assert [r.id for r in provider.list_runs("scan")] == [store.run_id]


def test_cancel_request_reaches_the_handler_which_pauses(provider: RunStoreProvider) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        if cursor is not None:
            return Completed()
        store.checkpoint(b"c1", 3)
        assert store.status() is RunStatus.Running
        assert provider.request_cancel("scan") == store.run_id  # the operator, mid-scan
        assert provider.request_cancel("scan") is None  # nothing Running any more
        if store.status() is RunStatus.CancelRequested:
            return Paused(b"c1")
        return Completed()

    handler = ScriptedHandler("scan", scan)
    outcome = run_or_resume(handler, provider, {})

    assert outcome.paused and outcome.status is RunStatus.Paused and outcome.cursor_hex == "6331"
    again = run_or_resume(handler, provider, {})
    assert again.completed and again.run_id == outcome.run_id
    assert handler.cursors_seen == [None, b"c1"]


def test_request_cancel_without_a_running_run(provider: RunStoreProvider) -> None:
    assert provider.request_cancel("scan") is None
    store = open_fresh(provider, "scan")
    assert store.mark_paused(b"x")
    assert provider.request_cancel("scan") is None
    summary = provider.get_run_by_id(store.run_id)
    assert summary is not None and summary.status is RunStatus.Paused


def test_wrong_return_value_fails_the_run(provider: RunStoreProvider) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        return "done"  # type: ignore[return-value]

    outcome = run_or_resume(ScriptedHandler("scan", scan), provider, {})

    assert not outcome.ok and outcome.status is RunStatus.Paused  # a handler bug, like a raise
    assert outcome.error == "TypeError: handler returned str, not a RunOutcome"
    summary = provider.get_run_by_id(outcome.run_id or "")
    assert summary is not None and summary.error_message == outcome.error


def test_run_swept_mid_scan_is_not_overwritten(provider: RunStoreProvider) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        store.checkpoint(b"a", 1)
        swept = provider.boot_recovery_sweep(OWNER, stale_after=3600)
        assert swept == 1 and swept.run_ids == (store.run_id,)
        with pytest.raises(RunNotActiveError):
            store.checkpoint(b"b", 1)
        return Completed()

    outcome = run_or_resume(ScriptedHandler("scan", scan), provider, {}, owner=OWNER)

    # The sweep revoked the lease: the engine writes nothing and says the run was lost.
    assert not outcome.ok and outcome.lost and outcome.status is None and outcome.run_id
    assert outcome.message.startswith("lost the run: ")
    assert outcome.message.endswith(f"(run_id={outcome.run_id})")
    assert "lease epoch 1, now 2, status 'Paused'" in outcome.message
    summary = provider.get_run_by_id(outcome.run_id)
    assert summary is not None and summary.status is RunStatus.Paused
    assert summary.cursor_hex == b"a".hex() and summary.scanned_count == 1
    assert summary.error_message == "worker restart mid-run"


def test_a_run_ended_elsewhere_is_not_overwritten(provider: RunStoreProvider) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        store.checkpoint(b"a", 1)
        assert store.mark_failed("ended by the same lease")  # e.g. an operator tool
        with pytest.raises(RunNotActiveError):
            store.checkpoint(b"b", 1)
        return Completed()

    outcome = run_or_resume(ScriptedHandler("scan", scan), provider, {}, owner=OWNER)

    assert not outcome.ok and not outcome.lost and outcome.status is RunStatus.Failed
    assert "already Failed when the engine tried to record Completed" in outcome.message


# -- boot recovery sweep ---------------------------------------------------------------------


def test_sweep_pauses_own_runs_including_cancel_requested(provider: RunStoreProvider) -> None:
    running = open_fresh(provider, "a")
    running.checkpoint(b"ck", 2)
    cancelling = open_fresh(provider, "b")
    assert provider.request_cancel("b") == cancelling.run_id

    flipped = provider.boot_recovery_sweep(OWNER, stale_after=3600)

    assert flipped == 2
    assert flipped.run_ids == tuple(sorted([running.run_id, cancelling.run_id]))
    for run_id in flipped.run_ids:
        summary = provider.get_run_by_id(run_id)
        assert summary is not None and summary.status is RunStatus.Paused
        assert summary.error_message == "worker restart mid-run"
    resumed = provider.open_or_start("a", owner=OWNER)
    assert isinstance(resumed, Resumed) and resumed.cursor == b"ck"
    summary = provider.get_run_by_id(running.run_id)
    assert summary is not None and summary.error_message is None
    assert summary.status is RunStatus.Running


def test_sweep_spares_a_live_workers_run_but_not_a_stale_one(
    provider: RunStoreProvider, clock: FakeClock
) -> None:
    # Seconds, not minutes: on PostgreSQL a stale sweep also waits until the server has
    # been up for stale_after (domain/availability.py), and another test may restart it.
    stale_after = 6.0
    theirs = open_fresh(provider, "theirs", owner=OTHER)

    assert provider.boot_recovery_sweep(OWNER, stale_after=stale_after) == 0
    summary = provider.get_run_by_id(theirs.run_id)
    assert summary is not None and summary.status is RunStatus.Running

    clock.advance(seconds=3)
    theirs.checkpoint(b"alive", 1)  # the heartbeat moves the staleness window
    clock.advance(seconds=4)
    assert provider.boot_recovery_sweep(OWNER, stale_after=stale_after).run_ids == ()

    clock.advance(seconds=2.01)
    assert provider.boot_recovery_sweep(OWNER, stale_after=stale_after).run_ids == (theirs.run_id,)
    summary = provider.get_run_by_id(theirs.run_id)
    assert summary is not None and summary.status is RunStatus.Paused


def test_sweep_leaves_paused_and_terminal_runs(
    provider: RunStoreProvider, clock: FakeClock
) -> None:
    paused = open_fresh(provider, "p")
    assert paused.mark_paused(b"p")
    done = open_fresh(provider, "d")
    assert done.mark_completed()
    failed = open_fresh(provider, "f")
    assert failed.mark_failed("boom")
    clock.advance(days=3)

    assert provider.boot_recovery_sweep(OWNER, stale_after=0) == 0
    assert provider.boot_recovery_sweep() == 0
    statuses = {r.job_name: (r.status, r.error_message) for r in provider.list_runs()}
    assert statuses == {
        "p": (RunStatus.Paused, None),
        "d": (RunStatus.Completed, None),
        "f": (RunStatus.Failed, "boom"),
    }


def test_sweep_without_arguments_pauses_every_active_run(
    provider: RunStoreProvider, clock: FakeClock
) -> None:
    ours = open_fresh(provider, "ours", owner=OWNER)
    ours.checkpoint(b"ck", 2)
    theirs = open_fresh(provider, "theirs", owner=OTHER)  # another node's, and fresh
    nobody = open_fresh(provider, "nobody", owner=None)
    cancelling = open_fresh(provider, "cancelling", owner=OTHER)
    assert provider.request_cancel("cancelling") == cancelling.run_id
    paused = open_fresh(provider, "paused")
    assert paused.mark_paused(b"p")
    done = open_fresh(provider, "done")
    assert done.mark_completed()

    flipped = provider.boot_recovery_sweep()

    active = [ours, theirs, nobody, cancelling]
    assert flipped == 4 and flipped.run_ids == tuple(sorted(s.run_id for s in active))
    for store in active:
        summary = provider.get_run_by_id(store.run_id)
        assert summary is not None and summary.status is RunStatus.Paused
        assert summary.error_message == "server restart mid-run"
    kept = provider.get_run_by_id(ours.run_id)
    assert kept is not None and kept.cursor_hex == b"ck".hex() and kept.scanned_count == 2
    untouched = {r.job_name: (r.status, r.error_message) for r in provider.list_runs()}
    assert untouched["paused"] == (RunStatus.Paused, None)
    assert untouched["done"] == (RunStatus.Completed, None)
    assert provider.boot_recovery_sweep() == 0  # idempotent


def test_sweep_by_owner_alone_or_by_staleness_alone(
    provider: RunStoreProvider, clock: FakeClock
) -> None:
    ours = open_fresh(provider, "ours", owner=OWNER)
    theirs = open_fresh(provider, "theirs", owner=OTHER)
    clock.advance(seconds=120)
    fresh = open_fresh(provider, "fresh", owner=OTHER)

    assert provider.boot_recovery_sweep(OWNER).run_ids == (ours.run_id,)
    # 6 s, not 60: on PostgreSQL a stale sweep also waits until the server has been up for
    # stale_after (domain/availability.py), and the serial group (or a suite just before
    # this one) restarts it; 120 s on the fake clock is stale either way.
    assert provider.boot_recovery_sweep(stale_after=6.0).run_ids == (theirs.run_id,)

    for store in (ours, theirs):
        summary = provider.get_run_by_id(store.run_id)
        assert summary is not None and summary.error_message == "worker restart mid-run"
    live = provider.get_run_by_id(fresh.run_id)
    assert live is not None and live.status is RunStatus.Running


def test_a_run_paused_before_any_checkpoint_resumes_with_an_empty_cursor(
    provider: RunStoreProvider,
) -> None:
    store = open_fresh(provider, "scan")
    assert provider.boot_recovery_sweep() == 1

    resumed = provider.open_or_start("scan", owner=OWNER)

    assert isinstance(resumed, Resumed) and resumed.store.run_id == store.run_id
    assert resumed.cursor == b"" and resumed.cursor is not None
    handler = ScriptedHandler("scan", completes)
    assert resumed.store.mark_paused(None)  # None keeps the (absent) cursor
    assert run_or_resume(handler, provider, {}).completed
    assert handler.cursors_seen == [b""]


def test_mark_paused_without_a_cursor_keeps_the_last_checkpoint(
    provider: RunStoreProvider,
) -> None:
    store = open_fresh(provider, "scan")
    store.checkpoint(b"kept", 3)
    assert store.mark_paused(None, error_message=f"OSError: token={SECRET}")
    summary = provider.get_run_by_id(store.run_id)
    assert summary is not None and summary.status is RunStatus.Paused
    assert summary.cursor_hex == b"kept".hex()
    assert summary.error_message == f"OSError: token={REDACTED}"
    resumed = provider.open_or_start("scan")
    assert isinstance(resumed, Resumed) and resumed.cursor == b"kept"


# -- progress ---------------------------------------------------------------------------------


def test_approximate_progress_may_exceed_one(provider: RunStoreProvider) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        store.checkpoint(b"x", 15)
        return Completed()

    handler = ScriptedHandler("scan", scan, total=10, kind=ProgressKind.approximate)
    outcome = run_or_resume(handler, provider, {})

    summary = provider.get_run_by_id(outcome.run_id or "")
    assert summary is not None and summary.progress is not None
    assert summary.progress.fraction == 1.5
    assert summary.progress.kind is ProgressKind.approximate
    assert (summary.progress.scanned, summary.progress.total) == (15, 10)


@pytest.mark.parametrize("total", [None, 0])
def test_progress_unknown_without_a_total(provider: RunStoreProvider, total: int | None) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        store.checkpoint(b"x", 4)
        return Completed()

    outcome = run_or_resume(ScriptedHandler("scan", scan, total=total), provider, {})

    summary = provider.get_run_by_id(outcome.run_id or "")
    assert summary is not None and summary.progress is None and summary.scanned_count == 4


def test_count_total_failure_is_not_fatal(
    provider: RunStoreProvider, caplog: pytest.LogCaptureFixture
) -> None:
    class Exploding(ScriptedHandler):
        def count_total(self) -> int | None:
            raise OSError(f"token={SECRET} rejected")

    with caplog.at_level(logging.WARNING, logger="planq.domain.runs.engine"):
        outcome = run_or_resume(Exploding("scan", completes), provider, {})

    assert outcome.completed
    summary = provider.get_run_by_id(outcome.run_id or "")
    assert summary is not None and summary.progress is None
    assert "count_total() failed" in caplog.text and SECRET not in caplog.text


# -- the engine when the store fails (the spec's error handling) ------------------------------


class Faulty:
    """A real provider whose chosen calls fail, as if the ledger went away mid-trigger.

    Calls on the provider (`fail`) or on the run's store (`fail_store`) named there raise;
    every other call goes to the real backend. `calls` counts provider calls by name.
    """

    def __init__(
        self,
        inner: RunStoreProvider,
        fail: set[str] | None = None,
        fail_store: set[str] | None = None,
    ) -> None:
        self.inner = inner
        self.fail = fail or set()
        self.fail_store = fail_store or set()
        self.calls: Counter[str] = Counter()

    @staticmethod
    def _wrap(target: Any, name: str, fail: set[str], calls: Counter[str] | None) -> Any:
        attr = getattr(target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if calls is not None:
                calls[name] += 1
            if name in fail:
                raise ConnectionError(f"{name}: ledger away, password={SECRET}")
            return attr(*args, **kwargs)

        return call

    def __getattr__(self, name: str) -> Any:
        call = self._wrap(self.inner, name, self.fail, self.calls)
        if name != "open_or_start":
            return call

        def open_or_start(*args: Any, **kwargs: Any) -> Any:
            opened = call(*args, **kwargs)
            if isinstance(opened, Fresh | Resumed) and self.fail_store:
                opened = dataclasses.replace(
                    opened, store=FaultyStore(opened.store, self.fail_store)
                )
            return opened

        return open_or_start


class FaultyStore:
    """A real run store whose chosen calls fail."""

    def __init__(self, inner: RunStore, fail: set[str]) -> None:
        self.inner = inner
        self.fail = fail

    def __getattr__(self, name: str) -> Any:
        return Faulty._wrap(self.inner, name, self.fail, None)


def scans_with_a_finding(
    store: RunStore, args: Mapping[str, Any], cursor: bytes | None
) -> RunOutcome:
    store.checkpoint(b"c", 6)
    store.record_finding("k", Severity.inconsistent, None, None)
    return Completed()


def test_a_failed_open_is_an_error_outcome_not_a_raise(provider: RunStoreProvider) -> None:
    handler = ScriptedHandler("scan", completes)

    outcome = run_or_resume(handler, Faulty(provider, fail={"open_or_start"}), {})  # type: ignore[arg-type]

    assert not outcome.ok and outcome.run_id is None and outcome.status is None
    assert outcome.message.startswith("open_or_start failed: ")
    assert outcome.message == (
        f"open_or_start failed: ConnectionError: open_or_start: ledger away, password={REDACTED}"
    )
    assert outcome.extra == {} and handler.cursors_seen == []
    assert provider.list_runs() == []


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_unreachable_ledger_is_an_open_or_start_failure(backend: str, tmp_path: Any) -> None:
    url = (
        f"sqlite:///{tmp_path / 'no-such-dir' / 'ledger.db'}"
        if backend == "sqlite"
        else "postgresql+psycopg://planq:planq@127.0.0.1:1/nowhere"
    )
    db = Database(url)
    try:
        outcome = run_or_resume(ScriptedHandler("scan", completes), SqlRunStoreProvider(db), {})
    finally:
        db.close()
    assert not outcome.ok and outcome.run_id is None
    assert outcome.message.startswith("open_or_start failed: ")  # whatever the driver said


def test_a_failed_stats_read_counts_as_zero(provider: RunStoreProvider) -> None:
    faulty = Faulty(provider, fail={"get_run_by_id"})

    outcome = run_or_resume(ScriptedHandler("scan", scans_with_a_finding), faulty, {})  # type: ignore[arg-type]

    assert outcome.ok and outcome.completed and outcome.status is RunStatus.Completed
    assert (outcome.scanned_count, outcome.finding_count, outcome.severity_counts) == (0, 0, {})
    assert faulty.calls["finding_severity_counts"] == 0  # no findings known: not queried
    summary = provider.get_run_by_id(outcome.run_id or "")
    assert summary is not None and summary.status is RunStatus.Completed
    assert (summary.scanned_count, summary.finding_count) == (6, 1)


def test_a_failed_severity_read_counts_as_none(provider: RunStoreProvider) -> None:
    faulty = Faulty(provider, fail={"finding_severity_counts"})

    outcome = run_or_resume(ScriptedHandler("scan", scans_with_a_finding), faulty, {})  # type: ignore[arg-type]

    assert outcome.ok and outcome.completed
    assert (outcome.scanned_count, outcome.finding_count, outcome.severity_counts) == (6, 1, {})


def test_severity_counts_are_not_queried_without_findings(provider: RunStoreProvider) -> None:
    faulty = Faulty(provider)

    clean = run_or_resume(ScriptedHandler("clean", completes), faulty, {})  # type: ignore[arg-type]
    assert clean.completed and clean.severity_counts == {} and clean.extra["severity_counts"] == {}
    assert faulty.calls["finding_severity_counts"] == 0

    dirty = run_or_resume(ScriptedHandler("dirty", scans_with_a_finding), faulty, {})  # type: ignore[arg-type]
    assert dirty.severity_counts == {"inconsistent": 1}
    assert faulty.calls["finding_severity_counts"] == 1


@pytest.mark.parametrize(
    ("op", "outcome", "expect"),
    [
        ("mark_completed", Completed(), "completed"),
        ("mark_paused", Paused(b"p"), "paused"),
        ("mark_failed", Failed("boom"), "failed"),
    ],
)
def test_a_failed_final_write_is_logged_and_the_sweep_recovers(
    provider: RunStoreProvider,
    caplog: pytest.LogCaptureFixture,
    op: str,
    outcome: RunOutcome,
    expect: str,
) -> None:
    def scan(store: RunStore, args: Mapping[str, Any], cursor: bytes | None) -> RunOutcome:
        store.checkpoint(b"ck", 2)
        return outcome

    faulty = Faulty(provider, fail_store={op})
    with caplog.at_level(logging.WARNING, logger="planq.domain.runs.engine"):
        report = run_or_resume(ScriptedHandler("scan", scan), faulty, {}, owner=OWNER)  # type: ignore[arg-type]

    assert f"{op} failed: ConnectionError" in caplog.text and SECRET not in caplog.text
    assert f"{op} failed: ConnectionError" in report.message
    assert report.status is None  # the ledger did not take it: the status is not known
    assert report.ok is (expect != "failed")
    assert (report.completed, report.paused) == (expect == "completed", expect == "paused")
    if expect == "failed":
        assert report.message.startswith(f"boom (run_id={report.run_id})")
    [run] = provider.list_runs("scan")
    assert run.status is RunStatus.Running  # still active: a sweep pauses it later
    assert provider.boot_recovery_sweep(OWNER, stale_after=3600).run_ids == (run.id,)
    swept = provider.get_run_by_id(run.id)
    assert swept is not None and swept.cursor_hex == b"ck".hex()


# -- findings ---------------------------------------------------------------------------------


def test_findings_counts_and_paging(provider: RunStoreProvider) -> None:
    store = open_fresh(provider, "scan")
    plan = [Severity.data_loss] * 3 + [Severity.inconsistent] + [Severity.anomaly] * 2
    recorded = [
        store.record_finding("k", severity, f"res-{i}", {"i": i, "nested": {"ok": True}})
        for i, severity in enumerate(plan)
    ]

    assert provider.finding_severity_counts(store.run_id) == {
        "data_loss": 3,
        "inconsistent": 1,
        "anomaly": 2,
    }
    summary = provider.get_run_by_id(store.run_id)
    assert summary is not None and summary.finding_count == 6
    pages = [provider.list_findings(store.run_id, limit=4, offset=o) for o in (0, 4, 8)]
    assert [len(p) for p in pages] == [4, 2, 0]
    listed = pages[0] + pages[1]
    assert sorted(f.id for f in listed) == sorted(f.id for f in recorded)
    by_id = {f.id: f for f in listed}
    for finding in recorded:
        got = by_id[finding.id]
        assert (got.run_id, got.kind, got.severity) == (store.run_id, "k", finding.severity)
        assert got.detail == finding.detail and got.resource_id == finding.resource_id
        assert got.created_at == finding.created_at


def test_record_finding_takes_a_uuid_or_a_string_resource_id(provider: RunStoreProvider) -> None:
    store = open_fresh(provider, "scan")
    resource = uuid.UUID("0b9f8c1e-3d2a-4c5b-8e7f-6a5b4c3d2e1f")

    by_uuid = store.record_finding("missing_blob", "data_loss", resource, {"n": 1})
    by_text = store.record_finding("stale_heartbeat", "inconsistent", "01J0000000JOB", None)
    run_wide = store.record_finding("truncated", "anomaly", None, None)

    assert by_uuid.resource_id == str(resource)
    listed = {f.kind: f.resource_id for f in provider.list_findings(store.run_id)}
    assert listed == {
        "missing_blob": "0b9f8c1e-3d2a-4c5b-8e7f-6a5b4c3d2e1f",
        "stale_heartbeat": "01J0000000JOB",
        "truncated": None,
    }
    assert by_text.resource_id == "01J0000000JOB" and run_wide.resource_id is None
    assert record_or_log(store, "k", "anomaly", uuid.uuid4(), None) is not None
    with pytest.raises(ValueError):
        store.record_finding("k", "anomaly", 7, None)  # type: ignore[arg-type]


def test_severity_counts_list_only_the_severities_present(provider: RunStoreProvider) -> None:
    store = open_fresh(provider, "scan")
    assert provider.finding_severity_counts(store.run_id) == {}
    store.record_finding("k", Severity.anomaly, None, None)
    store.record_finding("k", Severity.data_loss, None, None)
    store.record_finding("k", Severity.anomaly, None, None)
    counts = provider.finding_severity_counts(store.run_id)
    assert counts == {"data_loss": 1, "anomaly": 2} and "inconsistent" not in counts


def test_invalid_finding_is_refused_before_any_write(provider: RunStoreProvider) -> None:
    store = open_fresh(provider, "scan")
    with pytest.raises(ValueError):
        store.record_finding("k", "catastrophic", None, None)
    with pytest.raises(ValueError):
        store.record_finding("", Severity.anomaly, None, None)
    with pytest.raises(ValueError):
        store.record_finding("k", Severity.anomaly, None, {"bad": object()})
    summary = provider.get_run_by_id(store.run_id)
    assert summary is not None and summary.finding_count == 0
    assert provider.list_findings(store.run_id) == []


def test_record_or_log_swallows_a_failed_write(
    provider: RunStoreProvider, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_fresh(provider, "scan")
    with caplog.at_level(logging.WARNING, logger="planq.domain.runs.engine"):
        assert record_or_log(store, "k", "nonsense", "r1", {}) is None
    assert "could not record finding" in caplog.text
    assert record_or_log(store, "k", "anomaly", "r1", {"a": 1}) is not None
    assert provider.finding_severity_counts(store.run_id) == {"anomaly": 1}


# -- per-run params ---------------------------------------------------------------------------


def test_string_params_survive_a_resume(provider: RunStoreProvider) -> None:
    store = open_fresh(provider, "scan")
    assert store.get_string_param("mode") is None
    store.set_string_param("mode", "deep")
    store.set_string_param("mode", "deep")  # idempotent
    store.set_string_param("table", "users")
    assert store.mark_paused(b"c")

    resumed = provider.open_or_start("scan", owner=OWNER)

    assert isinstance(resumed, Resumed) and resumed.store.run_id == store.run_id
    assert resumed.store.get_string_param("mode") == "deep"
    assert resumed.store.started_at == store.started_at
    summary = provider.get_run_by_id(store.run_id)
    assert summary is not None and summary.params == {"mode": "deep", "table": "users"}


# -- listing, missing runs, bad arguments -----------------------------------------------------


def test_list_runs_newest_first(provider: RunStoreProvider, clock: FakeClock) -> None:
    ids = []
    for _ in range(3):
        store = open_fresh(provider, "scan")
        assert store.mark_completed()
        ids.append(store.run_id)
        clock.advance(seconds=1)
    other = open_fresh(provider, "other")

    assert [r.id for r in provider.list_runs("scan")] == ids[::-1]
    assert [r.id for r in provider.list_runs("scan", limit=2)] == ids[:0:-1]
    assert [r.id for r in provider.list_runs(limit=1)] == [other.run_id]
    assert provider.get_run_by_id("01J00000000000000000000000") is None


def test_store_of_a_purged_run(provider: RunStoreProvider, clock: FakeClock) -> None:
    store = open_fresh(provider, "scan")
    assert store.mark_completed()
    clock.advance(days=2)
    assert provider.purge_terminal_runs(1) == 1

    with pytest.raises(RunNotFoundError):
        store.status()
    with pytest.raises(RunNotFoundError):
        store.checkpoint(b"x", 1)
    with pytest.raises(RunNotFoundError):
        store.record_finding("k", Severity.anomaly, None, None)
    assert not store.mark_failed("late")
    assert provider.list_findings(store.run_id) == []


def test_bad_arguments_are_refused(provider: RunStoreProvider) -> None:
    with pytest.raises(ValueError):
        provider.open_or_start("")
    with pytest.raises(ValueError):
        provider.open_or_start("scan", owner="")
    store = open_fresh(provider, "scan")
    with pytest.raises(TypeError):
        store.checkpoint("not bytes", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.checkpoint(b"x", -1)
    with pytest.raises(ValueError):
        provider.list_findings(store.run_id, limit=0)
    with pytest.raises(ValueError):
        provider.boot_recovery_sweep("", 10)
    with pytest.raises(ValueError):
        provider.boot_recovery_sweep(OWNER, stale_after=-1)
    summary = provider.get_run_by_id(store.run_id)
    assert summary is not None and summary.scanned_count == 0 and summary.cursor_hex is None


def test_a_terminal_run_frees_the_job_name(provider: RunStoreProvider) -> None:
    first = open_fresh(provider, "scan")
    again = provider.open_or_start("scan")
    assert isinstance(again, AlreadyActive) and again.run_id == first.run_id
    assert first.mark_failed("x")
    assert not first.mark_completed()  # nothing leaves a terminal state

    second = open_fresh(provider, "scan")

    assert second.run_id != first.run_id
    summary = provider.get_run_by_id(first.run_id)
    assert summary is not None and summary.status is RunStatus.Failed


# -- purge --------------------------------------------------------------------------------------


def test_purge_removes_old_terminal_runs_and_their_findings(
    provider: RunStoreProvider, clock: FakeClock
) -> None:
    old_done = open_fresh(provider, "a")
    old_done.record_finding("k", Severity.data_loss, "r", {"x": 1})
    assert old_done.mark_completed()
    old_failed = open_fresh(provider, "b")
    old_failed.record_finding("k", Severity.anomaly, "r", None)
    assert old_failed.mark_failed("boom")
    old_paused = open_fresh(provider, "c")
    assert old_paused.mark_paused(b"p")
    old_running = open_fresh(provider, "d")
    clock.advance(days=3)
    recent = open_fresh(provider, "e")
    assert recent.mark_completed()
    clock.advance(hours=12)

    assert provider.purge_terminal_runs(2) == 2

    for gone in (old_done, old_failed):
        assert provider.get_run_by_id(gone.run_id) is None
        assert provider.list_findings(gone.run_id) == []
        assert provider.finding_severity_counts(gone.run_id) == {}
    kept = {r.id for r in provider.list_runs()}
    assert kept == {old_paused.run_id, old_running.run_id, recent.run_id}


@pytest.mark.parametrize("days", [0, -5, 0.5])
def test_purge_keeps_at_least_one_day(
    provider: RunStoreProvider, clock: FakeClock, days: float
) -> None:
    store = open_fresh(provider, "scan")
    assert store.mark_completed()
    clock.advance(hours=23)
    assert provider.purge_terminal_runs(days) == 0
    assert provider.get_run_by_id(store.run_id) is not None
    clock.advance(hours=2)
    assert provider.purge_terminal_runs(days) == 1
    assert provider.get_run_by_id(store.run_id) is None


def test_handlers_and_providers_match_their_protocols(provider: RunStoreProvider) -> None:
    handler = ScriptedHandler("scan", completes)
    assert isinstance(handler, RecoverableJobHandler)
    assert isinstance(provider, RunStoreProvider)
    assert isinstance(open_fresh(provider, "scan"), RunStore)


def test_findings_page_by_key_after_a_finding(provider: RunStoreProvider) -> None:
    """`after` = the last id of a page gives the next page, as offset paging would."""
    store = open_fresh(provider, "scan")
    for i in range(7):
        store.record_finding("k", Severity.anomaly, f"res-{i}", {"i": i})
    by_offset = provider.list_findings(store.run_id, limit=100)
    first = provider.list_findings(store.run_id, limit=3)
    second = provider.list_findings(store.run_id, limit=3, after=first[-1].id)
    third = provider.list_findings(store.run_id, limit=3, after=second[-1].id)
    assert [f.id for f in first + second + third] == [f.id for f in by_offset]
    assert [len(p) for p in (first, second, third)] == [3, 3, 1]
    assert provider.list_findings(store.run_id, limit=3, after=third[-1].id) == []
    assert provider.list_findings(store.run_id, after=new_id()) == []  # names no finding
    with pytest.raises(ValueError):
        provider.list_findings(store.run_id, after="")
