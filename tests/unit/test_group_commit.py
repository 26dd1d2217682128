"""GroupCommitter on the memory ledger: batching, per-job outcomes, per-job failures, close.

The window is held open by a clock that never moves, so a batch is sent exactly when it
is full (max_batch) or at close(): which calls share a write is decided by the test, not
by the scheduler. Every wait polls with a deadline.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from planq.domain.clock import utcnow
from planq.domain.errors import ConfigurationError, LedgerRejectedError, LedgerUnavailableError
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.ledger import JobLedger
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import Claimed, Finish
from planq.store import InMemoryJobStore, in_memory_ledger
from planq.store.memory import InMemoryPlanStore
from planq.tasks.group_commit import BatchInterrupted, GroupCommitStats, GroupCommitter, _Call
from tests.support import wait_for

A, B = "node-a/1", "node-b/2"
FROZEN: Callable[[], float] = lambda: 0.0  # noqa: E731  # a window that never ends by itself


class CountingStore(InMemoryJobStore):
    """Counts its batch and single writes; can be told to fail them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = {"claim": 0, "claim_many": 0, "finish": 0, "finish_many": 0}
        self.reject_batches = False
        self.outages = 0  #: the next batches that meet an outage
        self.poison: set[str] = set()  #: job ids whose single finish the ledger rejects
        self.gate: threading.Event | None = None  #: batches wait for it
        self.entered = threading.Event()
        self.writers: list[threading.Thread] = []  #: the thread of each batch write
        self.interrupt: BaseException | None = None  #: raised by the next batch write, once
        self.inside = False  #: in a batch: the memory batch runs the singles, not counted

    def _claim(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["claim"] += 0 if self.inside else 1
        return super()._claim(*args, **kwargs)

    def _finish(self, job_id: str, *args: Any, **kwargs: Any) -> Any:
        self.calls["finish"] += 0 if self.inside else 1
        if job_id in self.poison:
            raise LedgerRejectedError("finish", "ck_test_poison")
        return super()._finish(job_id, *args, **kwargs)

    def _batch(self, kind: str) -> None:
        self.calls[kind] += 1
        self.writers.append(threading.current_thread())
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(30), "the test never opened the gate"
        if self.outages > 0:
            self.outages -= 1
            raise LedgerUnavailableError("connection refused")
        if self.reject_batches:
            raise LedgerRejectedError(kind.replace("_many", ""), "ck_test_poison")
        if self.interrupt is not None:  # once
            interrupt, self.interrupt = self.interrupt, None
            raise interrupt

    def _claim_many(self, *args: Any, **kwargs: Any) -> Any:
        self._batch("claim_many")
        self.inside = True
        try:
            return super()._claim_many(*args, **kwargs)
        finally:
            self.inside = False

    def _finish_many(self, *args: Any, **kwargs: Any) -> Any:
        self._batch("finish_many")
        self.inside = True
        try:
            return super()._finish_many(*args, **kwargs)
        finally:
            self.inside = False


class Interrupt(BaseException):
    """What no job catches: a gevent Timeout, a greenlet killed, a hard time limit."""


def catching(fn: Callable[[], Any], into: list[Any]) -> Callable[[], None]:
    """A thread target keeping what fn returned or raised (BaseException included)."""

    def run() -> None:
        try:
            into.append(fn())
        except BaseException as exc:
            into.append(exc)

    return run


def world() -> tuple[CountingStore, JobLedger]:
    store = CountingStore()
    plans = InMemoryPlanStore(store._shared)  # one ledger with the job store
    return store, JobLedger(store, plans)


def queue(ledger: JobLedger, n: int) -> list[AsyncJob]:
    made = []
    assert ledger.plans is not None
    for _ in range(n):
        plan = Plan(name="gc")
        ledger.plans.add(plan)
        job = AsyncJob(plan_id=plan.plan_id, phase=PlanPhase.strategize)
        assert ledger.jobs.queue([job], utcnow()) is not None
        made.append(job)
    return made


def in_threads_catching(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run each call on its own thread; what each returned or raised (BaseException too)."""
    results: list[Any] = []
    threads = [threading.Thread(target=catching(call, results)) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == len(calls), "a call never returned"
    return results


def in_threads(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run each call on its own thread, all at once; their results (or raised errors)."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:  # the test reads it
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive(), "a job's call never returned"
    return results


def test_sixteen_threads_claim_and_finish_in_one_write_each() -> None:
    store, ledger = world()
    jobs = queue(ledger, 16)
    with GroupCommitter(ledger, 50, max_batch=16, clock=FROZEN) as gc:
        claimed = in_threads([lambda j=j: gc.claim(j.job_id, A) for j in jobs])
        assert all(isinstance(c, Claimed) and c.job.worker_id == A for c in claimed)
        assert {c.job.job_id for c in claimed} == {j.job_id for j in jobs}
        assert all(c.plan is not None and c.plan.plan_id == c.job.plan_id for c in claimed)
        won = in_threads(
            [lambda c=c: gc.finish(c.job, AsyncJobStatus.succeeded, None, A) for c in claimed]
        )
        assert won == [True] * 16
    assert store.calls == {"claim": 0, "claim_many": 1, "finish": 0, "finish_many": 1}
    assert (gc.stats.claim_batches, gc.stats.finish_batches, gc.stats.largest) == (1, 1, 16)
    assert store.count(AsyncJobStatus.succeeded) == 16


def test_a_batch_is_written_by_its_first_call_on_its_own_thread() -> None:
    """Leader and followers: no writer thread; the first caller writes for all."""
    store, ledger = world()
    jobs = queue(ledger, 3)
    before = set(threading.enumerate())
    with GroupCommitter(ledger, 50, max_batch=3, clock=FROZEN) as gc:

        def claim(job_id: str) -> None:
            gc.claim(job_id, A)

        first = threading.Thread(target=claim, args=(jobs[0].job_id,))
        first.start()
        wait_for(lambda: gc.pending == 1, what="the first claim to lead its batch")
        rest = [threading.Thread(target=claim, args=(j.job_id,)) for j in jobs[1:]]
        for t in rest:
            t.start()
        for t in (first, *rest):
            t.join(30)
        assert set(threading.enumerate()) <= before  # no thread of the committer's own
    assert store.writers == [first] and gc.stats.largest == 3
    assert store.count(AsyncJobStatus.running) == 3


def test_window_zero_is_the_single_statement_on_the_callers_thread() -> None:
    store, ledger = world()
    [job] = queue(ledger, 1)
    gc = GroupCommitter(ledger, 0)
    claimed = gc.claim(job.job_id, A)
    assert claimed is not None
    assert gc.finish(claimed.job, AsyncJobStatus.succeeded, None, A) is True
    assert store.calls == {"claim": 1, "claim_many": 0, "finish": 1, "finish_many": 0}
    assert not gc.enabled and gc.stats == GroupCommitStats()  # nothing was grouped
    gc.close()


@pytest.mark.parametrize("bad", [-1, 51, float("nan"), float("inf"), "2", True])
def test_the_window_is_checked(bad: object) -> None:
    _, ledger = world()
    with pytest.raises(ConfigurationError, match="group_commit_ms"):
        GroupCommitter(ledger, bad)  # type: ignore[arg-type]


def test_the_fencing_holds_inside_a_batch() -> None:
    # In one claim write: a queued job (won), one another worker holds (swept to it), one
    # cancelled while queued, one unknown. In one finish write: A's job (won) and a job a
    # sweep gave to B (lost: its row is left as B has it).
    store, ledger = world()
    mine, taken, cancelled, finish_mine, finish_taken = queue(ledger, 5)
    assert ledger.claim(taken.job_id, B) is not None
    assert ledger.cancel(cancelled.job_id) is not None
    assert ledger.claim(finish_mine.job_id, A) is not None
    assert ledger.claim(finish_taken.job_id, B) is not None
    unknown = new_id()
    with GroupCommitter(ledger, 50, max_batch=4, clock=FROZEN) as gc:
        claims = in_threads(
            [lambda i=i: gc.claim(i, A) for i in (mine.job_id, taken.job_id, cancelled.job_id)]
            + [lambda: gc.claim(unknown, A)]
        )
        assert isinstance(claims[0], Claimed) and claims[1:] == [None, None, None]
        gc.max_batch = 2
        finished = in_threads(
            [
                lambda: gc.finish(finish_mine, AsyncJobStatus.failed, "boom", A),
                lambda: gc.finish(finish_taken, AsyncJobStatus.failed, "late", A),
            ]
        )
        assert finished == [True, False]
    assert store.calls["claim_many"] == store.calls["finish_many"] == 1
    row = store.get(finish_taken.job_id)
    assert row is not None and row.status is AsyncJobStatus.running and row.worker_id == B
    assert row.error_message is None
    swept = store.get(taken.job_id)
    assert swept is not None and swept.worker_id == B
    gone = store.get(cancelled.job_id)
    assert gone is not None and gone.status is AsyncJobStatus.cancelled and gone.worker_id is None


def test_two_deliveries_of_one_job_in_one_window_one_wins() -> None:
    store, ledger = world()
    [job] = queue(ledger, 1)
    with GroupCommitter(ledger, 50, max_batch=1, clock=FROZEN) as gc:
        results = in_threads([lambda: gc.claim(job.job_id, A), lambda: gc.claim(job.job_id, A)])
    assert sorted(r is None for r in results) == [False, True]
    # the duplicate waited for the next write; a write of one call is its single statement
    assert gc.stats.claim_batches == store.calls["claim"] == 2 and store.calls["claim_many"] == 0


def test_a_rejected_batch_fails_only_the_job_whose_row_is_refused() -> None:
    store, ledger = world()
    jobs = queue(ledger, 4)
    for job in jobs:
        assert ledger.claim(job.job_id, A) is not None
    store.reject_batches = True
    store.poison = {jobs[2].job_id}
    with GroupCommitter(ledger, 50, max_batch=4, clock=FROZEN) as gc:
        results = in_threads(
            [lambda j=j: gc.finish(j, AsyncJobStatus.failed, "boom", A) for j in jobs]
        )
    assert results[0] is results[1] is results[3] is True
    assert isinstance(results[2], LedgerRejectedError) and "ck_test_poison" in str(results[2])
    assert store.calls["finish_many"] == 1 and store.calls["finish"] == 4  # then one by one
    statuses = [store.get(j.job_id).status for j in jobs]  # type: ignore[union-attr]
    assert statuses == [AsyncJobStatus.failed] * 2 + [AsyncJobStatus.running, AsyncJobStatus.failed]


def test_a_rejected_claim_batch_claims_each_job_alone() -> None:
    store, ledger = world()
    jobs = queue(ledger, 3)
    store.reject_batches = True
    with GroupCommitter(ledger, 50, max_batch=3, clock=FROZEN) as gc:
        results = in_threads([lambda j=j: gc.claim(j.job_id, A) for j in jobs])
    assert all(isinstance(r, Claimed) for r in results)
    assert store.calls["claim_many"] == 1 and store.calls["claim"] == 3


def test_an_outage_is_ridden_out_by_the_batch_and_every_job_gets_its_outcome() -> None:
    """About 0.6 s: the outage ride-out's first two retry delays (0.2 s, 0.4 s)."""
    store, ledger = world()
    jobs = queue(ledger, 3)
    store.outages = 2
    with GroupCommitter(ledger, 50, max_batch=3, clock=FROZEN) as gc:
        results = in_threads([lambda j=j: gc.claim(j.job_id, A) for j in jobs])
    assert all(isinstance(r, Claimed) for r in results)
    assert store.calls["claim_many"] == 3 and store.calls["claim"] == 0  # never alone


def test_an_outage_past_its_budget_reaches_every_waiting_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, ledger = world()
    jobs = queue(ledger, 2)
    store.outages = 10**6

    def spent(fn: Callable[[], Any], what: str, **_: Any) -> Any:
        try:
            return fn()
        except LedgerUnavailableError as exc:
            raise LedgerUnavailableError(f"ledger unavailable for 120s during {what}") from exc

    monkeypatch.setattr("planq.domain.ledger.ride_out_outage", spent)  # a budget of one try
    with GroupCommitter(ledger, 50, max_batch=2, clock=FROZEN) as gc:
        results = in_threads([lambda j=j: gc.claim(j.job_id, A) for j in jobs])
    assert all(isinstance(r, LedgerUnavailableError) for r in results)
    assert results[0] is not results[1]  # each thread raises its own
    assert store.calls["claim"] == 0  # an outage is not retried job by job
    assert store.count(AsyncJobStatus.running) == 0


def test_no_caller_returns_before_its_write_committed() -> None:
    store, ledger = world()
    jobs = queue(ledger, 2)
    store.gate = threading.Event()
    returned: list[Any] = []
    with GroupCommitter(ledger, 50, max_batch=2, clock=FROZEN) as gc:
        callers = [
            threading.Thread(target=lambda j=j: returned.append(gc.claim(j.job_id, A)))
            for j in jobs
        ]
        for caller in callers:
            caller.start()
        assert store.entered.wait(30)  # the leader is inside the store's write of both
        assert not returned  # neither job's thread has returned: both wait for it
        for job in jobs:
            row = store.get(job.job_id)
            assert row is not None and row.status is AsyncJobStatus.queued
        store.gate.set()
        for caller in callers:
            caller.join(30)
        assert len(returned) == 2 and all(isinstance(r, Claimed) for r in returned)
    for job in jobs:
        row = store.get(job.job_id)
        assert row is not None and row.status is AsyncJobStatus.running


def test_close_sends_what_is_pending_and_later_calls_go_alone() -> None:
    store, ledger = world()
    jobs = queue(ledger, 4)
    gc = GroupCommitter(ledger, 50, max_batch=100, clock=FROZEN)  # only close() ends it
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda j=j: results.append(gc.claim(j.job_id, A))) for j in jobs[:3]
    ]
    for t in threads:
        t.start()
    wait_for(lambda: gc.pending == 3, timeout=10, what="three claims waiting")
    gc.close()
    for t in threads:
        t.join(10)
    assert len(results) == 3 and all(isinstance(r, Claimed) for r in results)
    assert store.calls["claim_many"] == 1
    assert gc.pending == 0 and not gc._leading and not gc._flushing  # nothing left in flight
    assert gc.claim(jobs[3].job_id, A) is not None  # after close: the single statement
    assert store.calls["claim"] == 1 and store.calls["claim_many"] == 1


