"""RunHeartbeat on the in-memory provider: its pace, its thread, and a ledger that is away."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

import pytest

from planq.domain.runs import Fresh, RunHeartbeat
from planq.domain.runs.heartbeat import interval_for
from planq.store.runs_memory import InMemoryRunStoreProvider
from tests.support import wait_for


def test_interval_is_six_beats_per_stale_window_at_most_ten_seconds() -> None:
    assert interval_for(60) == 10.0
    assert interval_for(300) == 10.0
    assert interval_for(3) == 0.5
    for bad in (0, -1):
        with pytest.raises(ValueError):
            interval_for(bad)
    with pytest.raises(TypeError):
        interval_for(True)
    with pytest.raises(ValueError):
        RunHeartbeat(lambda leases: set(), interval=0)


def test_the_thread_beats_while_runs_are_tracked_and_then_ends() -> None:
    provider = InMemoryRunStoreProvider()
    heartbeat = RunHeartbeat(provider.heartbeat_runs, interval=0.02)
    opened = provider.open_or_start("scan", owner="w@h")
    assert isinstance(opened, Fresh)
    heartbeat.track(opened.store)
    wait_for(lambda: heartbeat.beats >= 3, timeout=10, what="three beats")
    first = provider.get_run_by_id(opened.store.run_id)
    assert first is not None and first.heartbeat_at is not None
    heartbeat.untrack(opened.store)
    wait_for(
        lambda: not any(t.name == "planq-run-heartbeat" for t in threading.enumerate()),
        timeout=10,
        what="the heartbeat thread to end",
    )
    heartbeat.track(opened.store)  # a later run starts it again
    beats = heartbeat.beats
    wait_for(lambda: heartbeat.beats > beats, timeout=10, what="a beat after restarting")
    heartbeat.stop()
    assert heartbeat.tracked() == [] and heartbeat.lost == []


def test_a_failed_heartbeat_is_logged_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    provider = InMemoryRunStoreProvider()
    failures = []

    def flaky(leases: Mapping[str, int]) -> set[str]:
        if len(failures) < 2:
            failures.append(1)
            raise ConnectionError("ledger away, password=hunter2")
        return provider.heartbeat_runs(leases)

    heartbeat = RunHeartbeat(flaky, interval=0.02)
    opened = provider.open_or_start("scan", owner="w@h")
    assert isinstance(opened, Fresh)
    with caplog.at_level(logging.WARNING, logger="planq.runs.heartbeat"):
        heartbeat.track(opened.store)
        try:
            wait_for(lambda: heartbeat.beats >= 1, timeout=10, what="a beat after two failures")
        finally:
            heartbeat.stop()
    assert "run heartbeat failed" in caplog.text and "hunter2" not in caplog.text
    assert not opened.store.lease_lost  # a failed beat says nothing about the lease
