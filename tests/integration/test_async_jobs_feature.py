"""async_jobs.feature, part 1: the job model, the store, payloads, config, token, health.

One test per scenario, carrying its title as a `spec` marker and its steps as comments,
in the scenario's order and with its values. "an async job store is initialised" is the
`jobs` fixture: memory, SQLite and PostgreSQL. The worker scenarios are in
test_async_jobs_feature_worker.py. tests/unit/test_spec_coverage.py checks that every
scenario has a test.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from planq.domain.cancellation import CancellationToken
from planq.domain.clock import utcnow
from planq.domain.config import AsyncWorkerConfig
from planq.domain.errors import (
    ConcurrentUpdateError,
    InvalidJobTransitionError,
    InvalidPlanTransitionError,
    PlanNotFoundError,
)
from planq.domain.health import WorkerHealthReport
from planq.domain.ids import new_id
from planq.domain.jobs import (
    AsyncJob,
    AsyncJobStatus,
    can_transition_job,
    deserialize_job_payload,
    serialize_job_payload,
)
from planq.domain.lifecycle import PlanLifecycleService
from planq.domain.plans import Plan, PlanPhase, PlanStatus
from planq.domain.ports import JobStore, PlanStore
from planq.store.database import Database
from planq.store.memory import InMemoryJobStore, InMemoryPlanStore
from planq.store.models import AsyncJobModel
from tests.feature_support import PLAN_ID, create_job, create_running_job, stored

S = AsyncJobStatus

# ---- AsyncJob Domain Model ----


@pytest.mark.spec("async_jobs: Create an async job with default values")
def test_create_an_async_job_with_default_values(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a new async job for plan "01HXYZ01HXYZ01HXYZ01HXYZ01" phase "execute"
    job = create_job(jobs, PLAN_ID, "execute")
    # Then the async job status should be "queued"
    assert stored(jobs, job).status == "queued"
    # And the async job phase should be "execute"
    assert stored(jobs, job).phase == "execute"
    # And the async job schema_version should be 1
    assert stored(jobs, job).schema_version == 1


@pytest.mark.spec("async_jobs: AsyncJob status transitions follow the state machine")
def test_status_transitions_follow_the_state_machine(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a new async job for plan "01HXYZ01HXYZ01HXYZ01HXYZ01" phase "execute"
    job = create_job(jobs, PLAN_ID, "execute")
    # When I mark the async job as running with worker "worker-001"
    job.mark_running("worker-001")
    jobs.update(job)
    # Then the async job status should be "running"
    assert stored(jobs, job).status == "running"
    # And the async job worker_id should be "worker-001"
    assert stored(jobs, job).worker_id == "worker-001"
    # And the async job started_at should be set
    assert stored(jobs, job).started_at is not None


@pytest.mark.spec("async_jobs: AsyncJob transition from running to succeeded")
def test_transition_from_running_to_succeeded(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a running async job
    job = create_running_job(jobs)
    # When I mark the async job as succeeded
    job.mark_succeeded()
    jobs.update(job)
    # Then the async job status should be "succeeded"
    assert stored(jobs, job).status == "succeeded"
    # And the async job finished_at should be set
    assert stored(jobs, job).finished_at is not None


@pytest.mark.spec("async_jobs: AsyncJob transition from running to failed")
def test_transition_from_running_to_failed(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a running async job
    job = create_running_job(jobs)
    # When I mark the async job as failed
    job.mark_failed()
    jobs.update(job)
    # Then the async job status should be "failed"
    assert stored(jobs, job).status == "failed"
    # And the async job finished_at should be set
    assert stored(jobs, job).finished_at is not None


@pytest.mark.spec("async_jobs: AsyncJob transition from queued to cancelled")
def test_transition_from_queued_to_cancelled(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a new async job for plan "01HXYZ01HXYZ01HXYZ01HXYZ01" phase "execute"
    job = create_job(jobs, PLAN_ID, "execute")
    # When I mark the async job as cancelled
    job.mark_cancelled()
    jobs.update(job)
    # Then the async job status should be "cancelled"
    assert stored(jobs, job).status == "cancelled"
    # And the async job finished_at should be set
    assert stored(jobs, job).finished_at is not None


@pytest.mark.spec("async_jobs: AsyncJob transition from running to cancelled")
def test_transition_from_running_to_cancelled(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a running async job
    job = create_running_job(jobs)
    # When I mark the async job as cancelled
    job.mark_cancelled()
    jobs.update(job)
    # Then the async job status should be "cancelled"
    assert stored(jobs, job).status == "cancelled"


@pytest.mark.spec("async_jobs: Invalid transition from queued to succeeded raises error")
def test_invalid_transition_from_queued_to_succeeded(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a new async job for plan "01HXYZ01HXYZ01HXYZ01HXYZ01" phase "execute"
    job = create_job(jobs, PLAN_ID, "execute")
    # When I try to mark the async job as succeeded
    # Then an InvalidJobTransitionError should be raised
    with pytest.raises(InvalidJobTransitionError):
        job.mark_succeeded()
    assert stored(jobs, job).status is S.queued  # and nothing changed


@pytest.mark.spec("async_jobs: Invalid transition from succeeded to running raises error")
def test_invalid_transition_from_succeeded_to_running(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a running async job
    job = create_running_job(jobs)
    # And I mark the async job as succeeded
    job.mark_succeeded()
    jobs.update(job)
    # When I try to mark the async job as running with worker "worker-002"
    # Then an InvalidJobTransitionError should be raised
    with pytest.raises(InvalidJobTransitionError):
        job.mark_running("worker-002")
    assert stored(jobs, job).status is S.succeeded
    assert stored(jobs, job).worker_id == "worker-001"


@pytest.mark.spec("async_jobs: Invalid transition from failed raises error")
def test_invalid_transition_from_failed(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a running async job
    job = create_running_job(jobs)
    # And I mark the async job as failed
    job.mark_failed()
    jobs.update(job)
    # When I try to mark the async job as succeeded
    # Then an InvalidJobTransitionError should be raised
    with pytest.raises(InvalidJobTransitionError):
        job.mark_succeeded()
    assert stored(jobs, job).status is S.failed


# ---- Payload Serialization ----


@pytest.mark.spec("async_jobs: Serialize and deserialize job payload with schema version")
def test_serialize_and_deserialize_job_payload_with_schema_version() -> None:
    # When I serialize a job payload for plan "01HXYZ01HXYZ01HXYZ01HXYZ01" phase "execute"
    text = serialize_job_payload(PLAN_ID, "execute")
    # Then the serialized payload should contain schema_version 1
    assert json.loads(text)["schema_version"] == 1
    # And the deserialized payload should match the original
    assert deserialize_job_payload(text) == {
        "schema_version": 1,
        "plan_id": PLAN_ID,
        "phase": "execute",
    }


@pytest.mark.spec("async_jobs: Serialize payload with extra data")
def test_serialize_payload_with_extra_data() -> None:
    # When I serialize a job payload with extra data
    extra = {"dry_run": True, "targets": ["a", "b"]}
    text = serialize_job_payload(PLAN_ID, "execute", extra=extra)
    # Then the serialized payload should contain the extra data
    data = json.loads(text)
    assert data["dry_run"] is True and data["targets"] == ["a", "b"]


@pytest.mark.spec("async_jobs: Deserialize invalid JSON raises error")
def test_deserialize_invalid_json_raises_error() -> None:
    # When I try to deserialize invalid JSON
    # Then a ValueError should be raised for async deserialize
    with pytest.raises(ValueError, match="not valid JSON"):
        deserialize_job_payload("{not json")


# ---- AsyncWorkerConfig Validation ----


@pytest.mark.spec("async_jobs: AsyncWorkerConfig rejects invalid max_workers")
def test_config_rejects_invalid_max_workers() -> None:
    # When I try to create AsyncWorkerConfig with max_workers 0
    # Then a ValueError should be raised for config
    with pytest.raises(ValueError, match="max_workers"):
        AsyncWorkerConfig(max_workers=0)


@pytest.mark.spec("async_jobs: AsyncWorkerConfig rejects invalid poll_interval")
def test_config_rejects_invalid_poll_interval() -> None:
    # When I try to create AsyncWorkerConfig with poll_interval 0
    # Then a ValueError should be raised for config
    with pytest.raises(ValueError, match="poll_interval"):
        AsyncWorkerConfig(poll_interval=0)


# ---- InMemoryJobStore ----


@pytest.mark.spec("async_jobs: Job store rejects duplicate job IDs")
def test_job_store_rejects_duplicate_job_ids(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a new async job for plan "01HXYZ01HXYZ01HXYZ01HXYZ01" phase "execute"
    job = create_job(jobs, PLAN_ID, "execute")
    # When I try to add the same job again
    # Then a ValueError should be raised for duplicate job
    with pytest.raises(ValueError, match=job.job_id):
        jobs.add(job)
    assert jobs.count() == 1


@pytest.mark.spec("async_jobs: Job store lists jobs by status")
def test_job_store_lists_jobs_by_status(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create 3 queued async jobs
    created = [create_job(jobs) for _ in range(3)]
    # When I list jobs by status "queued"
    listed = jobs.list_by_status(S("queued"))
    # Then the job list should have 3 entries
    assert len(listed) == 3
    assert {j.job_id for j in listed} == {j.job_id for j in created}


@pytest.mark.spec("async_jobs: AsyncJob heartbeat recording")
def test_heartbeat_recording(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a running async job
    job = create_running_job(jobs)
    before = stored(jobs, job).last_heartbeat
    assert before is not None
    # When I record a heartbeat on the async job
    job.record_heartbeat()
    jobs.update(job)
    # Then the async job last_heartbeat should be updated
    after = stored(jobs, job).last_heartbeat
    assert after is not None and after > before


@pytest.mark.spec("async_jobs: Heartbeat on non-running job raises error")
def test_heartbeat_on_non_running_job_raises_error(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a new async job for plan "01HXYZ01HXYZ01HXYZ01HXYZ01" phase "execute"
    job = create_job(jobs, PLAN_ID, "execute")
    # When I try to record a heartbeat on the async job
    # Then a ValueError should be raised for heartbeat
    with pytest.raises(ValueError, match="not running"):
        job.record_heartbeat()
    assert stored(jobs, job).last_heartbeat is None


@pytest.mark.spec("async_jobs: AsyncJob is_terminal property")
def test_is_terminal_property(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a running async job
    job = create_running_job(jobs)
    # When I mark the async job as succeeded
    job.mark_succeeded()
    jobs.update(job)
    # Then the async job should be terminal
    assert stored(jobs, job).is_terminal


@pytest.mark.spec("async_jobs: AsyncJob is_running property")
def test_is_running_property(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a running async job
    job = create_running_job(jobs)
    # Then the async job should be running
    assert stored(jobs, job).is_running


@pytest.mark.spec("async_jobs: AsyncJob as_cli_dict returns expected keys")
def test_as_cli_dict_returns_expected_keys(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a running async job
    job = create_running_job(jobs)
    # When I get the async job CLI dict
    cli = stored(jobs, job).as_cli_dict()
    # Then the async CLI dict should contain key "job_id"
    assert "job_id" in cli
    # And the async CLI dict should contain key "status"
    assert "status" in cli
    # And the async CLI dict should contain key "worker_id"
    assert "worker_id" in cli
    assert (cli["job_id"], cli["status"], cli["worker_id"]) == (job.job_id, "running", "worker-001")


@pytest.mark.spec("async_jobs: Invalid phase raises validation error")
def test_invalid_phase_raises_validation_error() -> None:
    # When I try to create an async job with phase "invalid"
    # Then a validation error should be raised for phase
    with pytest.raises(ValidationError, match="phase"):
        AsyncJob(plan_id=PLAN_ID, phase="invalid")


@pytest.mark.spec("async_jobs: Invalid payload JSON raises validation error")
def test_invalid_payload_json_raises_validation_error() -> None:
    # When I try to create an async job with invalid payload JSON
    # Then a validation error should be raised for payload
    with pytest.raises(ValidationError, match="payload"):
        AsyncJob(plan_id=PLAN_ID, phase=PlanPhase.execute, payload_json='{"plan_id": ')


@pytest.mark.spec("async_jobs: Mark running with empty worker_id raises error")
def test_mark_running_with_empty_worker_id_raises_error(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a new async job for plan "01HXYZ01HXYZ01HXYZ01HXYZ01" phase "execute"
    job = create_job(jobs, PLAN_ID, "execute")
    # When I try to mark the async job as running with an empty worker_id
    # Then a ValueError should be raised for worker_id
    with pytest.raises(ValueError, match="worker_id"):
        job.mark_running("")
    assert stored(jobs, job).status is S.queued


# ---- CancellationToken, WorkerHealthReport ----


@pytest.mark.spec("async_jobs: CancellationToken cooperative cancellation")
def test_cancellation_token_cooperative_cancellation() -> None:
    # Given a cancellation token is created
    token = CancellationToken()
    # When I cancel the async token
    token.cancel()
    # Then the token should be cancelled
    assert token.is_cancelled
    # And the token wait should return True
    assert token.wait(timeout=1.0) is True


@pytest.mark.spec("async_jobs: CancellationToken reset")
def test_cancellation_token_reset() -> None:
    # Given a cancellation token is created
    token = CancellationToken()
    # And I cancel the async token
    token.cancel()
    # When I reset the token
    token.reset()
    # Then the token should not be cancelled
    assert not token.is_cancelled
    assert token.wait(timeout=0.01) is False


@pytest.mark.spec("async_jobs: WorkerHealthReport tracks jobs")
def test_worker_health_report_tracks_jobs() -> None:
    # Given a worker health report for "test-worker"
    report = WorkerHealthReport("test-worker")
    # When I record 3 completed jobs and 1 failed job
    for _ in range(3):
        report.record_completed()
    report.record_failed()
    # Then the health report should show 3 processed and 1 failed
    snapshot = report.as_dict()
    assert (snapshot["jobs_processed"], snapshot["jobs_failed"]) == (3, 1)
    assert snapshot["worker_id"] == "test-worker"


@pytest.mark.spec("async_jobs: Serialize payload with empty plan_id raises error")
def test_serialize_payload_with_empty_plan_id_raises_error() -> None:
    # When I try to serialize a payload with empty plan_id
    # Then a ValueError should be raised for serialize
    with pytest.raises(ValueError, match="plan_id"):
        serialize_job_payload("", "execute")


@pytest.mark.spec("async_jobs: Deserialize empty payload raises error")
def test_deserialize_empty_payload_raises_error() -> None:
    # When I try to deserialize an empty payload
    # Then a ValueError should be raised for deserialize
    with pytest.raises(ValueError, match="empty"):
        deserialize_job_payload("")


@pytest.mark.spec("async_jobs: can_transition_job with invalid types raises TypeError")
def test_can_transition_job_with_invalid_types_raises_type_error() -> None:
    # When I call can_transition_job with invalid types
    # Then a TypeError should be raised for async transition
    with pytest.raises(TypeError, match="AsyncJobStatus"):
        can_transition_job("queued", 42)  # type: ignore[arg-type]


# ---- Additional Coverage: Validation Guards ----


@pytest.mark.spec("async_jobs: WorkerHealthReport with empty worker_id raises error")
def test_worker_health_report_with_empty_worker_id_raises_error() -> None:
    # When I try to create a WorkerHealthReport with empty worker_id
    # Then a ValueError should be raised for empty worker_id
    with pytest.raises(ValueError, match="worker_id"):
        WorkerHealthReport("")


@pytest.mark.spec("async_jobs: AsyncWorkerConfig with invalid enabled type raises error")
def test_config_with_invalid_enabled_type_raises_error() -> None:
    # When I try to create AsyncWorkerConfig with non-bool enabled
    # Then a TypeError should be raised for async config enabled
    with pytest.raises(TypeError, match="enabled"):
        AsyncWorkerConfig(enabled="yes")  # type: ignore[arg-type]


@pytest.mark.spec("async_jobs: AsyncWorkerConfig with invalid job_timeout raises error")
def test_config_with_invalid_job_timeout_raises_error() -> None:
    # When I try to create AsyncWorkerConfig with job_timeout 0
    # Then a ValueError should be raised for async config validation
    with pytest.raises(ValueError, match="job_timeout"):
        AsyncWorkerConfig(job_timeout=0)


@pytest.mark.spec("async_jobs: AsyncWorkerConfig with invalid job_ttl raises error")
def test_config_with_invalid_job_ttl_raises_error() -> None:
    # When I try to create AsyncWorkerConfig with job_ttl 0
    # Then a ValueError should be raised for async config validation
    with pytest.raises(ValueError, match="job_ttl"):
        AsyncWorkerConfig(job_ttl=0)


@pytest.mark.spec("async_jobs: InMemoryJobStore add with non-AsyncJob raises error")
def test_store_add_with_non_async_job_raises_error(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # When I try to add a non-AsyncJob to the store
    # Then a TypeError should be raised for async store type
    with pytest.raises(TypeError):
        jobs.add({"job_id": new_id(), "plan_id": PLAN_ID})  # type: ignore[arg-type]
    assert jobs.count() == 0


@pytest.mark.spec("async_jobs: InMemoryJobStore get with empty job_id raises error")
def test_store_get_with_empty_job_id_raises_error(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # When I try to get a job with empty job_id
    # Then a ValueError should be raised for async store get
    with pytest.raises(ValueError):
        jobs.get("")


@pytest.mark.spec("async_jobs: InMemoryJobStore list_by_status with invalid type raises error")
def test_store_list_by_status_with_invalid_type_raises_error(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # When I try to list jobs by invalid status type
    # Then a TypeError should be raised for async store type
    with pytest.raises(TypeError):
        jobs.list_by_status("queued")  # type: ignore[arg-type]


@pytest.mark.spec("async_jobs: InMemoryJobStore update with non-AsyncJob raises error")
def test_store_update_with_non_async_job_raises_error(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # When I try to update with a non-AsyncJob
    # Then a TypeError should be raised for async store type
    with pytest.raises(TypeError):
        jobs.update("not a job")  # type: ignore[arg-type]


@pytest.mark.spec("async_jobs: InMemoryJobStore update with non-existent job raises error")
def test_store_update_with_non_existent_job_raises_error(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # When I try to update a non-existent job
    # Then a ValueError should be raised for async store update
    ghost = AsyncJob(plan_id=PLAN_ID, phase=PlanPhase.execute)
    with pytest.raises(ValueError, match=ghost.job_id):
        jobs.update(ghost)
    assert jobs.get(ghost.job_id) is None  # nothing was written


@pytest.mark.spec("async_jobs: InMemoryJobStore remove with empty job_id raises error")
def test_store_remove_with_empty_job_id_raises_error(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # When I try to remove a job with empty job_id
    # Then a ValueError should be raised for async store remove
    with pytest.raises(ValueError):
        jobs.remove("")


@pytest.mark.spec("async_jobs: AsyncJob payload property deserializes JSON")
def test_payload_property_deserializes_json(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a new async job for plan "01HXYZ01HXYZ01HXYZ01HXYZ01" phase "execute"
    job = create_job(jobs, PLAN_ID, "execute")
    # Then the async job payload property should return a dict
    payload = stored(jobs, job).payload
    assert isinstance(payload, dict)
    assert payload == {"schema_version": 1, "plan_id": PLAN_ID, "phase": "execute"}


@pytest.mark.spec("async_jobs: AsyncJob validate_payload_json rejects invalid JSON")
def test_validate_payload_json_rejects_invalid_json() -> None:
    # When I try to create an async job with payload_json "not-json{"
    # Then a validation error should be raised for payload
    with pytest.raises(ValidationError, match="payload"):
        AsyncJob(plan_id=PLAN_ID, phase=PlanPhase.execute, payload_json="not-json{")


@pytest.mark.spec("async_jobs: AsyncJob as_cli_dict includes optional fields when set")
def test_as_cli_dict_includes_optional_fields_when_set(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I create a running async job
    job = create_running_job(jobs)
    # And I mark the async job as succeeded
    job.mark_succeeded()
    jobs.update(job)
    # When I get the async job CLI dict
    cli = stored(jobs, job).as_cli_dict()
    # Then the async CLI dict should contain key "started_at"
    assert "started_at" in cli
    # And the async CLI dict should contain key "finished_at"
    assert "finished_at" in cli


# ---- Review Fixes: DB model round-trip (T1) ----


@pytest.fixture(params=["sqlite", "postgres"])
def sql_database(request: pytest.FixtureRequest) -> Database:
    """The two SQL ledgers (the model is SQLAlchemy's, so no memory variant)."""
    fixture = "sqlite_database" if request.param == "sqlite" else "pg_database"
    db: Database = request.getfixturevalue(fixture)
    return db


def _model_row(**overrides: Any) -> AsyncJobModel:
    values: dict[str, Any] = {
        "job_id": new_id(),
        "plan_id": PLAN_ID,
        "phase": "execute",
        "status": "queued",
        "schema_version": 1,
        "payload_json": serialize_job_payload(PLAN_ID, "execute"),
        "created_at": utcnow(),
        "attempt": 1,
        "dispatch_count": 0,
    }
    values.update(overrides)
    return AsyncJobModel(**values)


@pytest.mark.spec("async_jobs: AsyncJobModel round-trip through SQLAlchemy")
def test_async_job_model_round_trip_through_sqlalchemy(sql_database: Database) -> None:
    # When I create and persist an AsyncJobModel to the database
    row = _model_row()
    expected = {c.name: getattr(row, c.name) for c in AsyncJobModel.__table__.columns}
    with Session(sql_database.engine) as session, session.begin():
        session.add(row)
    # Then the AsyncJobModel should be retrievable with correct fields
    with Session(sql_database.engine) as session:
        got = session.get(AsyncJobModel, expected["job_id"])
        assert got is not None
        assert {c: getattr(got, c) for c in expected} == expected
    # And the database CHECK constraint should reject invalid status
    with (
        pytest.raises(IntegrityError, match="status"),
        Session(sql_database.engine) as session,
        session.begin(),
    ):
        session.add(_model_row(status="exploded"))
    with Session(sql_database.engine) as session:
        assert session.query(AsyncJobModel).count() == 1  # the invalid row was not written


# ---- Coverage: Job Store Operations ----


@pytest.mark.spec("async_jobs: Job store list_all returns all jobs regardless of status")
def test_job_store_list_all_returns_all_jobs_regardless_of_status(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And I add 3 jobs in mixed statuses to the store
    queued = AsyncJob(plan_id=PLAN_ID, phase=PlanPhase.execute)
    running = AsyncJob(plan_id=PLAN_ID, phase=PlanPhase.execute)
    running.mark_running("worker-001")
    done = AsyncJob(plan_id=PLAN_ID, phase=PlanPhase.execute)
    done.mark_running("worker-001")
    done.mark_succeeded()
    for job in (queued, running, done):
        jobs.add(job)
    # When I call list_all on the job store
    listed = jobs.list_all()
    # Then the store should return 3 jobs
    assert len(listed) == 3
    assert {j.status for j in listed} == {S.queued, S.running, S.succeeded}
    # And the store count should be 3
    assert jobs.count() == 3


@pytest.mark.spec("async_jobs: Job store remove deletes a job and count reflects it")
def test_job_store_remove_deletes_a_job_and_count_reflects_it(jobs: JobStore) -> None:
    # Given an async job store is initialised
    # And a queued async job exists in the store
    job = create_job(jobs)
    # When I remove the job from the store
    assert jobs.remove(job.job_id) is True
    # Then the store count should be 0
    assert jobs.count() == 0


# ---- Coverage: Domain Model Validators ----


@pytest.mark.spec("async_jobs: transition_to rejects non-AsyncJobStatus target")
def test_transition_to_rejects_non_async_job_status_target() -> None:
    # Given a queued async job exists standalone
    job = AsyncJob(plan_id=PLAN_ID, phase=PlanPhase.execute)
    # When I try to transition_to with a string instead of enum
    # Then an async TypeError should be raised
    with pytest.raises(TypeError, match="AsyncJobStatus"):
        job.transition_to("running")  # type: ignore[arg-type]
    assert job.status is S.queued


@pytest.mark.spec("async_jobs: can_transition_job rejects non-enum to_status argument")
def test_can_transition_job_rejects_non_enum_to_status_argument() -> None:
    # When I call can_transition_job with a string to_status
    # Then an async TypeError should be raised
    with pytest.raises(TypeError, match="to_status"):
        can_transition_job(S.queued, "running")  # type: ignore[arg-type]


@pytest.mark.spec("async_jobs: serialize_job_payload rejects empty phase")
def test_serialize_job_payload_rejects_empty_phase() -> None:
    # When I try to serialize a payload with an empty phase
    # Then an async ValueError should be raised matching "phase"
    with pytest.raises(ValueError, match="phase"):
        serialize_job_payload(PLAN_ID, "")


@pytest.mark.spec("async_jobs: serialize_job_payload rejects zero schema version")
def test_serialize_job_payload_rejects_zero_schema_version() -> None:
    # When I try to serialize a payload with schema_version 0
    # Then an async ValueError should be raised matching "schema_version"
    with pytest.raises(ValueError, match="schema_version"):
        serialize_job_payload(PLAN_ID, "execute", schema_version=0)


@pytest.mark.spec("async_jobs: deserialize_job_payload rejects non-object JSON")
def test_deserialize_job_payload_rejects_non_object_json() -> None:
    # When I try to deserialize the JSON string "[1,2,3]"
    # Then an async ValueError should be raised matching "JSON object"
    with pytest.raises(ValueError, match="JSON object"):
        deserialize_job_payload("[1,2,3]")


@pytest.mark.spec("async_jobs: CLI dict includes error_message for failed job")
def test_cli_dict_includes_error_message_for_failed_job() -> None:
    # Given a queued async job exists standalone
    job = AsyncJob(plan_id=PLAN_ID, phase=PlanPhase.execute)
    # When I mark the async job as running with worker "w-err"
    job.mark_running("w-err")
    # And I mark the async job as failed with error "SomeError: detail"
    job.mark_failed("SomeError: detail")
    # And I get the async job CLI dict
    cli = job.as_cli_dict()
    # Then the async CLI dict should contain key "error_message"
    assert "error_message" in cli
    # And the async CLI dict error_message should be "SomeError: detail"
    assert cli["error_message"] == "SomeError: detail"


# ---- Review Fix: Plan lifecycle async wiring (P1) ----


def plan_in(plans: PlanStore, phase: PlanPhase, status: PlanStatus) -> Plan:
    """And a plan in <Phase>/<STATUS> state exists."""
    plan = Plan.with_steps(["only-step"])
    plan.phase, plan.status = phase, status
    plans.add(plan)
    return plan


def assert_plan_state(plans: PlanStore, plan: Plan, phase: PlanPhase, status: PlanStatus) -> None:
    """Then the plan should be in <Phase>/<STATUS> state."""
    now = plans.get(plan.plan_id)
    assert now is not None
    assert (now.phase, now.status) == (phase, status)


def jobs_for(jobs: JobStore, phase: str) -> list[AsyncJob]:
    return [j for j in jobs.list_all() if j.phase == phase]


@pytest.mark.spec("async_jobs: execute_plan enqueues async job when async is enabled")
def test_execute_plan_enqueues_async_job_when_async_is_enabled(
    jobs: JobStore, plans: PlanStore
) -> None:
    # Given a plan lifecycle service with async enabled and a job store
    service = PlanLifecycleService(plans, jobs, AsyncWorkerConfig(enabled=True))
    # And a plan in Strategize/COMPLETE state exists
    plan = plan_in(plans, PlanPhase.strategize, PlanStatus.complete)
    # When I execute the plan via the lifecycle service
    service.execute_plan(plan.plan_id)
    # Then the plan should be in Execute/QUEUED state
    assert_plan_state(plans, plan, PlanPhase.execute, PlanStatus.queued)
    # And the job store should contain 1 async job for phase "execute"
    queued = jobs_for(jobs, "execute")
    assert len(queued) == 1 and jobs.count() == 1
    # And the enqueued job plan_id should match the plan
    assert queued[0].plan_id == plan.plan_id


@pytest.mark.spec("async_jobs: apply_plan enqueues async job when async is enabled")
def test_apply_plan_enqueues_async_job_when_async_is_enabled(
    jobs: JobStore, plans: PlanStore
) -> None:
    # Given a plan lifecycle service with async enabled and a job store
    service = PlanLifecycleService(plans, jobs, AsyncWorkerConfig(enabled=True))
    # And a plan in Execute/COMPLETE state exists
    plan = plan_in(plans, PlanPhase.execute, PlanStatus.complete)
    # When I apply the plan via the lifecycle service
    service.apply_plan(plan.plan_id)
    # Then the plan should be in Apply/QUEUED state
    assert_plan_state(plans, plan, PlanPhase.apply, PlanStatus.queued)
    # And the job store should contain 1 async job for phase "apply"
    queued = jobs_for(jobs, "apply")
    assert len(queued) == 1 and jobs.count() == 1
    # And the enqueued job plan_id should match the plan
    assert queued[0].plan_id == plan.plan_id


@pytest.mark.spec("async_jobs: execute_plan does not enqueue when async is disabled")
def test_execute_plan_does_not_enqueue_when_async_is_disabled(
    jobs: JobStore, plans: PlanStore
) -> None:
    # Given a plan lifecycle service with async disabled
    service = PlanLifecycleService(plans, jobs, AsyncWorkerConfig(enabled=False))
    # And a plan in Strategize/COMPLETE state exists
    plan = plan_in(plans, PlanPhase.strategize, PlanStatus.complete)
    # When I execute the plan via the lifecycle service
    service.execute_plan(plan.plan_id)
    # Then the plan should be in Execute/QUEUED state
    assert_plan_state(plans, plan, PlanPhase.execute, PlanStatus.queued)
    # And no async jobs should be in the job store
    assert jobs.list_all() == [] and jobs.count() == 0


@pytest.mark.spec("async_jobs: apply_plan does not enqueue when async is disabled")
def test_apply_plan_does_not_enqueue_when_async_is_disabled(
    jobs: JobStore, plans: PlanStore
) -> None:
    # Given a plan lifecycle service with async disabled
    service = PlanLifecycleService(plans, jobs, AsyncWorkerConfig(enabled=False))
    # And a plan in Execute/COMPLETE state exists
    plan = plan_in(plans, PlanPhase.execute, PlanStatus.complete)
    # When I apply the plan via the lifecycle service
    service.apply_plan(plan.plan_id)
    # Then the plan should be in Apply/QUEUED state
    assert_plan_state(plans, plan, PlanPhase.apply, PlanStatus.queued)
    # And no async jobs should be in the job store
    assert jobs.list_all() == [] and jobs.count() == 0


@pytest.mark.spec("async_jobs: execute_plan does not enqueue when no job store is configured")
def test_execute_plan_does_not_enqueue_when_no_job_store_is_configured(
    jobs: JobStore, plans: PlanStore
) -> None:
    # Given a plan lifecycle service with async enabled but no job store
    service = PlanLifecycleService(plans, None, AsyncWorkerConfig(enabled=True))
    # And a plan in Strategize/COMPLETE state exists
    plan = plan_in(plans, PlanPhase.strategize, PlanStatus.complete)
    # When I execute the plan via the lifecycle service
    queued = service.execute_plan(plan.plan_id)
    # Then the plan should be in Execute/QUEUED state
    assert_plan_state(plans, plan, PlanPhase.execute, PlanStatus.queued)
    assert queued.job is None and jobs.count() == 0  # no job anywhere (same database)


# The same two scenarios composed as the spec composes them: the lifecycle's plan store and
# its job store are two independent stores (not one ledger), `PlanLifecycleService(
# InMemoryPlanStore(), jobs=<a job store>)`, with the job store on each backend.


@pytest.mark.spec("async_jobs: execute_plan enqueues async job when async is enabled")
def test_execute_plan_enqueues_async_job_with_two_independent_stores(jobs: JobStore) -> None:
    # Given a plan lifecycle service with async enabled and a job store
    plans = InMemoryPlanStore()
    service = PlanLifecycleService(plans, jobs=jobs)
    assert service.config.enabled
    # And a plan in Strategize/COMPLETE state exists
    plan = plan_in(plans, PlanPhase.strategize, PlanStatus.complete)
    # When I execute the plan via the lifecycle service
    queued = service.execute_plan(plan.plan_id)
    # Then the plan should be in Execute/QUEUED state
    assert_plan_state(plans, plan, PlanPhase.execute, PlanStatus.queued)
    # And the job store should contain 1 async job for phase "execute"
    in_store = jobs_for(jobs, "execute")
    assert len(in_store) == 1 and jobs.count() == 1
    # And the enqueued job plan_id should match the plan
    assert in_store[0].plan_id == plan.plan_id
    assert queued.job is not None and queued.job.job_id == in_store[0].job_id
    assert queued.plan == plans.get(plan.plan_id)  # the plan as saved (version bumped once)
    assert queued.plan.version == plan.version + 1


@pytest.mark.spec("async_jobs: apply_plan enqueues async job when async is enabled")
def test_apply_plan_enqueues_async_job_with_two_independent_stores(jobs: JobStore) -> None:
    # Given a plan lifecycle service with async enabled and a job store
    plans = InMemoryPlanStore()
    service = PlanLifecycleService(plans, jobs=jobs)
    # And a plan in Execute/COMPLETE state exists
    plan = plan_in(plans, PlanPhase.execute, PlanStatus.complete)
    # When I apply the plan via the lifecycle service
    queued = service.apply_plan(plan.plan_id)
    # Then the plan should be in Apply/QUEUED state
    assert_plan_state(plans, plan, PlanPhase.apply, PlanStatus.queued)
    # And the job store should contain 1 async job for phase "apply"
    in_store = jobs_for(jobs, "apply")
    assert len(in_store) == 1 and jobs.count() == 1
    # And the enqueued job plan_id should match the plan
    assert in_store[0].plan_id == plan.plan_id
    assert queued.job is not None and in_store[0].status == "queued"


def test_a_refused_phase_with_two_stores_writes_nothing(jobs: JobStore) -> None:
    plans = InMemoryPlanStore()
    service = PlanLifecycleService(plans, jobs=jobs)
    plan = plan_in(plans, PlanPhase.strategize, PlanStatus.running)
    with pytest.raises(InvalidPlanTransitionError):
        service.execute_plan(plan.plan_id)
    with pytest.raises(PlanNotFoundError):
        service.execute_plan(new_id())
    assert_plan_state(plans, plan, PlanPhase.strategize, PlanStatus.running)
    assert jobs.count() == 0


def test_the_stores_say_whether_they_are_one_ledger(
    stores: tuple[JobStore, PlanStore],
) -> None:
    jobs, plans = stores
    assert jobs.ledger is plans.ledger  # one ledger: the queue is one statement
    assert InMemoryPlanStore().ledger is not jobs.ledger


@pytest.mark.spec("async_jobs: execute_plan enqueues async job when async is enabled")
def test_execute_plan_with_the_backend_plan_store_and_a_separate_job_store(
    plans: PlanStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a plan lifecycle service with async enabled and a job store (its own store)
    jobs = InMemoryJobStore()
    service = PlanLifecycleService(plans, jobs=jobs)
    # And a plan in Strategize/COMPLETE state exists
    plan = plan_in(plans, PlanPhase.strategize, PlanStatus.complete)
    # When I execute the plan via the lifecycle service
    service.execute_plan(plan.plan_id)
    # Then the plan should be in Execute/QUEUED state
    assert_plan_state(plans, plan, PlanPhase.execute, PlanStatus.queued)
    # And the job store should contain 1 async job for phase "execute"
    in_store = jobs_for(jobs, "execute")
    assert len(in_store) == 1 and jobs.count() == 1
    # And the enqueued job plan_id should match the plan
    assert in_store[0].plan_id == plan.plan_id

    # planq: a job insert that fails rolls the plan's move back (the plan store's transaction)
    other = plan_in(plans, PlanPhase.strategize, PlanStatus.complete)

    def disk_full(job: AsyncJob) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(jobs, "add", disk_full)
    with pytest.raises(RuntimeError, match="disk full"):
        service.execute_plan(other.plan_id)
    assert_plan_state(plans, other, PlanPhase.strategize, PlanStatus.complete)
    saved = plans.get(other.plan_id)
    assert saved is not None and saved.version == other.version
    assert jobs.count() == 1


def test_two_stores_concurrent_queues_of_one_plan_add_one_job(plans: PlanStore) -> None:
    jobs = InMemoryJobStore()  # a job store of its own: the plan's version decides
    service = PlanLifecycleService(plans, jobs=jobs)
    for _ in range(5):
        plan = plan_in(plans, PlanPhase.strategize, PlanStatus.complete)
        start = threading.Barrier(2)

        def queue(plan_id: str = plan.plan_id, start: threading.Barrier = start) -> str:
            start.wait()
            try:
                service.execute_plan(plan_id)
            except (ConcurrentUpdateError, InvalidPlanTransitionError) as exc:
                return type(exc).__name__
            return "queued"

        with ThreadPoolExecutor(2) as pool:
            outcomes = sorted(pool.map(lambda _: queue(), range(2)))
        assert outcomes.count("queued") == 1, outcomes
        assert len(jobs.list_by_plan(plan.plan_id)) == 1
        saved = plans.get(plan.plan_id)
        assert saved is not None and saved.label == "Execute/QUEUED"
        assert saved.version == plan.version + 1
