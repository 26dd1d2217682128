"""The spec's own worker loop: poll a job store for queued rows and run them on threads.

This is how an `AsyncWorker(config, store, executor)` runs jobs with no broker at all
(the spec's "poll loop dispatches jobs via thread pool"): every `poll_interval` it lists
queued rows, up to its free `max_workers` slots, and hands each to the job runner, whose
claim is a compare-and-set, so a row that a Celery delivery (or another poller) took first
is simply skipped. On a Celery fleet the broker delivers instead and nothing polls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.ports import JobStore

logger = logging.getLogger("planq.poller")

#: Runs one job by id to its end (AsyncWorker.run_job).
RunJob = Callable[[str], object]


class StorePoller:
    """A poll thread plus a pool of max_workers threads; stop() waits for in-flight jobs."""

    def __init__(self, store: JobStore, run_job: RunJob, max_workers: int, interval: float):
        self.store = store
        self.run_job = run_job
        self.max_workers = max_workers
        self.interval = interval
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._in_flight: dict[str, Future[object]] = {}
        self._lock = threading.Lock()

    @property
    def is_running(self) -> bool:
        """Whether the pool and the poll thread are up."""
        return self._pool is not None

    def start(self) -> None:
        """Create the pool and start polling (a second start does nothing)."""
        if self._pool is not None:
            return
        self._stop.clear()
        self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="planq-job")
        self._thread = threading.Thread(target=self._loop, name="planq-poll", daemon=True)
        self._thread.start()

    def poll_once(self) -> list[str]:
        """Submit queued rows to free slots now; the ids submitted."""
        pool = self._pool
        if pool is None:
            return []
        with self._lock:
            self._in_flight = {k: f for k, f in self._in_flight.items() if not f.done()}
            free = self.max_workers - len(self._in_flight)
            if free <= 0:
                return []
            wanted = free + len(self._in_flight)  # rows in flight are still listed as queued
        rows: list[AsyncJob] = self.store.list_by_status(AsyncJobStatus.queued, wanted)
        submitted: list[str] = []
        with self._lock:
            for job in rows:
                if job.job_id in self._in_flight or len(self._in_flight) >= self.max_workers:
                    continue
                self._in_flight[job.job_id] = pool.submit(self._run, job.job_id)
                submitted.append(job.job_id)
        return submitted

    def _run(self, job_id: str) -> object:
        try:
            return self.run_job(job_id)
        except Exception:  # the runner writes every outcome; this is a bug or an outage
            logger.exception("job %s: the runner raised", job_id)
            return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # a ledger outage: the next poll tries again
                logger.exception("poll failed; retrying in %.1fs", self.interval)
            self._stop.wait(self.interval)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop polling and wait (up to timeout) for the jobs in flight to end."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            futures = list(self._in_flight.values())
            self._in_flight.clear()
        for future in futures:
            try:
                future.result(timeout)
            except Exception:  # already logged by _run; a timeout leaves it to finish alone
                logger.debug("in-flight job did not end cleanly within %.1fs", timeout)
        pool.shutdown(wait=False, cancel_futures=True)
