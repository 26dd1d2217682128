"""What one test process owns, so that pytest-xdist workers never meet on a shared service.

Each pytest process (an xdist worker, or a run without xdist) holds a slot, 0 to 2, and
from it:

- **Redis database numbers**: five per slot, one per purpose (the main test database, the
  CLI's module worker, the run engine's apps, pytest-celery's worker, a second broker).
  Redis keeps sixteen and 0 is left to planq's default, so three slots at most: a fourth
  worker fails loudly instead of sharing. Celery's broadcasts (control, events) stay inside
  a database too: kombu prefixes fanout channels with it.
- **TCP ports**: a range of its own for servers a test starts (Flower, the API, metrics), so
  two workers never race for the same free port.
- **PostgreSQL databases**: every database a test makes has a unique name; migrated ones
  are copied from one template built per migration set (tests/support.py).
- **RabbitMQ**: the one test that publishes there names a queue of its own per test.

The URLs are put in this process's environment at import, so every `celery worker`, beat
and CLI process a test starts inherits the same slot's resources.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

#: Redis keeps databases 0-15; 0 is planq's default broker (the demo, a developer's
#: worker), so the tests take 1-15: three slots of five.
MAX_SLOTS = 3
FIRST_DB = 1
_PURPOSES = {
    "PLANQ_TEST_REDIS_URL": 0,  # redis_url, the executors' counters, most apps
    "PLANQ_TEST_CLI_REDIS_URL": 1,  # tests/integration/test_cli.py's module worker
    "PLANQ_TEST_RUNS_REDIS_URL": 2,  # the recoverable-run apps
    "PLANQ_TEST_PYTEST_CELERY_REDIS_URL": 3,  # pytest-celery's worker
    "PLANQ_TEST_OTHER_REDIS_URL": 4,  # a second broker beside the main one
}
REDIS_BASE = os.environ.get("PLANQ_TEST_REDIS", "redis://127.0.0.1:6379")
#: Ports a slot's servers listen on: [PORT_BASE + slot * PORTS_PER_SLOT, ...+PORTS_PER_SLOT).
PORT_BASE = 20000
PORTS_PER_SLOT = 2000


#: One lock file per slot, machine-wide: a slot is held while its pytest process lives (the
#: kernel lets go of a dead one's lock), so two suites on one machine (two clones, a test
#: run beside `make test`) and a crashed xdist worker's replacement never share a slot.
SLOT_LOCKS = Path(os.environ.get("PLANQ_TEST_SLOT_LOCKS", "/tmp/planq-test-slots"))
#: How long a process waits for a free slot before it fails (another suite holds them all).
SLOT_WAIT_S = 1200.0
_held: list[int] = []  # the held lock's file descriptor, open for the process's life


def _is_xdist_controller() -> bool:
    """True in the process that hands tests to xdist workers (it runs none itself)."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        return False
    words = [*sys.argv[1:], *os.environ.get("PYTEST_ADDOPTS", "").split()]
    return any(w == "-n" or w.startswith(("-n", "--numprocesses", "--dist")) for w in words)


#: Marks every process started under a slot (not PLANQ_*: some tests strip those).
ORPHAN_MARK = "PYTEST_PLANQ_SLOT"


def _end_orphans(slot: int) -> None:
    """Kill what a dead holder of slot left running (its `celery worker`s, its Flower).

    The slot's lock was free, so its last holder is gone; a process that still carries its
    mark would consume this slot's queues beside the new holder's own workers.
    """
    mark = f"{ORPHAN_MARK}={slot}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):  # gone already, or not ours to read
            continue


def _acquire_slot() -> int:
    """Hold the first free slot's lock, waiting while every slot is held."""
    SLOT_LOCKS.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + SLOT_WAIT_S
    while True:
        for slot in range(MAX_SLOTS):
            fd = os.open(SLOT_LOCKS / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            _held.append(fd)
            _end_orphans(slot)
            return slot
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"every test slot ({MAX_SLOTS}, {SLOT_LOCKS}) is held by another test run "
                f"for {SLOT_WAIT_S:.0f} s: at most {MAX_SLOTS} pytest processes at once "
                f"(16 Redis databases, {len(_PURPOSES)} a slot)"
            )
        time.sleep(0.5)


def worker_slot() -> int:
    """The slot of this process: inherited by a process a test started, else acquired.

    A `celery worker` or CLI process a test starts inherits PLANQ_TEST_SLOT together with
    the PLANQ_TEST_SLOT_OWNER that names the pytest process (or xdist worker) holding it;
    a new xdist worker inherits its controller's environment, with another worker name,
    so it takes a slot of its own.
    """
    me = os.environ.get("PYTEST_XDIST_WORKER", "main")
    inherited = os.environ.get("PLANQ_TEST_SLOT")
    if inherited is not None and os.environ.get("PLANQ_TEST_SLOT_OWNER") == me:
        return int(inherited)
    if _is_xdist_controller():  # runs no test: slot 0's names, nothing held
        return 0
    slot = _acquire_slot()
    os.environ["PLANQ_TEST_SLOT"] = str(slot)
    os.environ["PLANQ_TEST_SLOT_OWNER"] = me
    os.environ[ORPHAN_MARK] = str(slot)
    for variable in _PURPOSES:  # this slot's own URLs, never those inherited from another
        os.environ[variable] = _redis_url(slot, variable)
    return slot


def _redis_url(slot: int, variable: str) -> str:
    return f"{REDIS_BASE}/{FIRST_DB + slot * len(_PURPOSES) + _PURPOSES[variable]}"


SLOT = worker_slot()
for _variable in _PURPOSES:  # a process a test started keeps what it was given
    os.environ.setdefault(_variable, _redis_url(SLOT, _variable))


_ports = itertools.cycle(
    range(PORT_BASE + SLOT * PORTS_PER_SLOT, PORT_BASE + (SLOT + 1) * PORTS_PER_SLOT)
)
_ports_lock = threading.Lock()


def free_port() -> int:
    """A TCP port in this slot's range that nothing listens on right now.

    The range is walked in turn, so a port handed out is not handed out again until the
    range wraps: a server slow to bind cannot lose its port to the next test.
    """
    with _ports_lock:
        for _ in range(PORTS_PER_SLOT):
            port = next(_ports)
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise RuntimeError(f"no free port in slot {SLOT}'s range")