def test_a_pipeline_finish_takes_the_single_path() -> None:
    store, ledger = world()
    [job] = queue(ledger, 1)
    assert ledger.claim(job.job_id, A) is not None
    with GroupCommitter(ledger, 50, clock=FROZEN) as gc:
        assert gc.finish(job, AsyncJobStatus.succeeded, None, A, pipeline=True) is True
    assert store.calls["finish"] == 1 and store.calls["finish_many"] == 0


def test_the_ledger_batch_redacts_errors_as_the_single_finish() -> None:
    jobs, plans = in_memory_ledger()
    ledger = JobLedger(jobs, plans)
    made = queue(ledger, 2)
    for job in made:
        assert ledger.claim(job.job_id, A) is not None
    secret = "password=hunter2 failed"
    assert ledger.finish(made[0], AsyncJobStatus.failed, secret, A, traceback=secret)
    [outcome] = ledger.finish_many(
        [Finish(made[1].job_id, AsyncJobStatus.failed, secret, secret, A)]
    )
    assert outcome.get() is True
    one, many = (jobs.get(j.job_id) for j in made)
    assert one is not None and many is not None
    assert "hunter2" not in (many.error_message or "") + (many.error_traceback or "")
    assert (many.error_message, many.error_traceback) == (one.error_message, one.error_traceback)


