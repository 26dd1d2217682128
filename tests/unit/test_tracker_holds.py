"""The tracker's token holds: task_prerun holds, the claim beats, task_postrun releases."""

from __future__ import annotations

from planq.tasks.tracker import WORKER_SHUTDOWN, JobTracker


class BeatLog:
    """The heartbeat port: records which ids each beat stamped; asks nothing to stop."""

    def __init__(self) -> None:
        self.stamped: list[list[str]] = []

    def __call__(self, ids: list[str]) -> set[str]:
        self.stamped.append(sorted(ids))
        return set()


def tracker() -> tuple[JobTracker, BeatLog]:
    log = BeatLog()
    return JobTracker(log, interval=3600.0), log


def test_a_held_token_is_not_beaten_until_the_claim() -> None:
    t, log = tracker()
    held = t.hold("J1")

    assert t.beat_now() == set() and log.stamped == []  # not claimed: no heartbeat
    assert t.token("J1") is held and t.in_flight() == []

    assert t.track("J1") is held  # the claim beats the token the delivery holds
    t.beat_now()
    assert log.stamped == [["J1"]]
    t.stop()


def test_a_cancel_before_the_claim_trips_the_held_token() -> None:
    t, _ = tracker()
    held = t.hold("J1")

    assert t.cancel_local("J1") is True
    assert t.track("J1").is_cancelled and held.is_cancelled
    t.untrack("J1")
    t.release("J1")
    assert t.token("J1") is None
    t.stop()


def test_a_warm_shutdown_trips_held_and_running_tokens() -> None:
    t, _ = tracker()
    waiting, running = t.hold("J1"), t.track("J2")

    assert sorted(t.cancel_all()) == ["J1", "J2"]
    assert waiting.reason == WORKER_SHUTDOWN and running.reason == WORKER_SHUTDOWN
    t.stop()


def test_a_dropped_duplicate_never_releases_the_running_deliverys_token() -> None:
    t, log = tracker()
    first = t.hold("J1")
    t.track("J1")  # delivery 1 claimed it
    t.hold("J1")  # delivery 2 of the same job, same process: its claim fails

    t.release("J1")  # delivery 2's task_postrun

    assert t.token("J1") is first and t.in_flight() == ["J1"]
    t.beat_now()
    assert log.stamped == [["J1"]]  # still beaten: no stuck sweep for the live job
    t.untrack("J1")  # delivery 1 finished
    assert t.token("J1") is first  # held until its own task_postrun
    t.release("J1")
    assert t.token("J1") is None and t.in_flight() == []
    t.stop()


def test_without_celery_track_and_untrack_alone_keep_no_token() -> None:
    t, _ = tracker()
    t.track("J1")
    t.untrack("J1")

    assert t.token("J1") is None and t.in_flight() == []
    t.release("J1")  # a stray release is harmless
    assert t.token("J1") is None
    t.stop()
