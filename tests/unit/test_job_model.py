"""AsyncJob: defaults, validation, the job state machine and the CLI view (pure, no stores)."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from planq.domain.errors import InvalidJobTransitionError
from planq.domain.ids import is_ulid, new_id
from planq.domain.jobs import (
    MAX_ERROR_LENGTH,
    AsyncJob,
    AsyncJobStatus,
    can_transition_job,
    serialize_job_payload,
)
from planq.domain.plans import PlanPhase

S = AsyncJobStatus

#: The whole state machine, written out by hand (independently of domain.jobs' table).
EXPECTED_ALLOWED = frozenset(
    {
        (S.queued, S.running),
        (S.queued, S.cancelled),
        (S.queued, S.failed),  # planq's one addition: never picked up (docs/architecture.md)
        (S.running, S.succeeded),
        (S.running, S.failed),
        (S.running, S.cancelled),
    }
)
ALL_PAIRS = list(itertools.product(list(S), list(S)))
SECRET = "hunter2secret"


def make_job(status: AsyncJobStatus = S.queued, **fields: object) -> AsyncJob:
    """A job for a fresh plan in the execute phase, in the given status."""
    return AsyncJob(plan_id=new_id(), phase=PlanPhase.execute, status=status, **fields)


def running_job() -> AsyncJob:
    """A job claimed by worker w1."""
    job = make_job()
    job.mark_running("w1")
    return job


# -- defaults ------------------------------------------------------------------------------


def test_defaults() -> None:
    plan_id = new_id()
    job = AsyncJob(plan_id=plan_id, phase=PlanPhase.execute)
    assert is_ulid(job.job_id)
    assert job.job_id != plan_id
    assert job.status is S.queued
    assert job.schema_version == 1
    assert job.attempt == 1
    assert job.retry_of is None
    assert job.worker_id is None
    assert job.started_at is None
    assert job.finished_at is None
    assert job.last_heartbeat is None
    assert job.error_message is None
    assert job.dispatch_count == 0
    assert not job.is_terminal
    assert not job.is_running


def test_default_job_ids_are_unique() -> None:
    plan_id = new_id()
    ids = {AsyncJob(plan_id=plan_id, phase=PlanPhase.apply).job_id for _ in range(200)}
    assert len(ids) == 200


def test_default_payload_is_built_by_serialize_job_payload_and_parses() -> None:
    job = make_job()
    assert job.payload_json == serialize_job_payload(job.plan_id, "execute", 1)
    assert json.loads(job.payload_json) == {
        "schema_version": 1,
        "plan_id": job.plan_id,
        "phase": "execute",
    }
    assert job.payload == json.loads(job.payload_json)


def test_default_payload_carries_the_schema_version() -> None:
    job = make_job(schema_version=3)
    assert job.payload["schema_version"] == 3


def test_explicit_payload_is_kept() -> None:
    plan_id = new_id()
    text = serialize_job_payload(plan_id, "execute", 1, extra={"dry_run": True})
    job = AsyncJob(plan_id=plan_id, phase=PlanPhase.execute, payload_json=text)
    assert job.payload_json == text
    assert job.payload["dry_run"] is True


def test_payload_naming_another_plan_is_rejected() -> None:
    text = serialize_job_payload(new_id(), "execute")
    with pytest.raises(ValidationError, match="does not match"):
        make_job(payload_json=text)


def test_phase_accepts_its_string_value() -> None:
    job = AsyncJob(plan_id=new_id(), phase="strategize")
    assert job.phase is PlanPhase.strategize


def test_ids_are_normalised_to_upper_case() -> None:
    plan_id = new_id()
    job_id = new_id()
    job = AsyncJob(job_id=job_id.lower(), plan_id=plan_id.lower(), phase=PlanPhase.execute)
    assert job.job_id == job_id
    assert job.plan_id == plan_id


# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "plan_id", ["", "   ", "not-a-ulid", "0" * 25, "0" * 27, "I" * 26, "8" + "0" * 25, None, 42]
)
def test_plan_id_must_be_a_ulid(plan_id: object) -> None:
    with pytest.raises(ValidationError) as info:
        AsyncJob(plan_id=plan_id, phase=PlanPhase.execute)
    assert info.value.errors()[0]["loc"] == ("plan_id",)


@pytest.mark.parametrize("job_id", ["", "nope", "0" * 25])
def test_job_id_must_be_a_ulid(job_id: str) -> None:
    with pytest.raises(ValidationError) as info:
        AsyncJob(job_id=job_id, plan_id=new_id(), phase=PlanPhase.execute)
    assert info.value.errors()[0]["loc"] == ("job_id",)


def test_retry_of_must_be_a_ulid() -> None:
    with pytest.raises(ValidationError):
        make_job(retry_of="not-a-ulid")


@pytest.mark.parametrize("phase", ["", "Execute", "plan", "deploy", None, 1])
def test_phase_must_be_one_of_the_three(phase: object) -> None:
    with pytest.raises(ValidationError) as info:
        AsyncJob(plan_id=new_id(), phase=phase)
    assert info.value.errors()[0]["loc"] == ("phase",)


@pytest.mark.parametrize("version", [0, -1])
def test_schema_version_must_be_at_least_one(version: int) -> None:
    with pytest.raises(ValidationError) as info:
        make_job(schema_version=version)
    assert info.value.errors()[0]["loc"] == ("schema_version",)


@pytest.mark.parametrize("attempt", [0, -3])
def test_attempt_must_be_at_least_one(attempt: int) -> None:
    with pytest.raises(ValidationError) as info:
        make_job(attempt=attempt)
    assert info.value.errors()[0]["loc"] == ("attempt",)


@pytest.mark.parametrize(
    ("payload_json", "fragment"),
    [
        ("{not json", "JSON"),
        ("[1, 2, 3]", "JSON object"),
        ('"a string"', "JSON object"),
        ("42", "JSON object"),
        ("null", "JSON object"),
        ("   ", "JSON object"),
    ],
)
def test_payload_json_must_be_a_json_object(payload_json: str, fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        make_job(payload_json=payload_json)


def test_checkpoint_json_must_be_json() -> None:
    with pytest.raises(ValidationError):
        make_job(checkpoint_json="{broken")


def test_assignment_is_validated() -> None:
    job = make_job()
    with pytest.raises(ValidationError):
        job.attempt = 0
    assert job.attempt == 1


# -- timestamps ----------------------------------------------------------------------------


def test_default_created_at_is_aware_utc_and_recent() -> None:
    before = datetime.now(UTC)
    job = make_job()
    after = datetime.now(UTC)
    assert job.created_at.utcoffset() == timedelta(0)
    assert before <= job.created_at <= after


def test_naive_timestamps_are_taken_as_utc() -> None:
    naive = datetime(2024, 1, 2, 3, 4, 5)
    job = make_job(created_at=naive, dispatched_at=naive)
    assert job.created_at == naive.replace(tzinfo=UTC)
    assert job.created_at.tzinfo is not None
    assert job.created_at.utcoffset() == timedelta(0)
    assert job.dispatched_at == naive.replace(tzinfo=UTC)


def test_other_zones_are_converted_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    job = make_job(created_at=datetime(2024, 1, 2, 12, 0, tzinfo=plus_two))
    assert job.created_at.utcoffset() == timedelta(0)
    assert (job.created_at.hour, job.created_at.day) == (10, 2)


def test_assigned_naive_timestamp_is_normalised() -> None:
    job = make_job()
    job.started_at = datetime(2024, 5, 6, 7, 8, 9)
    assert job.started_at == datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


# -- the state machine ---------------------------------------------------------------------


def test_the_table_covers_all_25_pairs() -> None:
    assert len(ALL_PAIRS) == 25
    assert len(set(ALL_PAIRS)) == 25


@pytest.mark.parametrize(("src", "dst"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS])
def test_can_transition_job_matches_the_design(src: AsyncJobStatus, dst: AsyncJobStatus) -> None:
    assert can_transition_job(src, dst) is ((src, dst) in EXPECTED_ALLOWED)


@pytest.mark.parametrize(("src", "dst"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS])
def test_transition_to_matches_the_design(src: AsyncJobStatus, dst: AsyncJobStatus) -> None:
    job = make_job(status=src)
    if (src, dst) in EXPECTED_ALLOWED:
        job.transition_to(dst)
        assert job.status is dst
    else:
        with pytest.raises(InvalidJobTransitionError) as info:
            job.transition_to(dst)
        assert job.status is src
        assert info.value.job_id == job.job_id
        assert (info.value.from_status, info.value.to_status) == (src.value, dst.value)


@pytest.mark.parametrize("terminal", [S.succeeded, S.failed, S.cancelled])
def test_nothing_leaves_a_terminal_state(terminal: AsyncJobStatus) -> None:
    job = make_job(status=terminal)
    assert job.is_terminal
    for target in S:
        assert not can_transition_job(terminal, target)


@pytest.mark.parametrize("bad", ["queued", "running", None, 1])
def test_can_transition_job_rejects_non_status_from(bad: object) -> None:
    with pytest.raises(TypeError, match="from_status"):
        can_transition_job(bad, S.running)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["running", "cancelled", None, 1])
def test_can_transition_job_rejects_non_status_to(bad: object) -> None:
    with pytest.raises(TypeError, match="to_status"):
        can_transition_job(S.queued, bad)  # type: ignore[arg-type]


def test_transition_to_rejects_a_plain_string() -> None:
    job = make_job()
    with pytest.raises(TypeError):
        job.transition_to("running")  # type: ignore[arg-type]
    assert job.status is S.queued


# -- mark_* ----------------------------------------------------------------------------------


def test_mark_running_sets_worker_and_times() -> None:
    job = make_job()
    before = datetime.now(UTC)
    job.mark_running("worker-7")
    assert job.status is S.running
    assert job.is_running
    assert job.worker_id == "worker-7"
    assert job.started_at is not None
    assert before <= job.started_at <= datetime.now(UTC)
    assert job.last_heartbeat == job.started_at
    assert job.finished_at is None


@pytest.mark.parametrize("worker_id", ["", "   ", None, 7])
def test_mark_running_needs_a_worker_id(worker_id: object) -> None:
    job = make_job()
    with pytest.raises(ValueError, match="worker_id"):
        job.mark_running(worker_id)  # type: ignore[arg-type]
    assert job.status is S.queued
    assert job.worker_id is None
    assert job.started_at is None


def test_mark_running_twice_is_refused() -> None:
    job = running_job()
    with pytest.raises(InvalidJobTransitionError):
        job.mark_running("w2")
    assert job.worker_id == "w1"


def test_mark_succeeded_sets_finished_at() -> None:
    job = running_job()
    job.mark_succeeded()
    assert job.status is S.succeeded
    assert job.is_terminal
    assert not job.is_running
    assert job.finished_at is not None
    assert job.started_at is not None
    assert job.finished_at >= job.started_at
    assert job.error_message is None


def test_mark_succeeded_from_queued_is_refused() -> None:
    job = make_job()
    with pytest.raises(InvalidJobTransitionError):
        job.mark_succeeded()
    assert job.finished_at is None


def test_mark_failed_sets_finished_at_and_message() -> None:
    job = running_job()
    job.mark_failed("boom")
    assert job.status is S.failed
    assert job.finished_at is not None
    assert job.error_message == "boom"


def test_mark_failed_without_message() -> None:
    job = running_job()
    job.mark_failed()
    assert job.status is S.failed
    assert job.error_message is None


def test_mark_failed_redacts_secrets() -> None:
    job = running_job()
    job.mark_failed(f"connect failed password={SECRET}")
    assert job.error_message is not None
    assert SECRET not in job.error_message
    assert job.error_message.startswith("connect failed password=")


def test_mark_failed_bounds_the_message_length() -> None:
    job = running_job()
    job.mark_failed("x" * (MAX_ERROR_LENGTH * 3))
    assert job.error_message is not None
    assert len(job.error_message) <= MAX_ERROR_LENGTH
    assert job.error_message.startswith("xxxx")


def test_mark_failed_redacts_a_secret_past_the_length_bound() -> None:
    job = running_job()
    job.mark_failed("x" * (MAX_ERROR_LENGTH - 30) + f" password={SECRET} and more")
    assert job.error_message is not None
    assert len(job.error_message) <= MAX_ERROR_LENGTH
    assert "hunter2" not in job.error_message


def test_mark_failed_from_queued_is_a_job_never_picked_up() -> None:
    job = make_job()
    job.mark_failed("never picked up after 5 dispatches")
    assert job.status is S.failed and job.finished_at is not None
    assert job.error_message == "never picked up after 5 dispatches"


@pytest.mark.parametrize("start", [S.queued, S.running])
def test_mark_cancelled_from_queued_or_running(start: AsyncJobStatus) -> None:
    job = make_job(status=start)
    job.mark_cancelled()
    assert job.status is S.cancelled
    assert job.finished_at is not None
    assert job.is_terminal


def test_mark_cancelled_after_success_is_refused() -> None:
    job = running_job()
    job.mark_succeeded()
    finished = job.finished_at
    with pytest.raises(InvalidJobTransitionError):
        job.mark_cancelled()
    assert job.status is S.succeeded
    assert job.finished_at == finished


# -- heartbeat -------------------------------------------------------------------------------


def test_record_heartbeat_moves_last_heartbeat_forward() -> None:
    job = running_job()
    old = datetime(2000, 1, 1, tzinfo=UTC)
    job.last_heartbeat = old
    job.record_heartbeat()
    assert job.last_heartbeat is not None
    assert job.last_heartbeat > old


@pytest.mark.parametrize("status", [S.queued, S.succeeded, S.failed, S.cancelled])
def test_record_heartbeat_only_when_running(status: AsyncJobStatus) -> None:
    job = make_job(status=status)
    with pytest.raises(ValueError, match="not running"):
        job.record_heartbeat()
    assert job.last_heartbeat is None


# -- views -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "terminal", "running"),
    [
        (S.queued, False, False),
        (S.running, False, True),
        (S.succeeded, True, False),
        (S.failed, True, False),
        (S.cancelled, True, False),
    ],
)
def test_is_terminal_and_is_running(status: AsyncJobStatus, terminal: bool, running: bool) -> None:
    job = make_job(status=status)
    assert job.is_terminal is terminal
    assert job.is_running is running


def test_checkpoint_view() -> None:
    assert make_job().checkpoint is None
    assert make_job(checkpoint_json='{"cursor": 5}').checkpoint == {"cursor": 5}
    assert make_job(checkpoint_json="[1, 2]").checkpoint == {"value": [1, 2]}


REQUIRED_CLI_KEYS = {"job_id", "plan_id", "phase", "status", "worker_id", "attempt", "created_at"}


def test_as_cli_dict_for_a_queued_job() -> None:
    job = make_job()
    out = job.as_cli_dict()
    assert set(out) == REQUIRED_CLI_KEYS
    assert out["job_id"] == job.job_id
    assert out["plan_id"] == job.plan_id
    assert out["phase"] == "execute"
    assert out["status"] == "queued"
    assert out["worker_id"] is None
    assert out["attempt"] == 1
    assert datetime.fromisoformat(out["created_at"]) == job.created_at
    json.dumps(out)  # JSON-ready


def test_as_cli_dict_for_a_running_job_adds_started_at() -> None:
    job = running_job()
    out = job.as_cli_dict()
    assert set(out) == REQUIRED_CLI_KEYS | {"started_at"}
    assert out["status"] == "running"
    assert out["worker_id"] == "w1"
    assert datetime.fromisoformat(out["started_at"]) == job.started_at


def test_as_cli_dict_for_a_failed_job() -> None:
    job = running_job()
    job.mark_failed(f"token={SECRET}")
    out = job.as_cli_dict()
    assert set(out) == REQUIRED_CLI_KEYS | {"started_at", "finished_at", "error_message"}
    assert out["status"] == "failed"
    assert SECRET not in out["error_message"]
    finished = datetime.fromisoformat(out["finished_at"])
    assert finished == job.finished_at
    assert finished.utcoffset() == timedelta(0)
    json.dumps(out)


def test_as_cli_dict_for_a_succeeded_job_has_no_error_key() -> None:
    job = running_job()
    job.mark_succeeded()
    out = job.as_cli_dict()
    assert set(out) == REQUIRED_CLI_KEYS | {"started_at", "finished_at"}


def test_as_cli_dict_optional_progress_and_retry_of() -> None:
    original = new_id()
    job = make_job(status=S.running, progress=0.5, retry_of=original, attempt=2)
    out = job.as_cli_dict()
    assert out["progress"] == 0.5
    assert out["retry_of"] == original
    assert out["attempt"] == 2