def test_a_lone_job_goes_at_once_and_a_full_pool_without_waiting_out_the_window() -> None:
    """The window never ends by itself here (a frozen clock): who may join decides."""
    store, ledger = world()
    jobs = queue(ledger, 4)
    running = [1]
    with GroupCommitter(ledger, 50, clock=FROZEN, active=lambda: running[0], slots=3) as gc:
        assert gc.claim(jobs[0].job_id, A) is not None  # alone: its own statement, at once
        assert (gc.stats.claim_batches, store.calls["claim"], store.calls["claim_many"]) == (
            1,
            1,
            0,
        )
        running[0] = 3  # three in flight, three slots: the batch goes when all three wait
        claimed = in_threads([lambda j=j: gc.claim(j.job_id, A) for j in jobs[1:]])
        assert all(isinstance(c, Claimed) for c in claimed)
        assert gc.stats.claim_batches == 2 and gc.stats.largest == 3
        running[0] = 2  # two in flight of three slots: a third may start, so it waits
        threading.Thread(
            target=lambda: gc.finish(claimed[0].job, AsyncJobStatus.succeeded, None, A), daemon=True
        ).start()
        wait_for(lambda: gc.pending == 1, what="the finish to wait in its batch")
        assert gc.stats.finish_batches == 0
    assert gc.stats.finish_batches == 1  # close sent it
    assert store.count(AsyncJobStatus.succeeded) == 1


