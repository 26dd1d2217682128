"""Per-process job tracker: tokens, and ONE batched heartbeat statement per interval."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import Callable

from planq.domain.cancellation import CancellationToken
from planq.domain.errors import LedgerUnavailableError
from planq.domain.outage import PROCESS_OUTAGES, OutageMonitor, retry_period
from planq.domain.redaction import BUILTIN, Redactor, describe_exception

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
    `poke()` (async-signal-safe) makes it look at the ledger at once. While the ledger is
    unavailable it retries every `retry_period(interval)` (at most 1 s), so the jobs' leases
    are renewed as soon as it is back; the outage is reported to the process's monitor.

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
        self.interval = interval
        self.outages = PROCESS_OUTAGES if outages is None else outages
        self._failing = False  #: the last beat failed: retry soon, not a whole interval later
        self._tokens: dict[str, CancellationToken] = {}
        self._beating: set[str] = set()
        self._holds: dict[str, int] = {}
        self._lock = threading.Lock()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self._thread: threading.Thread | None = None
        self._stopped = False
        self.beats = 0

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
            if self._thread is None or not self._thread.is_alive():
                self._stopped = False
                self._thread = threading.Thread(
                    target=self._run, name="planq-heartbeat", daemon=True
                )
                self._thread.start()
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
        self._write(_POLL)

    def poke_shutdown(self) -> None:
        """Trip every token as a warm shutdown (safe to call from a signal handler)."""
        self._write(_SHUTDOWN)

    def _write(self, byte: bytes) -> None:
        # A full pipe means a wake-up is already pending.
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._write_fd, byte)

    # -- the heartbeat thread ------------------------------------------------------------
    def beat_now(self) -> set[str]:
        """Write one heartbeat for all tracked jobs and trip the tokens asked to cancel."""
        ids = self.in_flight()
        if not ids:
            return set()
        asked = self._beat(ids)
        self.outages.succeeded()
        self.beats += 1
        for job_id in asked:
            self.cancel_local(job_id, CANCEL_REQUESTED)
        return asked

    def _run(self) -> None:
        while not self._stopped:
            wait = retry_period(self.interval) if self._failing else self.interval
            readable, _, _ = select.select([self._read_fd], [], [], wait)
            if readable:
                data = os.read(self._read_fd, 512)
                if _SHUTDOWN in data:
                    self.cancel_all(WORKER_SHUTDOWN)
            if self._stopped:
                return
            self._failing = self._beat_quietly()
            with self._lock:
                if not self._beating:
                    self._thread = None
                    return

    def _beat_quietly(self) -> bool:
        """beat_now(); True if the ledger is unavailable (retry soon). Never a log flood.

        An outage is the monitor's to log; any other failure is one line per interval.
        """
        try:
            self.beat_now()
        except LedgerUnavailableError as exc:
            self.outages.failed("job heartbeat", exc)
            return True
        except Exception as exc:
            logger.warning(
                "heartbeat write failed: %s", describe_exception(exc, self.redactor)[:300]
            )
            logger.debug("heartbeat write failed", exc_info=exc)
        return False

    def stop(self) -> None:
        """Stop the thread (the jobs' own ends untrack them)."""
        self._stopped = True
        self._write(_POLL)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def close(self) -> None:
        """Stop and release the pipe."""
        self.stop()
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
