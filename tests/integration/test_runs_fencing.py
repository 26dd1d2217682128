"""Fencing of recoverable runs on memory, SQLite and PostgreSQL.

A process that lost its run writes nothing, and a live run is kept alive by its heartbeat,
not by its checkpoints.

The orphan scenario, step by step: run A is opened by owner X, swept to Paused (X silent
past stale_after), resumed by owner Y; every write X still tries raises RunFencedError and
changes nothing; Y completes with exactly the expected scanned_count and findings.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import event

from planq.domain.clock import utcnow
from planq.domain.errors import RunFencedError, RunNotActiveError
from planq.domain.runs import (
    Completed,
    Failed,
    Fresh,
    Paused,
    Resumed,
    RunHeartbeat,
    RunOutcome,
    RunStatus,
    RunStore,
    RunStoreProvider,
    RunSummary,
    Severity,
    record_or_log,
    run_or_resume,
)
from planq.store.database import Database
from planq.store.runs_memory import InMemoryRunStoreProvider
from planq.store.runs_sql import SqlRunStoreProvider
from tests.integration.test_runs_contract import FakeClock
from tests.support import wait_for

X = "worker-x@host-x"
Y = "worker-y@host-y"
JOB = "scan"
STALE = 60.0  # seconds, on the fake clock
ITEMS = 40
BATCH = 5


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@dataclass
class Backend:
    """A provider of one backend, and (for SQL) its Database, to count statements."""

    name: str
    make: Callable[..., RunStoreProvider]
    db: Database | None = None


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        return Backend("memory", lambda clock=utcnow: InMemoryRunStoreProvider(clock))
    fixture = "sqlite_database" if request.param == "sqlite" else "pg_database"
    db: Database = request.getfixturevalue(fixture)
    return Backend(request.param, lambda clock=utcnow: SqlRunStoreProvider(db, clock), db)


@pytest.fixture
def provider(backend: Backend, clock: FakeClock) -> RunStoreProvider:
    return backend.make(clock)


def snapshot(provider: RunStoreProvider, run_id: str) -> tuple[RunSummary, list[Any]]:
    """Everything a write could change: the run row and its findings."""
    run = provider.get_run_by_id(run_id)
    assert run is not None
    found = [(f.id, f.kind, f.resource_id) for f in provider.list_findings(run_id, limit=1000)]
    return run, found


def expected_findings(start: int = 0) -> list[str]:
    return [f"item-{i}" for i in range(start, ITEMS) if i % 7 == 0]


def scan_batches(store: RunStore, cursor: bytes | None, batches: int | None = None) -> int:
    """Scan items from cursor, BATCH at a time: findings first, then the checkpoint."""
    position = int(cursor or b"0")
    done = 0
    while position < ITEMS and (batches is None or done < batches):
        upto = min(position + BATCH, ITEMS)
        for i in range(position, upto):
            if i % 7 == 0:
                store.record_finding("seven", Severity.anomaly, f"item-{i}", {"i": i})
        store.checkpoint(str(upto).encode(), upto - position)
        position, done = upto, done + 1
    return position


# -- the store contract: every write of a lost run is refused --------------------------------

WRITES: dict[str, Callable[[RunStore], object]] = {
    "status": lambda s: s.status(),
    "checkpoint": lambda s: s.checkpoint(b"999", 7),
    "finding": lambda s: s.record_finding("late", Severity.data_loss, "orphan", {"x": 1}),
    "param": lambda s: s.set_string_param("mode", "orphan"),
    "seed": lambda s: s.seed_progress_params(123, "count"),  # type: ignore[arg-type]
    "completed": lambda s: s.mark_completed(),
    "paused": lambda s: s.mark_paused(b"999", "orphan pausing"),
    "cancel_ack": lambda s: s.mark_paused(None),
    "failed": lambda s: s.mark_failed("orphan failing"),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_orphan_writes_are_refused_and_change_nothing(
    provider: RunStoreProvider, clock: FakeClock, write: str
) -> None:
    # 1. X opens run A and scans two batches.
    opened = provider.open_or_start(JOB, owner=X)
    assert isinstance(opened, Fresh)
    x = opened.store
    assert x.lease_epoch == 1 and not x.lease_lost
    assert scan_batches(x, None, batches=2) == 2 * BATCH

    # 2. X goes silent past stale_after; the stale sweep pauses A and revokes X's lease.
    clock.advance(seconds=STALE + 1)
    assert provider.boot_recovery_sweep(None, stale_after=STALE).run_ids == (x.run_id,)
    swept = provider.get_run_by_id(x.run_id)
    assert swept is not None and swept.status is RunStatus.Paused and swept.lease_epoch == 2

    # 3. Y resumes A from X's last checkpoint, under a new lease.
    resumed = provider.open_or_start(JOB, owner=Y)
    assert isinstance(resumed, Resumed)
    y = resumed.store
    assert resumed.cursor == str(2 * BATCH).encode() and y.lease_epoch == 3
    before = snapshot(provider, x.run_id)
    assert before[0].owner == Y and before[0].status is RunStatus.Running

    # 4. X wakes up: its write raises the typed error and changes nothing.
    with pytest.raises(RunFencedError) as refused:
        WRITES[write](x)
    assert isinstance(refused.value, RunNotActiveError)  # handlers stopping on that still do
    assert refused.value.held_epoch == 1 and refused.value.run_id == x.run_id
    assert x.lease_lost
    assert snapshot(provider, x.run_id) == before
    for other in WRITES:  # and every later write too, without reaching the ledger
        with pytest.raises(RunFencedError):
            WRITES[other](x)
    assert snapshot(provider, x.run_id) == before
    assert provider.heartbeat_runs({x.run_id: x.lease_epoch}) == set()
    assert provider.heartbeat_runs({x.run_id: y.lease_epoch}) == {x.run_id}

    # 5. Y completes with exactly the expected count and findings, none twice.
    assert y.status() is RunStatus.Running
    assert scan_batches(y, resumed.cursor) == ITEMS
    assert y.mark_completed()
    done = provider.get_run_by_id(x.run_id)
    assert done is not None and done.status is RunStatus.Completed and done.owner == Y
    assert done.scanned_count == ITEMS and done.finding_count == len(expected_findings())
    resources = [f.resource_id for f in provider.list_findings(x.run_id, limit=1000)]
    assert resources == expected_findings()


def test_a_swept_run_fences_its_holder_even_before_anyone_resumes_it(
    provider: RunStoreProvider, clock: FakeClock
) -> None:
    opened = provider.open_or_start(JOB, owner=X)
    assert isinstance(opened, Fresh)
    x = opened.store
    x.checkpoint(b"5", 5)
    clock.advance(seconds=STALE + 1)
    assert provider.boot_recovery_sweep(None, stale_after=STALE) == 1
    before = snapshot(provider, x.run_id)
    with pytest.raises(RunFencedError, match=r"lease epoch 1, now 2, status 'Paused'"):
        x.checkpoint(b"10", 5)
    with pytest.raises(RunFencedError):
        x.mark_completed()
    assert snapshot(provider, x.run_id) == before


def test_a_cancel_request_does_not_take_the_lease(provider: RunStoreProvider) -> None:
    opened = provider.open_or_start(JOB, owner=X)
    assert isinstance(opened, Fresh)
    assert provider.request_cancel(JOB) == opened.store.run_id
    assert opened.store.status() is RunStatus.CancelRequested
    opened.store.checkpoint(b"3", 3)  # the holder may still save its place
    assert opened.store.mark_paused(b"3")  # and acknowledge the cancel
    assert provider.heartbeat_runs({opened.store.run_id: 1}) == set()  # no longer active


# -- the engine: the orphan stops and writes nothing, the new owner completes ----------------


@dataclass
class Scanner:
    """A handler scanning ITEMS; `freeze` runs once after X's second batch (X 'stops')."""

    name: str = JOB
    freeze: Callable[[], None] | None = None
    after_thaw: str = "checkpoint"
    outcomes: list[str] = field(default_factory=list)

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        position = scan_batches(store, resume_cursor, batches=2 if self.freeze else None)
        if self.freeze is None:
            return Completed()
        freeze, self.freeze = self.freeze, None
        freeze()  # meanwhile: swept, resumed and completed by Y
        return AFTER_THAW[self.after_thaw](store, position)


