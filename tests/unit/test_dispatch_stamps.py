"""Batched dispatch stamps ride out a ledger outage, and give up after their budget."""

from __future__ import annotations

import threading

from planq.domain.errors import LedgerUnavailableError
from planq.tasks.publisher import DispatchStamps
from tests.support import wait_for


class FlakyLedger:
    """A stamp port that is down for its first `down` calls (as through a restart)."""

    def __init__(self, down: int) -> None:
        self.down = down
        self.calls = 0
        self.stamped: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, ids: list[str]) -> int:
        with self.lock:
            self.calls += 1
            if self.calls <= self.down:
                raise LedgerUnavailableError("connection refused")
            self.stamped.extend(ids)
            return len(ids)


def test_stamps_held_through_an_outage_are_written_once_it_ends() -> None:
    ledger = FlakyLedger(down=3)
    stamps = DispatchStamps(ledger, interval=0.01)
    stamps.add(["A", "B"])
    stamps.add(["C"])
    wait_for(lambda: len(ledger.stamped) == 3, timeout=10, what="the held stamps")
    assert sorted(ledger.stamped) == ["A", "B", "C"]  # each once, none lost
    assert ledger.calls >= 4
    stamps.close()


def test_stamps_are_left_to_the_relay_once_the_budget_is_spent() -> None:
    ledger = FlakyLedger(down=10**6)
    stamps = DispatchStamps(ledger, interval=0.01, outage_budget=0.05)
    stamps.add(["A"])
    wait_for(lambda: ledger.calls >= 3 and stamps.pending == 0, timeout=10, what="a give-up")
    assert ledger.stamped == []
    stamps.close()