def test_a_leader_interrupted_in_its_write_fails_its_followers_with_batch_interrupted() -> None:
    """The interrupting exception stays the leader's; the followers learn BatchInterrupted."""
    store, ledger = world()
    jobs = queue(ledger, 3)
    store.interrupt = Interrupt()
    with GroupCommitter(ledger, 50, max_batch=3, clock=FROZEN) as gc:
        results = in_threads_catching([lambda j=j: gc.claim(j.job_id, A) for j in jobs])
        assert gc.pending == 0 and not gc._leading and not gc._flushing
    assert sum(isinstance(r, Interrupt) for r in results) == 1  # the leader's own
    assert sum(isinstance(r, BatchInterrupted) for r in results) == 2
    assert store.count(AsyncJobStatus.running) == 0  # the write raised before any row


def test_a_leader_interrupted_in_its_window_leaves_the_batch_to_a_follower() -> None:
    """About 1 s: the follower looks for its leader every second."""
    store, ledger = world()
    first, second = queue(ledger, 2)
    armed = threading.Event()
    running = [3]  # three jobs of three slots in flight: the batch waits for a third call

    def clock() -> float:  # frozen, but interrupts the leader once armed
        if armed.is_set() and threading.current_thread().name == "leader":
            armed.clear()
            raise Interrupt()
        return 0.0

    gc = GroupCommitter(ledger, 50, clock=clock, active=lambda: running[0], slots=3)
    led: list[Any] = []
    followed: list[Any] = []
    leader = threading.Thread(
        target=catching(lambda: gc.claim(first.job_id, A), led), name="leader"
    )
    leader.start()
    wait_for(lambda: gc.pending == 1, what="the first claim to lead its batch")
    follower = threading.Thread(target=catching(lambda: gc.claim(second.job_id, A), followed))
    follower.start()
    wait_for(lambda: gc.pending == 2, what="the second claim to follow")
    armed.set()
    gc.set_window(50)  # wakes the leader, whose look at the clock is interrupted
    leader.join(30)
    assert len(led) == 1 and isinstance(led[0], Interrupt)
    running[0] = 1  # the interrupted job has left: the follower's job is alone now
    follower.join(30)  # it took the lead and sent its own claim; the leader's was withdrawn
    assert len(followed) == 1 and isinstance(followed[0], Claimed)
    assert followed[0].job.job_id == second.job_id
    row = store.get(first.job_id)
    assert row is not None and row.status is AsyncJobStatus.queued  # withdrawn, not written
    gc.close()