def _swallowing(store: RunStore, position: int) -> RunOutcome:
    with contextlib.suppress(RunFencedError):  # a handler that ignores the error:
        store.checkpoint(b"x", 1)  # the engine still writes nothing
    return Completed()


AFTER_THAW: dict[str, Callable[[RunStore, int], RunOutcome]] = {
    "checkpoint": lambda s, p: (scan_batches(s, str(p).encode()), Completed())[1],
    "finding": lambda s, p: (s.record_finding("k", Severity.anomaly, "item-x", None), Completed())[
        1
    ],
    "finding_or_log": lambda s, p: (record_or_log(s, "k", Severity.anomaly, "r"), Completed())[1],
    "param": lambda s, p: (s.set_string_param("k", "v"), Completed())[1],
    "status": lambda s, p: Paused(b"") if s.status() is RunStatus.CancelRequested else Completed(),
    "returns_completed": lambda s, p: Completed(),
    "returns_paused": lambda s, p: Paused(str(p).encode()),
    "returns_failed": lambda s, p: Failed("orphan says failed"),
    "raises": lambda s, p: (_ for _ in ()).throw(RuntimeError("orphan blew up")),
    "swallows_the_error": _swallowing,
}


@pytest.mark.parametrize("after_thaw", list(AFTER_THAW))
def test_the_orphan_engine_stops_and_the_new_owner_completes_exactly(
    provider: RunStoreProvider, clock: FakeClock, after_thaw: str
) -> None:
    results: dict[str, Any] = {}

    def x_freezes_and_y_takes_over() -> None:
        clock.advance(seconds=STALE + 1)
        results["swept"] = provider.boot_recovery_sweep(None, stale_after=STALE)
        results["y"] = run_or_resume(Scanner(), provider, {}, owner=Y)
        [run] = provider.list_runs(JOB)
        results["after_y"] = snapshot(provider, run.id)

    x_handler = Scanner(freeze=x_freezes_and_y_takes_over, after_thaw=after_thaw)
    x = run_or_resume(x_handler, provider, {}, owner=X)

    y = results["y"]
    assert results["swept"] == 1
    assert y.ok and y.completed and y.status is RunStatus.Completed, y
    assert y.scanned_count == ITEMS and y.finding_count == len(expected_findings())
    assert not x.ok and x.lost and x.status is None and not x.completed and not x.paused, x
    assert x.message.startswith("lost the run: ") and x.run_id == y.run_id
    assert x.as_dict()["lost"] is True and x.extra == {}
    assert snapshot(provider, y.run_id) == results["after_y"]  # X changed nothing
    done, found = results["after_y"]
    assert done.status is RunStatus.Completed and done.owner == Y
    assert done.error_message is None and done.scanned_count == ITEMS
    assert [resource for _, _, resource in found] == expected_findings()


