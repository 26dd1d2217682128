"""One periodic batch writer: the loop behind the job and run heartbeats and dispatch stamps.

Each of them batches its own work (the jobs to beat, the runs to beat, the ids to stamp) and
hands this loop one `tick` that writes the batch in one ledger statement. The loop owns what
they share: a daemon thread started lazily when work arrives and ended when the owner is
idle; a wait of `interval` between ticks, cut to `retry_period(interval)` while the ledger is
unavailable, so leases are renewed within about a second of its return; reporting to the
process's `OutageMonitor` (which logs an outage once); one redacted WARNING line for any
other failure (the traceback at DEBUG); and an optional outage budget, past which the owner
is told to give its batch up. Its wake-up is a pipe, so `wake()` is async-signal-safe (the
job tracker is woken from signal handlers).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
import weakref
from collections.abc import Callable

from planq.domain.errors import LedgerUnavailableError
from planq.domain.outage import PROCESS_OUTAGES, OutageMonitor, retry_period
from planq.domain.redaction import BUILTIN, Redactor, describe_exception

logger = logging.getLogger("planq.periodic")

#: The note a plain `wake()` writes (an owner may write its own one-byte notes).
WAKE = b"w"

#: Writes one batch to the ledger; how many items it wrote (0: there was nothing to do).
Tick = Callable[[], int]


def _close_pipe(read_fd: int, write_fd: int) -> None:
    for fd in (read_fd, write_fd):
        with contextlib.suppress(OSError):
            os.close(fd)


class PeriodicBatch:
    """A lazily started daemon thread that calls `tick` every `interval` while work is pending.

    The owner calls `start()` after adding work (never while holding a lock its `idle`
    callback takes: the loop calls `idle` under its own lock). `idle()` true ends the thread;
    the next `start()` begins a new one. `run_once()` runs one tick in the caller's thread
    with the same reporting (a flush by hand). A tick reports nothing itself: it returns how
    many items it wrote, and a count > 0 tells the monitor the ledger answered, so a tick
    that found nothing to do never ends an outage.

    With `outage_budget`, an outage that has lasted longer than that many seconds (counted
    from the first failed tick) calls `on_budget_spent()` once, and the count starts again.
    """

    def __init__(
        self,
        tick: Tick,
        interval: float,
        *,
        what: str,
        idle: Callable[[], bool],
        name: str = "planq-periodic",
        outages: OutageMonitor | None = None,
        redactor: Redactor = BUILTIN,
        log: logging.Logger = logger,
        on_wake: Callable[[bytes], None] | None = None,
        outage_budget: float | None = None,
        on_budget_spent: Callable[[], None] | None = None,
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int | float):
            raise TypeError(f"interval must be a number of seconds, got {interval!r}")
        if not interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self._tick = tick
        self.interval = float(interval)  #: read before each wait: an owner may change it
        self.what = what
        self._idle = idle
        self.name = name
        self.outages = PROCESS_OUTAGES if outages is None else outages
        self.redactor = redactor
        self._log = log
        self._on_wake = on_wake
        self.outage_budget = outage_budget
        self._on_budget_spent = on_budget_spent
        self._lock = threading.Lock()
        self._failing = False  #: the last tick met an outage: retry soon
        self._outage_since: float | None = None  #: monotonic time of the first failed tick
        self._thread: threading.Thread | None = None
        self._stop: threading.Event | None = None  #: the current thread's own stop flag
        self._closed = False
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        # An owner that is never closed (a run heartbeat) still gives its pipe back when
        # it is collected; close() gives it back at once.
        self._release = weakref.finalize(self, _close_pipe, self._read_fd, self._write_fd)
        self._release.atexit = False  # the process's end gives it back anyway

    @property
    def running(self) -> bool:
        """Whether the loop's thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def failing(self) -> bool:
        """Whether the last tick met an outage (the loop retries at the short period)."""
        return self._failing

    # -- the owner's side ------------------------------------------------------------
    def start(self) -> bool:
        """Start the thread unless it runs; False once closed (nothing runs after close())."""
        with self._lock:
            if self._closed:
                return False
            stop = self._stop
            if self.running and stop is not None and not stop.is_set():
                return True
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stop,), name=self.name, daemon=True
            )
            self._thread.start()
            return True

    def wake(self, note: bytes = WAKE) -> None:
        """Tick now (async-signal-safe: one write to a pipe). `note` reaches `on_wake`."""
        fd = self._write_fd
        if fd < 0:
            return
        # A full pipe means a wake-up is already pending.
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(fd, note)

    def stop(self, timeout: float = 5.0) -> bool:
        """End the thread (the next start() begins a new one); whether it ended in time."""
        with self._lock:
            thread, stop = self._thread, self._stop
            if stop is not None:
                stop.set()
        self.wake()
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def close(self, timeout: float = 5.0) -> None:
        """Stop, and give the pipe back; start() does nothing from now on."""
        with self._lock:
            self._closed = True
        self.stop(timeout)
        self._write_fd = -1  # a late signal handler's wake() writes nowhere
        self._release()

    def run_once(self) -> int:
        """One tick here and now: items written, or 0 if it failed (reported as the loop does)."""
        try:
            count = self._tick()
        except LedgerUnavailableError as exc:
            self._outage(exc)
            return 0
        except Exception as exc:  # not an outage: one line, the next tick tries again
            self._failed(exc)
            return 0
        if count:
            with self._lock:
                self._failing, self._outage_since = False, None
            self.outages.succeeded()
        return count

    # -- the loop ----------------------------------------------------------------------
    def _run(self, stop: threading.Event) -> None:
        while True:
            if not self._wait(retry_period(self.interval) if self._failing else self.interval):
                stop.set()  # the pipe is gone (closed under a thread that outlived stop())
            if self._ends(stop):
                return
            self.run_once()
            if self._ends(stop):
                return

    def _ends(self, stop: threading.Event) -> bool:
        """Whether this thread is done (stopped, or the owner idle); forgets it if so."""
        with self._lock:
            if not stop.is_set() and not self._idle():
                return False
            if self._stop is stop:
                self._thread = self._stop = None
            return True

    def _wait(self, seconds: float) -> bool:
        """Wait for the interval or a wake-up (handing its notes on); False: no pipe left."""
        try:
            readable, _, _ = select.select([self._read_fd], [], [], seconds)
            notes = os.read(self._read_fd, 512) if readable else b""
        except (OSError, ValueError):
            return False
        if notes and self._on_wake is not None:
            self._on_wake(notes)
        return True

    def _outage(self, exc: LedgerUnavailableError) -> None:
        """Report it to the monitor (it logs the outage once); give up past the budget."""
        self.outages.failed(self.what, exc)
        now = time.monotonic()
        with self._lock:
            self._failing = True
            if self._outage_since is None:
                self._outage_since = now
            spent = self.outage_budget is not None and now - self._outage_since > (
                self.outage_budget
            )
            if spent:
                self._outage_since = None
        if spent and self._on_budget_spent is not None:
            self._on_budget_spent()

    def _failed(self, exc: Exception) -> None:
        with self._lock:  # the ledger answered (with an error): no outage to ride out
            self._failing, self._outage_since = False, None
        self._log.warning(
            "%s failed (next tick in %.1fs): %s",
            self.what,
            self.interval,
            describe_exception(exc, self.redactor)[:300],
        )
        self._log.debug("%s failed", self.what, exc_info=exc)
