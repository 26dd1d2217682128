"""Group commit: many jobs' claims (or finishes) in one write, per process.

A process that holds many jobs at once (`-P threads -c 16`, gevent, the AsyncWorker's
threads) pays a round trip and a commit per claim and per finish. Here a job's thread
hands its claim or finish to the process's one `GroupCommitter`. The first call of a
batch leads it, as PostgreSQL's own group commit lets the first backend flush for the
others: on its own thread it waits at most `window_ms` (PLANQ_GROUP_COMMIT_MS) for
siblings, then sends every claim of the batch in one statement and every finish in one
more (`JobLedger.claim_many` / `finish_many`) and wakes each follower with its own
outcome: won, lost, or its own exception, exactly as the single statement would have
told it. There is no writer thread: the leader writes, and a follower blocks until then.

The window is waited out only where a sibling may join, as PostgreSQL's commit_delay
waits only with commit_siblings: `active` (the runner's count of jobs inside run_job
here) says whether this job is alone, and `slots` (the process's job slots, its pool's
concurrency) when nobody else can arrive (every slot is waiting in the batch: it
goes at once). In between, the batch waits at most the window for the jobs the pool is
about to start or end. A lone job's batch of one goes at once, and a batch that holds one
call is sent as that call's single statement, on the caller's own thread, as with the
window at 0. Why: a pool fed one message at a time by Celery's
consumer mostly holds one job (a short job ends before the next arrives), and there a
handoff to another thread and back, and the array form of a statement of one, cost the
worker and PostgreSQL more than they save (docs/group_commit.md).

No job body starts before its claim committed, and no finish returns before it committed:
the caller blocks until the ledger answered for its row. A pipeline's finish (which
queues the next phase in the same transaction) is not batched: it takes the single path.
window_ms 0 turns it off: every call is the single statement, on the caller's thread.
Prefork children hold one job each and keep the single path (docs/group_commit.md).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from planq.domain.batches import Outcome
from planq.domain.config import DEFAULT_GROUP_COMMIT_MS, check_group_commit_ms
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.ledger import JobLedger
from planq.domain.ports import Claimed, Finish

logger = logging.getLogger("planq.group_commit")

#: The most jobs of one kind in one statement: a full batch is sent without waiting out
#: the window (a process holds at most MAX_WORKERS jobs; this bounds the arrays).
DEFAULT_MAX_BATCH = 256
#: How often a follower looks whether its batch still has a leader (it always should).
_LIVENESS = 1.0
#: Serialises a forked child's reset; a new lock in every child (`os.register_at_fork`).
_FORK_GUARD = [threading.Lock()]
os.register_at_fork(after_in_child=lambda: _FORK_GUARD.__setitem__(0, threading.Lock()))


class BatchInterrupted(RuntimeError):
    """The job writing this call's batch was interrupted before the ledger answered.

    Its thread or greenlet was stopped by something no job catches (a gevent Timeout, a
    time limit, its greenlet killed): this call's write may or may not have committed, as
    when a single statement is interrupted in flight. Raised in the follower, never the
    interrupting exception itself (that one belongs to the leader's own task).
    """


@dataclass(eq=False)
class _Call:
    """One job's claim or finish, waiting in a batch."""

    kind: str  #: "claim" or "finish"
    job_id: str
    worker_id: str | None
    alone: Callable[[], Any]  #: the single statement, for a batch of this call only
    finish: Finish | None = None
    done: threading.Event = field(default_factory=threading.Event)
    outcome: Outcome[Any] | None = None

    def answer(self, outcome: Outcome[Any]) -> None:
        self.outcome = outcome
        self.done.set()


@dataclass
class GroupCommitStats:
    """What the committer sent: ledger writes and the jobs in them, per kind.

    A batch is what a leader sent for the calls it gathered (one call: its single
    statement, as a lone job's are).
    """

    claim_batches: int = 0
    claimed_jobs: int = 0
    finish_batches: int = 0
    finished_jobs: int = 0
    largest: int = 0  #: the most jobs in one write


class GroupCommitter:
    """The process's group commit of job claims and finishes (thread-safe; see the module).

    `claim(job_id, worker_id)` and `finish(job, status, error, worker_id, traceback=,
    pipeline=)` take the arguments of `JobLedger.claim` / `finish` and answer as they do.
    `active`, if given, counts the jobs in flight, and `slots` the jobs the process can
    hold at once: who may yet join a batch (the module says why).
    `close()` sends what is pending and waits for every batch in flight (calls after close
    take the single path). A forked child starts afresh.
    """

    def __init__(
        self,
        ledger: JobLedger,
        window_ms: float = DEFAULT_GROUP_COMMIT_MS,
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        clock: Callable[[], float] = time.monotonic,
        active: Callable[[], int] | None = None,
        slots: int | None = None,
    ) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive integer, got {max_batch!r}")
        self.ledger = ledger
        self.window = check_group_commit_ms(window_ms) / 1000.0
        self.max_batch = max_batch
        self._clock = clock
        #: Jobs that could still join a batch (None: unknown, so the window is waited out).
        self._active = active
        #: The process's job slots (None: the jobs in flight are all that may join).
        self.slots = slots
        self._reset()

    def _reset(self) -> None:
        self.stats = GroupCommitStats()
        self._cond = threading.Condition()
        self._pending: list[_Call] = []
        self._first_at = 0.0
        #: A call is gathering `_pending` into its batch (set by the first, until it sends).
        self._leading = False
        self._flushing = 0  #: batches being written now
        self._closing = False
        self._closed = False
        self._pid = os.getpid()

    def set_window(self, window_ms: float, slots: int | None = None) -> None:
        """Change the window (validated as at construction; 0: each call alone), and slots."""
        window = check_group_commit_ms(window_ms) / 1000.0
        with self._cond:
            self.window = window
            if slots is not None:
                self.slots = slots
            self._cond.notify_all()

    @property
    def enabled(self) -> bool:
        """Whether calls are grouped (window above 0 and not closed)."""
        return self.window > 0 and not self._closed

    @property
    def pending(self) -> int:
        """Calls waiting in the batch being gathered now."""
        with self._cond:
            return len(self._pending)

    # -- what a job's thread calls ---------------------------------------------------
    def claim(self, job_id: str, worker_id: str) -> Claimed | None:
        """`JobLedger.claim`, grouped: the job and its plan once committed, or None (lost)."""
        if not self.enabled:
            return self.ledger.claim(job_id, worker_id)
        result: Claimed | None = self._submit(
            _Call("claim", job_id.upper(), worker_id, partial(self.ledger.claim, job_id, worker_id))
        )
        return result

    def finish(
        self,
        job: AsyncJob,
        status: AsyncJobStatus,
        error: str | None = None,
        worker_id: str | None = None,
        *,
        traceback: str | None = None,
        pipeline: bool = False,
    ) -> bool:
        """`JobLedger.finish`, grouped (a pipeline's alone): whether this worker's write won."""

        def alone() -> bool:
            return self.ledger.finish(
                job, status, error, worker_id, traceback=traceback, pipeline=pipeline
            )

        if pipeline or not self.enabled:
            return alone()
        item = Finish(job.job_id, status, error, traceback, worker_id)
        won: bool = self._submit(_Call("finish", job.job_id, worker_id, alone, item))
        return won

    def close(self) -> None:
        """Send what is pending and wait until every batch is written; later calls go alone.

        Calls left with no leader (theirs was interrupted, and so were they) are sent here.
        """
        self._after_fork()
        while True:
            with self._cond:
                self._closing = True
                self._cond.notify_all()  # a leader waiting out its window sends now
                if not (self._pending or self._leading or self._flushing):
                    self._closed = True
                    return
                orphaned = bool(self._pending) and not self._leading
                if orphaned:
                    self._leading = True
                else:
                    self._cond.wait(_LIVENESS)
            if orphaned:
                self._lead(None)

    def __enter__(self) -> GroupCommitter:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _submit(self, call: _Call) -> Any:
        """Join (or lead) a batch and return this call's own outcome (raised if an error).

        A lone job leads a batch of one that goes at once (`_wanted`): its single statement,
        on its own thread.
        """
        self._after_fork()
        with self._cond:
            if self._closing:
                closing, lead = True, False
            else:
                closing = False
                self._pending.append(call)
                lead = not self._leading
                if lead:
                    self._leading = True
                    self._first_at = self._clock()
                elif len(self._pending) >= self._wanted():
                    self._cond.notify_all()  # the batch is full: its leader need not wait
        if closing:
            return call.alone()
        if lead:
            self._lead(call)
        try:
            while not call.done.wait(_LIVENESS):
                with self._cond:  # a leader that was interrupted is replaced
                    orphan = call in self._pending and not self._leading
                    if orphan:
                        self._leading = True
                        self._first_at = self._clock()
                if orphan:
                    logger.error("group commit: a batch lost its leader; job %s leads", call.job_id)
                    self._lead(call)
        except BaseException:  # this follower was stopped: its call, if not yet taken, is not sent
            with self._cond:
                if call in self._pending:
                    self._pending.remove(call)
            raise
        assert call.outcome is not None
        return call.outcome.get()

    def _after_fork(self) -> None:
        """A forked child starts afresh: the parent's batches and leaders are not here."""
        if os.getpid() != self._pid:
            with _FORK_GUARD[0]:  # two threads making the child's first calls: one resets
                if os.getpid() != self._pid:
                    self._reset()

    def _lead(self, own: _Call | None) -> None:
        """Gather the batch (the window, a full batch, or close), write it; again if any is left.

        Interrupted (a BaseException in the leader's thread or greenlet: a gevent Timeout,
        a time limit), it writes nothing more: its own call is withdrawn, every call of the
        batch not yet answered learns BatchInterrupted, and what waits in `_pending` is
        led by one of its followers (`_submit` looks every _LIVENESS seconds).
        """
        more = True
        holding = True  # this call holds the lead until it hands it on (more is False)
        try:
            while more:
                with self._cond:
                    while not self._closing and len(self._pending) < self._wanted():
                        left = self._first_at + self.window - self._clock()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                    batch, self._pending = _split(self._pending, 2 * self.max_batch)
                    more = bool(self._pending)  # a job's second call (a duplicate): next
                    if more:
                        self._first_at = self._clock()
                    else:
                        self._leading = holding = False  # the next call leads the next batch
                    self._flushing += 1
                try:
                    self._flush(batch)
                except BaseException as exc:  # answered before close() can see it done
                    for call in batch:
                        if not call.done.is_set():
                            call.answer(Outcome.failed(_interrupted(exc)))
                    raise
                finally:
                    with self._cond:
                        self._flushing -= 1
                        self._cond.notify_all()
        except BaseException:
            with self._cond:
                if own is not None and own in self._pending:
                    self._pending.remove(own)
                if holding:  # never another leader's lead: that one is gathering its own
                    self._leading = False
                self._cond.notify_all()
            raise

    def _wanted(self) -> int:
        """How many calls a batch waits for (see the module): 1 for a lone job, else a slot each."""
        if self._active is None:
            return self.max_batch
        running = self._active()
        if running <= 1:
            return 1
        return min(self.max_batch, max(running, self.slots or running))

    def _flush(self, batch: list[_Call]) -> None:
        """Send the batch's claims (one write per worker id) and finishes; answer each call."""
        claims: dict[str | None, list[_Call]] = {}
        finishes: list[_Call] = []
        for call in batch:
            if call.kind == "claim":
                claims.setdefault(call.worker_id, []).append(call)
            else:
                finishes.append(call)
        for worker_id, calls in claims.items():
            assert worker_id is not None
            for chunk in _chunks(calls, self.max_batch):
                ids = [c.job_id for c in chunk]
                self._send(chunk, partial(self.ledger.claim_many, ids, worker_id), "claim")
        for chunk in _chunks(finishes, self.max_batch):
            items = [c.finish for c in chunk if c.finish is not None]
            self._send(chunk, partial(self.ledger.finish_many, items), "finish")

    def _send(self, calls: list[_Call], write: Callable[[], list[Outcome[Any]]], kind: str) -> None:
        """One write for the calls (one call: its single statement); answer each call."""
        if len(calls) == 1:
            write = partial(_single, calls[0].alone)
        self._write(calls, write, kind)

    def _write(
        self, calls: list[_Call], write: Callable[[], list[Outcome[Any]]], kind: str
    ) -> None:
        try:
            outcomes = write()
            if len(outcomes) != len(calls):
                raise RuntimeError(f"{kind} batch answered {len(outcomes)} of {len(calls)} jobs")
        except BaseException as exc:  # never leave a job waiting: each learns the failure
            logger.exception("group commit: a %s batch of %d jobs failed", kind, len(calls))
            for call in calls:
                call.answer(
                    Outcome.failed(exc if isinstance(exc, Exception) else _interrupted(exc))
                )
            if not isinstance(exc, Exception):
                raise
            return
        for call, outcome in zip(calls, outcomes, strict=True):  # first: the writes committed
            call.answer(outcome)
        with self._cond:  # two leaders may be writing at once (one batch, then the next)
            if kind == "claim":
                self.stats.claim_batches += 1
                self.stats.claimed_jobs += len(calls)
            else:
                self.stats.finish_batches += 1
                self.stats.finished_jobs += len(calls)
            self.stats.largest = max(self.stats.largest, len(calls))


def _interrupted(exc: BaseException) -> BatchInterrupted:
    """What a follower raises when its leader was stopped by exc."""
    return BatchInterrupted(
        f"the job writing this batch was interrupted ({type(exc).__name__}) before the "
        "ledger answered; this write may or may not have committed"
    )


def _single(alone: Callable[[], Any]) -> list[Outcome[Any]]:
    """A batch of one as the single statement: its value, or its own error as its outcome."""
    try:
        return [Outcome(alone())]
    except Exception as exc:
        return [Outcome.failed(exc)]


def _split(pending: list[_Call], most: int) -> tuple[list[_Call], list[_Call]]:
    """The batch to send now and the rest: a job's second call of a kind, or past `most`, waits."""
    batch: list[_Call] = []
    later: list[_Call] = []
    seen: set[tuple[str, str]] = set()
    for call in pending:
        key = (call.kind, call.job_id)
        if key in seen or len(batch) >= most:
            later.append(call)
        else:
            seen.add(key)
            batch.append(call)
    return batch, later


def _chunks(calls: list[_Call], size: int) -> list[list[_Call]]:
    return [calls[i : i + size] for i in range(0, len(calls), size)]
