"""PlanLifecycleService and JobLedger on the in-memory stores (no database, no Celery)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from planq.domain.clock import utcnow
from planq.domain.config import AsyncWorkerConfig
from planq.domain.errors import InvalidIdError, InvalidPlanTransitionError, PlanNotFoundError
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.ledger import STUCK_ERROR, JobLedger
from planq.domain.lifecycle import PlanLifecycleService
from planq.domain.plans import Plan, PlanPhase, PlanStatus
from planq.domain.ports import CancelOutcome
from planq.store.memory import InMemoryJobStore, InMemoryPlanStore, in_memory_ledger

SECRET = "hunter2secret"


@dataclass
class World:
    """A memory ledger, a service over it, and what its enqueue callback saw."""

    jobs: InMemoryJobStore
    plans: InMemoryPlanStore
    service: PlanLifecycleService
    ledger: JobLedger
    enqueued: list[AsyncJob] = field(default_factory=list)

    def add_plan(self, phase: PlanPhase | None = None, status: PlanStatus | None = None) -> Plan:
        plan = Plan.with_steps(["one", "two"])
        plan.phase, plan.status = phase, status
        self.plans.add(plan)
        return plan

    def plan(self, plan_id: str) -> Plan:
        plan = self.plans.get(plan_id)
        assert plan is not None
        return plan

    def job(self, job_id: str) -> AsyncJob:
        job = self.jobs.get(job_id)
        assert job is not None
        return job

    def queued_execute_job(self) -> tuple[Plan, AsyncJob]:
        """A plan at Execute/QUEUED with its queued job, the way producers make them."""
        plan = self.add_plan(PlanPhase.strategize, PlanStatus.complete)
        result = self.service.execute_plan(plan.plan_id)
        assert result.job is not None
        return result.plan, result.job


@pytest.fixture
def world() -> World:
    job_store, plan_store = in_memory_ledger()
    enqueued: list[AsyncJob] = []
    service = PlanLifecycleService(plan_store, job_store, enqueue=enqueued.extend)
    return World(job_store, plan_store, service, JobLedger(job_store, plan_store), enqueued)


# -- PlanLifecycleService.execute_plan ----------------------------------------------------------


def test_execute_plan_queues_the_plan_and_exactly_one_job(world: World) -> None:
    plan = world.add_plan(PlanPhase.strategize, PlanStatus.complete)
    result = world.service.execute_plan(plan.plan_id)

    stored = world.plan(plan.plan_id)
    assert stored.label == "Execute/QUEUED"
    assert stored.version == plan.version + 1
    assert result.plan.label == "Execute/QUEUED"

    rows = world.jobs.list_all()
    assert len(rows) == 1
    (row,) = rows
    assert result.job is not None
    assert row.job_id == result.job.job_id
    assert row.plan_id == plan.plan_id
    assert row.phase is PlanPhase.execute
    assert row.status is AsyncJobStatus.queued
    assert row.attempt == 1
    assert row.payload["plan_id"] == plan.plan_id
    assert row.payload["phase"] == "execute"
    assert [j.job_id for j in world.enqueued] == [row.job_id]


def test_strategize_and_apply_queue_their_phases(world: World) -> None:
    plan = world.service.create_plan(["scan"], name="p")
    assert world.plan(plan.plan_id).label == "New"
    first = world.service.strategize_plan(plan.plan_id)
    assert first.job is not None
    assert first.job.phase is PlanPhase.strategize
    done = world.add_plan(PlanPhase.execute, PlanStatus.complete)
    last = world.service.apply_plan(done.plan_id)
    assert last.job is not None
    assert last.job.phase is PlanPhase.apply
    assert world.plan(done.plan_id).label == "Apply/QUEUED"
    assert world.jobs.count(AsyncJobStatus.queued) == 2


def test_execute_plan_accepts_a_lower_case_id(world: World) -> None:
    plan = world.add_plan(PlanPhase.strategize, PlanStatus.complete)
    result = world.service.execute_plan(plan.plan_id.lower())
    assert result.job is not None
    assert result.job.plan_id == plan.plan_id
    assert world.plan(plan.plan_id).label == "Execute/QUEUED"


def test_queueing_twice_is_refused_and_adds_no_second_job(world: World) -> None:
    plan, job = world.queued_execute_job()
    with pytest.raises(InvalidPlanTransitionError):
        world.service.execute_plan(plan.plan_id)
    assert [j.job_id for j in world.jobs.list_all()] == [job.job_id]
    assert len(world.enqueued) == 1


def test_disabled_config_moves_the_plan_without_a_job() -> None:
    job_store, plan_store = in_memory_ledger()
    enqueued: list[AsyncJob] = []
    service = PlanLifecycleService(
        plan_store, job_store, config=AsyncWorkerConfig(enabled=False), enqueue=enqueued.extend
    )
    plan = Plan(phase=PlanPhase.strategize, status=PlanStatus.complete)
    plan_store.add(plan)
    result = service.execute_plan(plan.plan_id)
    assert result.job is None
    assert result.plan.label == "Execute/QUEUED"
    stored = plan_store.get(plan.plan_id)
    assert stored is not None
    assert stored.label == "Execute/QUEUED"
    assert job_store.count() == 0
    assert enqueued == []


def test_no_job_store_moves_the_plan_without_a_job() -> None:
    _, plan_store = in_memory_ledger()
    enqueued: list[AsyncJob] = []
    service = PlanLifecycleService(plan_store, None, enqueue=enqueued.extend)
    plan = Plan(phase=PlanPhase.strategize, status=PlanStatus.complete)
    plan_store.add(plan)
    result = service.execute_plan(plan.plan_id)
    assert result.job is None
    stored = plan_store.get(plan.plan_id)
    assert stored is not None
    assert stored.label == "Execute/QUEUED"
    assert enqueued == []


def test_unknown_plan_is_plan_not_found_and_writes_nothing(world: World) -> None:
    missing = new_id()
    with pytest.raises(PlanNotFoundError) as info:
        world.service.execute_plan(missing)
    assert info.value.plan_id == missing
    assert world.jobs.count() == 0
    assert world.plans.list_all() == []
    assert world.enqueued == []


@pytest.mark.parametrize("bad_id", ["", "not-a-ulid", "0" * 25, None, 42])
def test_bad_plan_id_is_invalid_id_error(world: World, bad_id: object) -> None:
    existing = world.add_plan(PlanPhase.strategize, PlanStatus.complete)
    with pytest.raises(InvalidIdError):
        world.service.execute_plan(bad_id)  # type: ignore[arg-type]
    assert world.jobs.count() == 0
    assert world.plan(existing.plan_id).label == "Strategize/COMPLETE"


def test_get_plan_errors(world: World) -> None:
    with pytest.raises(InvalidIdError):
        world.service.get_plan("nope")
    with pytest.raises(PlanNotFoundError):
        world.service.get_plan(new_id())


@pytest.mark.parametrize(
    ("phase", "status"),
    [
        (None, None),
        (PlanPhase.strategize, PlanStatus.queued),
        (PlanPhase.strategize, PlanStatus.running),
        (PlanPhase.strategize, PlanStatus.failed),
        (PlanPhase.execute, PlanStatus.queued),
        (PlanPhase.execute, PlanStatus.running),
        (PlanPhase.execute, PlanStatus.complete),
        (PlanPhase.apply, PlanStatus.complete),
    ],
)
def test_wrong_state_is_refused_and_writes_nothing(
    world: World, phase: PlanPhase | None, status: PlanStatus | None
) -> None:
    plan = world.add_plan(phase, status)
    with pytest.raises(InvalidPlanTransitionError):
        world.service.execute_plan(plan.plan_id)
    stored = world.plan(plan.plan_id)
    assert (stored.phase, stored.status, stored.version) == (phase, status, plan.version)
    assert world.jobs.count() == 0
    assert world.enqueued == []


@pytest.mark.parametrize("status", [PlanStatus.failed, PlanStatus.cancelled])
def test_a_failed_or_cancelled_execute_can_be_queued_again(
    world: World, status: PlanStatus
) -> None:
    plan = world.add_plan(PlanPhase.execute, status)
    result = world.service.execute_plan(plan.plan_id)
    assert result.job is not None
    assert world.plan(plan.plan_id).label == "Execute/QUEUED"


def test_enqueue_runs_after_the_row_is_stored(world: World) -> None:
    seen: list[tuple[AsyncJob | None, Plan | None]] = []

    def enqueue(jobs: Sequence[AsyncJob]) -> None:
        seen.extend((world.jobs.get(j.job_id), world.plans.get(j.plan_id)) for j in jobs)

    service = PlanLifecycleService(world.plans, world.jobs, enqueue=enqueue)
    plan = world.add_plan(PlanPhase.strategize, PlanStatus.complete)
    result = service.execute_plan(plan.plan_id)
    assert result.job is not None
    assert len(seen) == 1
    row, stored_plan = seen[0]
    assert row is not None
    assert row.job_id == result.job.job_id
    assert row.status is AsyncJobStatus.queued
    assert stored_plan is not None
    assert stored_plan.label == "Execute/QUEUED"


def test_a_failing_enqueue_leaves_the_row_and_plan_queued(world: World) -> None:
    calls: list[str] = []

    def broken_enqueue(jobs: Sequence[AsyncJob]) -> None:
        calls.extend(j.job_id for j in jobs)
        raise ConnectionError("broker down")

    service = PlanLifecycleService(world.plans, world.jobs, enqueue=broken_enqueue)
    plan = world.add_plan(PlanPhase.strategize, PlanStatus.complete)
    queued = service.execute_plan(plan.plan_id)  # the caller is not told to retry: it is durable
    assert queued.job is not None and calls == [queued.job.job_id]
    row = world.job(calls[0])
    assert row.status is AsyncJobStatus.queued
    assert row.dispatched_at is None  # never published: the dispatch relay will pick it up
    assert row.dispatch_count == 0
    assert world.plan(plan.plan_id).label == "Execute/QUEUED"
    assert world.jobs.count() == 1


def test_a_failing_job_insert_rolls_the_plan_back(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = world.add_plan(PlanPhase.strategize, PlanStatus.complete)

    def refuse(jobs: Sequence[AsyncJob], now: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(world.jobs, "queue", refuse)
    with pytest.raises(RuntimeError, match="disk full"):
        world.service.execute_plan(plan.plan_id)
    stored = world.plan(plan.plan_id)
    assert stored.label == "Strategize/COMPLETE"
    assert stored.version == plan.version
    assert world.jobs.count() == 0
    assert world.enqueued == []


# -- JobLedger -----------------------------------------------------------------------------------


def test_claim_moves_the_plan_to_running(world: World) -> None:
    plan, job = world.queued_execute_job()
    claim = world.ledger.claim(job.job_id, "w1")
    assert claim is not None
    claimed = claim.job
    assert claimed.job_id == job.job_id
    assert claimed.status is AsyncJobStatus.running
    assert claimed.worker_id == "w1"
    assert claimed.started_at is not None
    assert claimed.last_heartbeat is not None
    assert world.plan(plan.plan_id).label == "Execute/RUNNING"


def test_a_second_claim_loses(world: World) -> None:
    _, job = world.queued_execute_job()
    assert world.ledger.claim(job.job_id, "w1") is not None
    assert world.ledger.claim(job.job_id, "w2") is None
    assert world.job(job.job_id).worker_id == "w1"


def test_claim_of_an_unknown_job_is_none(world: World) -> None:
    assert world.ledger.claim(new_id(), "w1") is None


def test_finish_succeeded_completes_the_plan(world: World) -> None:
    plan, job = world.queued_execute_job()
    claim = world.ledger.claim(job.job_id, "w1")
    assert claim is not None
    claimed = claim.job
    assert world.ledger.finish(claimed, AsyncJobStatus.succeeded) is True
    row = world.job(job.job_id)
    assert row.status is AsyncJobStatus.succeeded
    assert row.finished_at is not None
    assert row.error_message is None
    assert world.plan(plan.plan_id).label == "Execute/COMPLETE"
    # nothing is written twice
    assert world.ledger.finish(claimed, AsyncJobStatus.failed, "late") is False
    assert world.job(job.job_id).status is AsyncJobStatus.succeeded
    assert world.plan(plan.plan_id).label == "Execute/COMPLETE"


def test_finish_failed_fails_the_plan_with_a_redacted_error(world: World) -> None:
    plan, job = world.queued_execute_job()
    claim = world.ledger.claim(job.job_id, "w1")
    assert claim is not None
    claimed = claim.job
    assert world.ledger.finish(claimed, AsyncJobStatus.failed, f"connect failed password={SECRET}")
    row = world.job(job.job_id)
    assert row.status is AsyncJobStatus.failed
    assert row.error_message is not None
    assert row.error_message.startswith("connect failed password=")
    assert SECRET not in row.error_message
    assert world.plan(plan.plan_id).label == "Execute/FAILED"


def test_finish_of_a_queued_job_is_refused(world: World) -> None:
    plan, job = world.queued_execute_job()
    assert world.ledger.finish(job, AsyncJobStatus.succeeded) is False
    assert world.job(job.job_id).status is AsyncJobStatus.queued
    assert world.plan(plan.plan_id).label == "Execute/QUEUED"


def test_cancel_a_queued_job(world: World) -> None:
    plan, job = world.queued_execute_job()
    assert world.ledger.cancel(job.job_id) is CancelOutcome.cancelled
    row = world.job(job.job_id)
    assert row.status is AsyncJobStatus.cancelled
    assert row.finished_at is not None
    assert world.plan(plan.plan_id).label == "Execute/CANCELLED"
    assert world.ledger.claim(job.job_id, "w1") is None
    assert world.job(job.job_id).status is AsyncJobStatus.cancelled
    assert world.ledger.cancel(job.job_id) is CancelOutcome.already_terminal


def test_cancel_a_running_job_is_a_request_seen_by_the_heartbeat(world: World) -> None:
    plan, job = world.queued_execute_job()
    other_plan, other = world.queued_execute_job()
    assert world.ledger.claim(job.job_id, "w1") is not None
    assert world.ledger.claim(other.job_id, "w1") is not None
    assert world.ledger.heartbeat([job.job_id, other.job_id]) == set()

    outcome = world.ledger.cancel(job.job_id)
    assert outcome is CancelOutcome.requested
    assert outcome.accepted
    row = world.job(job.job_id)
    assert row.status is AsyncJobStatus.running  # the executor stops it, not the ledger
    assert row.cancel_requested_at is not None
    assert world.plan(plan.plan_id).label == "Execute/RUNNING"

    assert world.ledger.heartbeat([job.job_id, other.job_id]) == {job.job_id}
    assert world.ledger.cancel(job.job_id) is CancelOutcome.already_requested
    assert world.plan(other_plan.plan_id).label == "Execute/RUNNING"

    assert world.ledger.finish(row, AsyncJobStatus.cancelled) is True
    assert world.job(job.job_id).status is AsyncJobStatus.cancelled
    assert world.plan(plan.plan_id).label == "Execute/CANCELLED"


def test_cancel_of_an_unknown_job(world: World) -> None:
    outcome = world.ledger.cancel(new_id())
    assert outcome is CancelOutcome.not_found
    assert not outcome.accepted


def test_heartbeat_with_no_ids_is_empty(world: World) -> None:
    assert world.ledger.heartbeat([]) == set()


def test_retry_creates_a_new_attempt_once(world: World) -> None:
    plan, job = world.queued_execute_job()
    claim = world.ledger.claim(job.job_id, "w1")
    assert claim is not None
    claimed = claim.job
    world.ledger.finish(claimed, AsyncJobStatus.failed, "boom")
    failed = world.job(job.job_id)
    assert world.plan(plan.plan_id).label == "Execute/FAILED"

    retry = world.ledger.retry(failed)
    assert retry is not None
    assert retry.job_id != failed.job_id
    assert retry.attempt == failed.attempt + 1 == 2
    assert retry.retry_of == failed.job_id
    assert retry.status is AsyncJobStatus.queued
    assert retry.plan_id == failed.plan_id
    assert retry.phase is failed.phase
    assert retry.payload_json == failed.payload_json
    assert world.job(retry.job_id).status is AsyncJobStatus.queued
    assert world.job(failed.job_id).status is AsyncJobStatus.failed  # the old row stays
    assert world.plan(plan.plan_id).label == "Execute/QUEUED"

    assert world.ledger.retry(failed) is None
    assert world.jobs.count() == 2
    assert world.plan(plan.plan_id).label == "Execute/QUEUED"


def test_retry_of_a_live_job_is_refused(world: World) -> None:
    _, job = world.queued_execute_job()
    with pytest.raises(ValueError, match="failed or cancelled"):
        world.ledger.retry(job)
    assert world.jobs.count() == 1


def test_expire_stuck_fails_a_job_with_an_old_heartbeat(world: World) -> None:
    plan, job = world.queued_execute_job()
    fresh_plan, fresh = world.queued_execute_job()
    assert world.ledger.claim(job.job_id, "w1") is not None
    assert world.ledger.claim(fresh.job_id, "w2") is not None
    world.jobs.heartbeat([job.job_id], utcnow() - timedelta(hours=1))

    expired = world.ledger.expire_stuck(job_timeout=60.0)
    assert [j.job_id for j in expired] == [job.job_id]
    row = world.job(job.job_id)
    assert row.status is AsyncJobStatus.failed
    assert row.error_message == STUCK_ERROR
    assert row.finished_at is not None
    assert world.plan(plan.plan_id).label == "Execute/FAILED"
    assert world.job(fresh.job_id).status is AsyncJobStatus.running
    assert world.plan(fresh_plan.plan_id).label == "Execute/RUNNING"

    assert world.ledger.expire_stuck(job_timeout=60.0) == []


def test_expire_stuck_with_a_tiny_timeout(world: World) -> None:
    plan, job = world.queued_execute_job()
    assert world.ledger.claim(job.job_id, "w1") is not None
    world.jobs.heartbeat([job.job_id], utcnow() - timedelta(seconds=5))
    expired = world.ledger.expire_stuck(job_timeout=0.001)
    assert [j.job_id for j in expired] == [job.job_id]
    assert world.job(job.job_id).status is AsyncJobStatus.failed
    assert world.plan(plan.plan_id).label == "Execute/FAILED"


def test_expire_stuck_ignores_queued_jobs(world: World) -> None:
    _, job = world.queued_execute_job()
    assert world.ledger.expire_stuck(job_timeout=0.001) == []
    assert world.job(job.job_id).status is AsyncJobStatus.queued


def test_ledger_without_a_plan_store_still_moves_jobs() -> None:
    job_store, _ = in_memory_ledger()
    ledger = JobLedger(job_store)
    job = AsyncJob(plan_id=new_id(), phase=PlanPhase.execute)
    job_store.add(job)
    claimed = ledger.claim(job.job_id, "w1")
    assert claimed is not None and claimed.plan is None
    assert ledger.finish(claimed.job, AsyncJobStatus.succeeded)
    row = job_store.get(job.job_id)
    assert row is not None
    assert row.status is AsyncJobStatus.succeeded


# -- the spec's composition: two independent stores, not one ledger -----------------------------


def test_two_independent_memory_stores_queue_plan_then_job() -> None:
    plans, jobs = InMemoryPlanStore(), InMemoryJobStore()
    assert plans.ledger is not jobs.ledger
    enqueued: list[AsyncJob] = []
    service = PlanLifecycleService(plans, jobs=jobs, enqueue=enqueued.extend)
    first = Plan(phase=PlanPhase.strategize, status=PlanStatus.complete)
    second = Plan(phase=PlanPhase.strategize, status=PlanStatus.complete)
    plans.add(first)
    plans.add(second)
    results = service.queue_phases([first.plan_id, second.plan_id], PlanPhase.execute)
    assert [r.plan.label for r in results] == ["Execute/QUEUED"] * 2
    assert [r.plan.version for r in results] == [first.version + 1, second.version + 1]
    assert sorted(j.plan_id for j in jobs.list_all()) == sorted([first.plan_id, second.plan_id])
    assert [j.job_id for j in enqueued] == [r.job.job_id for r in results if r.job]
    with pytest.raises(InvalidPlanTransitionError):  # queued already: refused, nothing added
        service.execute_plan(first.plan_id)
    assert jobs.count() == 2 and len(enqueued) == 2


def test_two_stores_refuse_a_batch_with_one_bad_plan_and_write_nothing() -> None:
    plans, jobs = InMemoryPlanStore(), InMemoryJobStore()
    service = PlanLifecycleService(plans, jobs=jobs)
    ready = Plan(phase=PlanPhase.strategize, status=PlanStatus.complete)
    busy = Plan(phase=PlanPhase.strategize, status=PlanStatus.running)
    plans.add(ready)
    plans.add(busy)
    with pytest.raises(InvalidPlanTransitionError):
        service.queue_phases([ready.plan_id, busy.plan_id], PlanPhase.execute)
    stored = plans.get(ready.plan_id)
    assert stored is not None and (stored.label, stored.version) == (
        "Strategize/COMPLETE",
        ready.version,
    )
    assert jobs.count() == 0


def test_a_pipeline_needs_its_plans_and_jobs_in_one_ledger() -> None:
    """Two stores (the spec's composition) cannot commit a finish with its next phase."""
    from planq.domain.errors import ConfigurationError

    plans = InMemoryPlanStore()
    service = PlanLifecycleService(plans, InMemoryJobStore())
    plan = service.create_plan(["a"])
    with pytest.raises(ConfigurationError, match="one ledger"):
        service.run_plan(plan.plan_id, "apply")
    assert service.get_plan(plan.plan_id).label == "New" and plans.list_events(plan.plan_id) == []


def test_a_plan_waiting_at_its_gate_cannot_start_a_new_pipeline() -> None:
    from planq.domain.plans import PipelineState
    from planq.tasks.engine import AsyncWorker

    jobs, plans = in_memory_ledger()
    service = PlanLifecycleService(plans, jobs)
    worker = AsyncWorker(AsyncWorkerConfig(), jobs, "noop", plans)
    plan = service.create_plan(["a"])
    first = service.run_plan(plan.plan_id, "apply", approve_before="execute").job
    assert first is not None and worker.run_job(first.job_id).value == "succeeded"
    waiting = service.get_plan(plan.plan_id)
    assert waiting.pipeline_state is PipelineState.awaiting_approval
    with pytest.raises(InvalidPlanTransitionError, match="awaiting approval"):
        service.run_plan(plan.plan_id, "apply")
    assert service.get_plan(plan.plan_id) == waiting and len(jobs.list_by_plan(plan.plan_id)) == 1
