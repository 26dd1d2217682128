"""Per-process job tracker: tokens, and ONE batched heartbeat statement per interval."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from planq.domain.cancellation import CancellationToken
from planq.domain.outage import PROCESS_OUTAGES, OutageMonitor
from planq.domain.periodic import PeriodicBatch
from planq.domain.redaction import BUILTIN, Redactor, describe_exception
from planq.tasks import tracing

logger = logging.getLogger("planq.heartbeat")

CANCEL_REQUESTED = "cancel requested"
WORKER_SHUTDOWN = "worker shutdown"
#: The row is no longer running under this process's claim (swept, or taken over).
LOST_CLAIM = "lost the claim"
_POLL = b"p"
_SHUTDOWN = b"s"

#: Stamps the given running jobs; returns the ids whose cancel was requested.
Beat = Callable[[list[str]], set[str]]


class JobTracker:
    """Holds the tokens of the jobs this process runs and keeps their heartbeats fresh.

    One daemon thread writes one statement per interval for all tracked jobs; the same
    statement returns cancel requests, so a cancel arrives even if every broadcast was lost.
    `poke()` (async-signal-safe) makes it look at the ledger at once. The thread is a
    `PeriodicBatch`: while the ledger is unavailable it retries every
    `retry_period(interval)` (at most 1 s), so the jobs' leases are renewed as soon as it is
    back, and the outage is reported to the process's monitor.

    Under Celery, `task_prerun` holds a delivery's token (`hold`) and `task_postrun`
    releases it (`release`): a revoke or a warm shutdown that lands before the claim
    still trips it. Only a claimed job (`track`, after the claim's compare-and-set) is
    beaten: the fenced heartbeat would report a row not yet claimed as lost. A token goes
    when its job is neither beaten nor held, so a duplicate delivery in the same process
    that is dropped never releases the token of the delivery that runs.
    """

    def __init__(
        self,
        beat: Beat,
        interval: float,
        outages: OutageMonitor | None = None,
        redactor: Redactor = BUILTIN,
    ) -> None:
        self._beat = beat
        self.redactor = redactor
        self.outages = PROCESS_OUTAGES if outages is None else outages
        self._tokens: dict[str, CancellationToken] = {}
        self._beating: set[str] = set()
        self._holds: dict[str, int] = {}
        self._lock = threading.Lock()
        self.beats = 0
        #: The heartbeat thread: started by track(), ends when nothing is beaten.
        self.loop = PeriodicBatch(
            self._tick,
            interval,
            what="job heartbeat",
            idle=lambda: not self.in_flight(),
            name="planq-heartbeat",
            outages=self.outages,
            redactor=redactor,
            log=logger,
            on_wake=self._on_wake,
        )

    @property
    def interval(self) -> float:
        """Seconds between heartbeats."""
        return self.loop.interval

    @interval.setter
    def interval(self, seconds: float) -> None:
        self.loop.interval = seconds

    # -- jobs ----------------------------------------------------------------------
    def hold(self, job_id: str) -> CancellationToken:
        """A delivery of job_id is about to run here (task_prerun): its token, not beaten."""
        with self._lock:
            self._holds[job_id] = self._holds.get(job_id, 0) + 1
            return self._tokens.setdefault(job_id, CancellationToken())

    def release(self, job_id: str) -> None:
        """That delivery is over (task_postrun); the token goes unless the job still runs."""
        with self._lock:
            left = self._holds.pop(job_id, 0) - 1
            if left > 0:
                self._holds[job_id] = left
            elif job_id not in self._beating:
                self._tokens.pop(job_id, None)

    def track(self, job_id: str) -> CancellationToken:
        """Start heartbeating job_id (claimed by this process); its token is returned."""
        with self._lock:
            token = self._tokens.setdefault(job_id, CancellationToken())
            self._beating.add(job_id)
        self.loop.start()
        return token

    def untrack(self, job_id: str) -> None:
        """Stop heartbeating job_id (it ended); its token goes unless a delivery holds it."""
        with self._lock:
            self._beating.discard(job_id)
            if not self._holds.get(job_id):
                self._tokens.pop(job_id, None)

    def in_flight(self) -> list[str]:
        """Ids of the jobs running (claimed) in this process now."""
        with self._lock:
            return list(self._beating)

    def token(self, job_id: str) -> CancellationToken | None:
        """The token of a job running here, if any."""
        with self._lock:
            return self._tokens.get(job_id)

    def cancel_local(self, job_id: str, reason: str = CANCEL_REQUESTED) -> bool:
        """Trip the token of job_id if it runs in this process."""
        token = self.token(job_id)
        if token is None:
            return False
        token.cancel(reason)
        tracing.job_event(job_id, tracing.EVENT_TOKEN_TRIPPED, {tracing.CANCEL_REASON: reason})
        return True

    def cancel_all(self, reason: str = WORKER_SHUTDOWN) -> list[str]:
        """Trip every in-flight token (warm shutdown)."""
        with self._lock:
            items = list(self._tokens.items())
        for _, token in items:
            token.cancel(reason)
        return [job_id for job_id, _ in items]

    # -- signal-safe wake-ups --------------------------------------------------------
    def poke(self) -> None:
        """Look at the ledger now (safe to call from a signal handler)."""
        self.loop.wake(_POLL)

    def poke_shutdown(self) -> None:
        """Trip every token as a warm shutdown (safe to call from a signal handler)."""
        self.loop.wake(_SHUTDOWN)

    def _on_wake(self, notes: bytes) -> None:
        if _SHUTDOWN in notes:
            self.cancel_all(WORKER_SHUTDOWN)

    # -- the heartbeat ---------------------------------------------------------------------
    def beat_now(self) -> set[str]:
        """Write one heartbeat for all tracked jobs and trip the tokens asked to cancel."""
        ids = self.in_flight()
        return self._beat_ids(ids) if ids else set()

    def _tick(self) -> int:
        ids = self.in_flight()
        if ids:
            self._beat_ids(ids)
        return len(ids)

    def _beat_ids(self, ids: list[str]) -> set[str]:
        try:
            asked = self._beat(ids)
        except Exception as exc:  # the loop reports it; each job's span shows it too
            error = describe_exception(exc, self.redactor)
            tracing.jobs_event(ids, tracing.EVENT_HEARTBEAT_FAILED, {tracing.ERROR: error})
            raise
        self.beats += 1
        for job_id in asked:
            tracing.job_event(
                job_id, tracing.EVENT_CANCEL_REQUESTED, {tracing.CANCEL_VIA: "heartbeat"}
            )
            self.cancel_local(job_id, CANCEL_REQUESTED)
        return asked

    def stop(self) -> None:
        """Stop the thread (the jobs' own ends untrack them; the next track() restarts it)."""
        self.loop.stop()

    def close(self) -> None:
        """Stop and release the pipe."""
        self.loop.close()