# -- the heartbeat: liveness independent of checkpoints --------------------------------------

REAL_STALE = 0.6  # seconds, on the real clock
BEAT = 0.05


@dataclass
class SlowBatch:
    """Checkpoints, then works past stale_after before checkpointing again.

    Meanwhile another node's stale sweep runs every BEAT seconds; `swept` records each
    sweep's paused ids.
    """

    provider: RunStoreProvider
    work_for: float = 3 * REAL_STALE
    name: str = JOB
    swept: list[tuple[str, ...]] = field(default_factory=list)
    seen: RunSummary | None = None

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> RunOutcome:
        store.checkpoint(b"1", 1)
        deadline = time.monotonic() + self.work_for
        pace = threading.Event()
        while time.monotonic() < deadline:  # "working" on a long batch
            self.swept.append(self.provider.boot_recovery_sweep(None, REAL_STALE).run_ids)
            pace.wait(BEAT)
        self.seen = self.provider.get_run_by_id(store.run_id)
        store.checkpoint(b"2", 1)
        return Completed()


def test_a_live_run_that_checkpoints_rarely_is_never_swept(backend: Backend) -> None:
    provider = backend.make()
    heartbeat = RunHeartbeat(provider.heartbeat_runs, interval=BEAT)
    handler = SlowBatch(provider)

    outcome = run_or_resume(handler, provider, {}, owner=X, heartbeat=heartbeat)

    assert outcome.ok and outcome.completed and outcome.scanned_count == 2, outcome
    assert len(handler.swept) >= 10 and not any(handler.swept)  # swept often, never paused
    seen = handler.seen
    assert seen is not None and seen.status is RunStatus.Running and seen.heartbeat_at
    silent = (utcnow() - seen.last_progress_at).total_seconds()
    assert silent > REAL_STALE  # by its checkpoints alone it looked dead
    assert (seen.heartbeat_at - seen.last_progress_at).total_seconds() > REAL_STALE / 2
    assert heartbeat.beats >= 5 and heartbeat.tracked() == [] and heartbeat.lost == []