def test_close_sends_calls_whose_leader_and_callers_are_all_gone() -> None:
    """A batch left with no leader and no caller to take it over: close() sends it."""
    store, ledger = world()
    [job] = queue(ledger, 1)
    gc = GroupCommitter(ledger, 50, clock=FROZEN)
    call = _Call("claim", job.job_id, A, partial(ledger.claim, job.job_id, A))
    gc._pending.append(call)  # as an interrupted leader leaves its interrupted follower's
    gc.close()
    assert call.done.is_set() and isinstance(call.outcome.get(), Claimed)  # type: ignore[union-attr]
    row = store.get(job.job_id)
    assert row is not None and row.status is AsyncJobStatus.running


def test_an_interrupted_leader_leaves_the_next_batchs_leader_alone() -> None:
    """Review finding: an interrupt during the last write must not clear a new leader's lead."""
    store, ledger = world()
    j1, j2, j3, j4 = queue(ledger, 4)
    store.gate = threading.Event()
    store.interrupt = Interrupt()  # the first batch write: held at the gate, then interrupted
    gc = GroupCommitter(ledger, 50, max_batch=2, clock=FROZEN)
    results: dict[str, list[Any]] = {j.job_id: [] for j in (j1, j2, j3, j4)}

    def start(job: AsyncJob) -> threading.Thread:
        t = threading.Thread(target=catching(lambda: gc.claim(job.job_id, A), results[job.job_id]))
        t.start()
        return t

    first = [start(j1)]
    wait_for(lambda: gc.pending == 1, what="J1 to lead")
    first.append(start(j2))  # the batch is full: J1 writes [J1, J2] and waits at the gate
    assert store.entered.wait(30)
    third = start(j3)  # leads the next batch, waiting in its window
    wait_for(lambda: gc.pending == 1 and gc._leading, what="J3 to lead the next batch")
    store.gate.set()  # J1's write now raises the interrupt
    for t in first:
        t.join(30)
    assert gc._leading  # J3 still leads its batch
    fourth = start(j4)  # joins J3's batch (full at two): J3 writes both
    for t in (third, fourth):
        t.join(30)
    assert not third.is_alive() and not fourth.is_alive()
    assert [type(r) for r in results[j1.job_id]] == [Interrupt]
    assert [type(r) for r in results[j2.job_id]] == [BatchInterrupted]
    assert all(isinstance(results[j.job_id][0], Claimed) for j in (j3, j4))
    assert store.writers[-1] is third  # J3 wrote its own batch
    gc.close()
