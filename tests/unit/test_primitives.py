"""Small building blocks: cancellation token, health counters, worker config, ids, errors."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ulid import ULID

from planq.domain.cancellation import CancellationToken
from planq.domain.config import AsyncWorkerConfig, derive_heartbeat_interval
from planq.domain.errors import (
    ConcurrentUpdateError,
    ConfigurationError,
    InvalidIdError,
    LedgerUnavailableError,
    PlanNotFoundError,
    PlanqError,
)
from planq.domain.health import WorkerHealthReport
from planq.domain.ids import is_ulid, new_id, require_ulid

#: Crockford base32 both cases, the letters it leaves out, and look-alikes (for is_ulid).
ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZabcdefghjkmnpqrstvwxyzILOUilou-_ \u0660é"
DEADLINE = 10.0  # seconds: generous upper bound for anything that should be instant

# -- CancellationToken -------------------------------------------------------------------------


def test_token_starts_clear() -> None:
    token = CancellationToken()
    assert token.is_cancelled is False
    assert token.reason is None
    assert "cancelled=False" in repr(token)


def test_cancel_trips_the_token() -> None:
    token = CancellationToken()
    token.cancel("operator asked")
    assert token.is_cancelled is True
    assert token.reason == "operator asked"
    assert token.wait(0) is True
    assert token.wait(DEADLINE) is True
    assert "cancelled=True" in repr(token)


def test_first_reason_wins() -> None:
    token = CancellationToken()
    token.cancel("first")
    token.cancel("second")
    assert token.is_cancelled
    assert token.reason == "first"


def test_wait_returns_false_on_timeout() -> None:
    token = CancellationToken()
    started = time.monotonic()
    assert token.wait(0.05) is False
    assert time.monotonic() - started >= 0.04
    assert token.is_cancelled is False


def test_reset_clears_the_token() -> None:
    token = CancellationToken()
    token.cancel("x")
    token.reset()
    assert token.is_cancelled is False
    assert token.reason is None
    assert token.wait(0) is False
    token.cancel("again")
    assert token.is_cancelled
    assert token.reason == "again"


def test_a_waiting_thread_wakes_when_another_thread_cancels() -> None:
    token = CancellationToken()
    waiting = threading.Event()
    result: list[bool] = []
    elapsed: list[float] = []

    def waiter() -> None:
        waiting.set()
        started = time.monotonic()
        result.append(token.wait(DEADLINE))
        elapsed.append(time.monotonic() - started)

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    assert waiting.wait(DEADLINE)
    token.cancel("stop")
    thread.join(DEADLINE)
    assert not thread.is_alive()
    assert result == [True]
    assert elapsed[0] < DEADLINE  # woke on the cancel, not on the timeout


def test_many_waiters_all_wake() -> None:
    token = CancellationToken()
    ready = threading.Barrier(6)
    results: list[bool] = []
    lock = threading.Lock()

    def waiter() -> None:
        ready.wait(DEADLINE)
        woke = token.wait(DEADLINE)
        with lock:
            results.append(woke)

    threads = [threading.Thread(target=waiter, daemon=True) for _ in range(5)]
    for thread in threads:
        thread.start()
    ready.wait(DEADLINE)
    token.cancel()
    for thread in threads:
        thread.join(DEADLINE)
    assert not any(thread.is_alive() for thread in threads)
    assert results == [True] * 5


# -- WorkerHealthReport ------------------------------------------------------------------------


@pytest.mark.parametrize("worker_id", ["", "   ", None, 3])
def test_health_report_needs_a_worker_id(worker_id: object) -> None:
    with pytest.raises(ValueError, match="worker_id"):
        WorkerHealthReport(worker_id)  # type: ignore[arg-type]


def test_health_report_starts_at_zero() -> None:
    report = WorkerHealthReport("w1")
    snapshot = report.as_dict()
    assert snapshot["worker_id"] == "w1"
    assert (snapshot["jobs_processed"], snapshot["jobs_failed"], snapshot["jobs_cancelled"]) == (
        0,
        0,
        0,
    )
    assert snapshot["last_activity"] is None
    assert datetime.fromisoformat(snapshot["started_at"]).utcoffset() == timedelta(0)


def test_health_report_counts() -> None:
    report = WorkerHealthReport("w1")
    report.record_completed()
    report.record_completed()
    report.record_failed()
    report.record_cancelled()
    report.record_cancelled()
    report.record_cancelled()
    assert (report.jobs_processed, report.jobs_failed, report.jobs_cancelled) == (2, 1, 3)
    snapshot = report.as_dict()
    assert set(snapshot) == {
        "worker_id",
        "jobs_processed",
        "jobs_failed",
        "jobs_cancelled",
        "started_at",
        "last_activity",
    }
    assert (snapshot["jobs_processed"], snapshot["jobs_failed"], snapshot["jobs_cancelled"]) == (
        2,
        1,
        3,
    )
    last = datetime.fromisoformat(snapshot["last_activity"])
    assert last >= report.started_at


def test_health_report_counts_concurrently() -> None:
    report = WorkerHealthReport("w1")
    threads_n, per_thread = 8, 1000
    start = threading.Barrier(threads_n)

    def work() -> None:
        start.wait(DEADLINE)
        for _ in range(per_thread):
            report.record_completed()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE * 3)
    assert not any(thread.is_alive() for thread in threads)
    assert report.jobs_processed == threads_n * per_thread
    assert report.as_dict()["jobs_processed"] == threads_n * per_thread
    assert report.jobs_failed == 0


# -- AsyncWorkerConfig --------------------------------------------------------------------------

NUMERIC_FIELDS = [
    "max_workers",
    "poll_interval",
    "job_timeout",
    "job_ttl",
    "heartbeat_interval",
    "max_attempts",
    "dispatch_grace",
    "max_dispatches",
]
INTEGER_FIELDS = ["max_workers", "max_attempts", "max_dispatches"]


def test_config_defaults() -> None:
    config = AsyncWorkerConfig()
    assert config.as_dict() == {
        "enabled": True,
        "max_workers": 4,
        "poll_interval": 1.0,
        "job_timeout": 300.0,
        "job_ttl": 7 * 24 * 3600.0,
        "heartbeat_interval": 5.0,
        "max_attempts": 1,
        "dispatch_grace": 600.0,
        "max_dispatches": 10,
        "group_commit_ms": 2.0,
    }
    assert config.heartbeat_interval < config.job_timeout


def test_settings_take_every_engine_default_from_the_domain() -> None:
    from planq.worker_config.settings import load_settings

    settings = load_settings(database_url="sqlite:///x.db")
    assert settings.worker_config() == AsyncWorkerConfig()
    short = load_settings(database_url="sqlite:///x.db", job_timeout=1)
    assert short.worker_config().heartbeat_interval == pytest.approx(1 / 3)


def test_config_numeric_fields_cover_every_number() -> None:
    names = {f.name for f in dataclasses.fields(AsyncWorkerConfig)}
    # group_commit_ms: 0 is valid (off); its bounds are tests/unit/test_group_commit.py's
    assert names == {"enabled", "group_commit_ms", *NUMERIC_FIELDS}


def test_config_is_frozen() -> None:
    config = AsyncWorkerConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_workers = 9  # type: ignore[misc]
    assert config.max_workers == 4


def test_config_can_be_disabled() -> None:
    assert AsyncWorkerConfig(enabled=False).enabled is False


@pytest.mark.parametrize("enabled", [1, 0, "yes", "false", None])
def test_config_enabled_must_be_a_bool(enabled: object) -> None:
    with pytest.raises(TypeError, match="enabled"):
        AsyncWorkerConfig(enabled=enabled)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -1, -0.5])
@pytest.mark.parametrize("name", NUMERIC_FIELDS)
def test_config_numbers_must_be_positive(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=name):
        AsyncWorkerConfig(**{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (name, value)
        for name in NUMERIC_FIELDS
        for value in (True, "3", None)
        # None is heartbeat_interval's "not given": derived from job_timeout (tested below)
        if not (name == "heartbeat_interval" and value is None)
    ],
)
def test_config_numbers_must_be_numbers(name: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=name):
        AsyncWorkerConfig(**{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", INTEGER_FIELDS)
def test_config_counts_must_be_integers(name: str) -> None:
    with pytest.raises(ValueError, match="integer"):
        AsyncWorkerConfig(**{name: 2.5})  # type: ignore[arg-type]


@pytest.mark.parametrize(("heartbeat", "timeout"), [(10.0, 10.0), (30.0, 10.0), (300, 300)])
def test_config_heartbeat_must_be_below_job_timeout(heartbeat: float, timeout: float) -> None:
    with pytest.raises(ValueError, match="heartbeat_interval"):
        AsyncWorkerConfig(heartbeat_interval=heartbeat, job_timeout=timeout)


def test_config_accepts_small_positive_values() -> None:
    config = AsyncWorkerConfig(heartbeat_interval=0.01, job_timeout=0.02, poll_interval=0.001)
    assert (config.heartbeat_interval, config.job_timeout) == (0.01, 0.02)


# Scenario (async_jobs.feature): "an async worker is initialised with job_timeout 1".
def test_config_with_job_timeout_1_derives_a_heartbeat_below_it() -> None:
    config = AsyncWorkerConfig(job_timeout=1)
    assert config.job_timeout == 1
    assert 0 < config.heartbeat_interval < config.job_timeout
    assert config.heartbeat_interval == pytest.approx(1 / 3)
    assert config.as_dict()["heartbeat_interval"] == config.heartbeat_interval


@pytest.mark.parametrize(
    ("timeout", "heartbeat"),
    [(300.0, 5.0), (15.0, 5.0), (12.0, 4.0), (1.0, 1 / 3), (0.02, 0.02 / 3)],
)
def test_config_heartbeat_not_given_is_derived_from_job_timeout(
    timeout: float, heartbeat: float
) -> None:
    assert derive_heartbeat_interval(timeout) == pytest.approx(heartbeat)
    for config in (
        AsyncWorkerConfig(job_timeout=timeout),
        AsyncWorkerConfig(job_timeout=timeout, heartbeat_interval=None),
    ):
        assert config.heartbeat_interval == pytest.approx(heartbeat)
        assert config.heartbeat_interval < config.job_timeout


def test_config_explicit_contradictory_pair_is_a_typed_error() -> None:
    with pytest.raises(
        ConfigurationError, match=r"heartbeat_interval \(5.0\) must be below job_timeout \(1\)"
    ):
        AsyncWorkerConfig(job_timeout=1, heartbeat_interval=5.0)
    assert issubclass(ConfigurationError, ValueError) and issubclass(ConfigurationError, PlanqError)


def test_config_explicit_heartbeat_is_kept() -> None:
    assert AsyncWorkerConfig(job_timeout=1, heartbeat_interval=0.9).heartbeat_interval == 0.9
    assert AsyncWorkerConfig(heartbeat_interval=7.0).heartbeat_interval == 7.0


def test_config_invalid_job_timeout_is_refused_before_any_derivation() -> None:
    with pytest.raises(ConfigurationError, match="job_timeout"):
        AsyncWorkerConfig(job_timeout=0)
    with pytest.raises(ConfigurationError, match="job_timeout"):
        AsyncWorkerConfig(job_timeout="1")  # type: ignore[arg-type]


def test_config_replace_and_equality_still_work() -> None:
    config = AsyncWorkerConfig(job_timeout=1)
    assert config == AsyncWorkerConfig(job_timeout=1)
    assert (
        dataclasses.replace(config, max_workers=2).heartbeat_interval == config.heartbeat_interval
    )


# -- ids ------------------------------------------------------------------------------------


def test_new_id_is_a_unique_upper_case_ulid() -> None:
    ids = [new_id() for _ in range(500)]
    assert len(set(ids)) == 500
    assert all(is_ulid(i) and len(i) == 26 and i == i.upper() for i in ids)


def test_new_ids_sort_by_creation_time_across_milliseconds() -> None:
    first = new_id()
    deadline = time.monotonic() + DEADLINE
    second = new_id()
    while second[:10] == first[:10] and time.monotonic() < deadline:  # same millisecond
        second = new_id()
    assert first[:10] < second[:10]
    assert first < second


@pytest.mark.parametrize(
    "value",
    [
        "",
        "0" * 25,
        "0" * 27,
        "I" * 26,
        "U" * 26,
        "8" + "0" * 25,
        "01-" + "0" * 23,
        None,
        12,
        b"0" * 26,
    ],
)
def test_is_ulid_rejects(value: object) -> None:
    assert is_ulid(value) is False


@given(st.text(alphabet=ALPHABET, min_size=26, max_size=26) | st.builds(new_id))
def test_is_ulid_says_what_the_ulid_decoder_says(value: str) -> None:
    """The regex accepts exactly what ULID.from_str decodes (either case, 48-bit time)."""
    try:
        ULID.from_str(value)
        decodes = True
    except ValueError:
        decodes = False
    assert is_ulid(value) is decodes


def test_is_ulid_accepts_any_case() -> None:
    value = new_id()
    assert is_ulid(value)
    assert is_ulid(value.lower())
    assert is_ulid("0" * 26)


def test_require_ulid_returns_the_upper_case_id() -> None:
    value = new_id()
    assert require_ulid("job_id", value) == value
    assert require_ulid("job_id", value.lower()) == value


@pytest.mark.parametrize("value", ["nope", "", None, 5])
def test_require_ulid_raises_invalid_id_error(value: object) -> None:
    with pytest.raises(InvalidIdError) as info:
        require_ulid("plan_id", value)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, PlanqError)
    assert info.value.what == "plan_id"
    assert info.value.value == value
    assert "plan_id" in str(info.value)


# -- errors ---------------------------------------------------------------------------------


def test_error_retryability() -> None:
    assert ConcurrentUpdateError.retryable is True
    assert LedgerUnavailableError.retryable is True
    assert PlanNotFoundError.retryable is False
    assert InvalidIdError.retryable is False


def test_error_default_message_is_the_docstring() -> None:
    assert str(ConcurrentUpdateError()) == (
        "Someone else changed this row since it was read; read it again and retry."
    )
    assert "abc" in str(PlanNotFoundError("abc"))


def test_a_huge_bad_id_makes_a_short_error_message() -> None:
    with pytest.raises(InvalidIdError) as refused:
        require_ulid("job_id", "x" * 10_000)

    message = str(refused.value)
    assert message.startswith("job_id must be a ULID string, got 'xxx") and len(message) < 120
    assert refused.value.value == "x" * 10_000  # the value itself stays on the error