def test_without_a_heartbeat_the_same_run_is_swept_and_then_fenced(backend: Backend) -> None:
    provider = backend.make()
    handler = SlowBatch(provider)

    outcome = run_or_resume(handler, provider, {}, owner=X)  # no heartbeat

    assert any(handler.swept)  # the control: the sweep does pause a silent run
    assert outcome.lost and not outcome.ok, outcome
    [run] = provider.list_runs(JOB)
    assert run.status is RunStatus.Paused and run.scanned_count == 1 and run.cursor_hex == "31"


def test_the_heartbeat_tells_a_handler_that_it_lost_the_run(backend: Backend) -> None:
    provider = backend.make()
    heartbeat = RunHeartbeat(provider.heartbeat_runs, interval=BEAT)
    opened = provider.open_or_start(JOB, owner=X)
    assert isinstance(opened, Fresh)
    x = opened.store
    heartbeat.track(x)
    try:
        wait_for(lambda: heartbeat.beats >= 2, timeout=10, what="two heartbeats")
        assert not x.lease_lost
        # Another node sweeps everything (the spec's sweep) and Y resumes the run.
        assert provider.boot_recovery_sweep() == 1
        resumed = provider.open_or_start(JOB, owner=Y)
        assert isinstance(resumed, Resumed)
        wait_for(lambda: x.lease_lost, timeout=10, what="the heartbeat to find the run lost")
        assert heartbeat.lost == [x.run_id]
        before = snapshot(provider, x.run_id)
        with pytest.raises(RunFencedError):
            x.status()  # the handler's next poll says so
        with pytest.raises(RunFencedError):
            x.checkpoint(b"late", 1)
        assert snapshot(provider, x.run_id) == before
    finally:
        heartbeat.stop()


def test_one_heartbeat_statement_per_interval_for_all_runs_of_a_process(
    backend: Backend,
) -> None:
    provider = backend.make()
    calls: list[dict[str, int]] = []

    def beat(leases: Mapping[str, int]) -> set[str]:
        calls.append(dict(leases))
        return provider.heartbeat_runs(leases)

    heartbeat = RunHeartbeat(beat, interval=3600)  # driven by hand below
    stores = []
    for name in ("a", "b", "c"):
        opened = provider.open_or_start(name, owner=X)
        assert isinstance(opened, Fresh)
        stores.append(opened.store)
        heartbeat.track(opened.store)
    statements = CountStatements(backend.db)
    try:
        with statements:
            assert heartbeat.beat_now() == set()
        assert len(calls) == 1 and set(calls[0]) == {s.run_id for s in stores}
        if backend.db is not None:
            assert statements.count == 1, statements.seen
        for store in stores:
            run = provider.get_run_by_id(store.run_id)
            assert run is not None and run.heartbeat_at is not None
    finally:
        heartbeat.stop()


class CountStatements:
    def __init__(self, db: Database | None) -> None:
        self.db = db
        self.count = 0
        self.seen: list[str] = []

    def _on(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self.seen.append(statement)
        if not statement.startswith("BEGIN"):  # SQLite's BEGIN IMMEDIATE opens the block
            self.count += 1

    def __enter__(self) -> CountStatements:
        if self.db is not None:
            event.listen(self.db.engine, "before_cursor_execute", self._on)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.db is not None:
            event.remove(self.db.engine, "before_cursor_execute", self._on)


@pytest.fixture(autouse=True)
def _no_stray_heartbeat_threads() -> Iterator[None]:
    yield
    wait_for(
        lambda: not any(t.name == "planq-run-heartbeat" for t in threading.enumerate()),
        timeout=10,
        what="heartbeat threads to end",
    )
