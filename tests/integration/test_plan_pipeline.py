"""Plans that run themselves: the pipeline, its approval gate and its audit trail.

Real in-process Celery workers (threads) on Redis, the ledger on PostgreSQL and SQLite.
Each guard has a test here that fails without it: the finish's compare-and-set (a
duplicate finish queues nothing), the approval's compare-and-set (two at once: one wins),
the gate itself, the stop on cancel and reject, `through`, and the input checks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from prometheus_client import REGISTRY

from planq.domain.errors import (
    BoundsError,
    InvalidPlanTransitionError,
    NotAwaitingApprovalError,
    PipelineError,
    PlanNotFoundError,
)
from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import PipelineState, Plan, PlanPhase, PlanStatus
from planq.tasks.runtime import Runtime
from tests.celery_support import embedded_runtime, make_app
from tests.support import wait_for

EXEC = "tests.executors_for_tests"


@pytest.fixture(params=["postgres", "sqlite"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        request.getfixturevalue("pg_database")  # emptied
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path / 'pipeline.db'}"


def app_for(redis_url: str, database_url: str, **settings: Any) -> Celery:
    return make_app(redis_url, database_url, auto_migrate=True, **settings)


@pytest.fixture
def runtime(redis_url: str, database_url: str) -> Iterator[Runtime]:
    """A runtime with a real in-process worker consuming its phase tasks."""
    with embedded_runtime(app_for(redis_url, database_url)) as rt:
        yield rt


@pytest.fixture
def idle(redis_url: str, database_url: str) -> Iterator[Runtime]:
    """A runtime with no consumer: the test runs the worker's steps itself."""
    with embedded_runtime(app_for(redis_url, database_url), start=False) as rt:
        yield rt


def new_plan(rt: Runtime, name: str = "pipeline") -> Plan:
    return rt.lifecycle.create_plan([{"name": "a", "seconds": 0.01}], name=name)


def pipeline_reaches(rt: Runtime, plan_id: str, state: PipelineState) -> Plan:
    def reached() -> Plan | None:
        plan = rt.plans.get(plan_id)
        return plan if plan is not None and plan.pipeline_state is state else None

    found: Plan = wait_for(reached, timeout=30, what=f"pipeline of {plan_id} to be {state}")
    return found


def kinds(rt: Runtime, plan_id: str) -> list[tuple[str, str | None]]:
    return [
        (e.kind.value, e.phase.value if e.phase else None)
        for e in rt.lifecycle.plan_events(plan_id)
    ]


def phases_queued(rt: Runtime, plan_id: str) -> list[str]:
    return [j.phase.value for j in rt.jobs.list_by_plan(plan_id)]


def test_a_pipeline_runs_waits_at_its_gate_and_applies_once_approved(runtime: Runtime) -> None:
    plan = new_plan(runtime)
    result = runtime.app.tasks["planq.run_plan"].delay(
        plan.plan_id, through="apply", approve_before="apply"
    )
    first = runtime.jobs.get(result.id)
    assert first is not None and first.phase is PlanPhase.strategize

    waiting = pipeline_reaches(runtime, plan.plan_id, PipelineState.awaiting_approval)
    assert (waiting.phase, waiting.status) == (PlanPhase.execute, PlanStatus.complete)
    assert phases_queued(runtime, plan.plan_id) == ["strategize", "execute"]  # nothing past it

    approved = runtime.lifecycle.approve_plan(plan.plan_id, actor="alice", note="looks right")
    assert approved.job is not None and approved.job.phase is PlanPhase.apply
    done = pipeline_reaches(runtime, plan.plan_id, PipelineState.done)
    assert (done.phase, done.status) == (PlanPhase.apply, PlanStatus.complete)
    assert phases_queued(runtime, plan.plan_id) == ["strategize", "execute", "apply"]
    assert all(
        j.status is AsyncJobStatus.succeeded for j in runtime.jobs.list_by_plan(plan.plan_id)
    )
    assert kinds(runtime, plan.plan_id) == [
        ("queued", "strategize"),
        ("started", "strategize"),
        ("succeeded", "strategize"),
        ("queued", "execute"),
        ("started", "execute"),
        ("succeeded", "execute"),
        ("awaiting_approval", "apply"),
        ("approved", "apply"),
        ("queued", "apply"),
        ("started", "apply"),
        ("succeeded", "apply"),
        ("done", "apply"),
    ]
    approval = [e for e in runtime.lifecycle.plan_events(plan.plan_id) if e.kind == "approved"]
    assert (approval[0].actor, approval[0].note) == ("alice", "looks right")


def test_through_stops_the_pipeline_after_that_phase(runtime: Runtime) -> None:
    plan = new_plan(runtime)
    runtime.lifecycle.run_plan(plan.plan_id, through="strategize")
    done = pipeline_reaches(runtime, plan.plan_id, PipelineState.done)
    assert done.label == "Strategize/COMPLETE"
    assert phases_queued(runtime, plan.plan_id) == ["strategize"]
    assert kinds(runtime, plan.plan_id)[-1] == ("done", "strategize")


def test_a_duplicate_finish_never_queues_the_next_phase_twice(idle: Runtime) -> None:
    plan = new_plan(idle)
    first = idle.lifecycle.run_plan(plan.plan_id, through="apply").job
    assert first is not None
    claimed = idle.ledger.claim(first.job_id, "w1")
    assert claimed is not None and claimed.plan is not None
    assert claimed.plan.pipeline_state is PipelineState.running
    ledger = idle.ledger
    # another worker finishing an attempt of the same job (it lost the claim): fenced
    assert not ledger.finish(claimed.job, AsyncJobStatus.succeeded, worker_id="w2", pipeline=True)
    assert phases_queued(idle, plan.plan_id) == ["strategize"]
    assert ledger.finish(claimed.job, AsyncJobStatus.succeeded, worker_id="w1", pipeline=True)
    # the same finish delivered again (a redelivered message, a retried write): refused
    assert not ledger.finish(claimed.job, AsyncJobStatus.succeeded, worker_id="w1", pipeline=True)
    assert idle.worker.run_job(first.job_id).value == "skipped"  # a duplicate delivery
    assert phases_queued(idle, plan.plan_id) == ["strategize", "execute"]
    assert [k for k in kinds(idle, plan.plan_id) if k[0] == "queued"] == [
        ("queued", "strategize"),
        ("queued", "execute"),
    ]


def test_two_approvals_at_once_one_wins_the_other_is_refused(idle: Runtime) -> None:
    plan = new_plan(idle)
    idle.lifecycle.run_plan(plan.plan_id, through="apply", approve_before="execute")
    (job,) = idle.jobs.list_by_plan(plan.plan_id)
    assert idle.worker.run_job(job.job_id).value == "succeeded"
    assert pipeline_reaches(idle, plan.plan_id, PipelineState.awaiting_approval)

    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def approve(who: str) -> None:
        barrier.wait()
        try:
            idle.lifecycle.approve_plan(plan.plan_id, actor=who)
            outcomes.append("won")
        except NotAwaitingApprovalError:
            outcomes.append("refused")

    threads = [threading.Thread(target=approve, args=(who,)) for who in ("ann", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["refused", "won"]
    assert phases_queued(idle, plan.plan_id) == ["strategize", "execute"]
    assert [k for k in kinds(idle, plan.plan_id) if k[0] == "approved"] == [("approved", "execute")]


@pytest.mark.parametrize("attempt", range(3))
def test_an_approval_and_a_rejection_at_once_one_decides(idle: Runtime, attempt: int) -> None:
    plan = new_plan(idle)
    idle.lifecycle.run_plan(plan.plan_id, through="apply", approve_before="execute")
    (job,) = idle.jobs.list_by_plan(plan.plan_id)
    assert idle.worker.run_job(job.job_id).value == "succeeded"
    barrier = threading.Barrier(2)
    won: list[str] = []

    def decide(approve: bool) -> None:
        barrier.wait()
        try:
            if approve:
                idle.lifecycle.approve_plan(plan.plan_id, actor="ann")
            else:
                idle.lifecycle.reject_plan(plan.plan_id, actor="bob")
            won.append("approved" if approve else "rejected")
        except NotAwaitingApprovalError:
            pass

    threads = [threading.Thread(target=decide, args=(flag,)) for flag in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(won) == 1, won
    final = idle.plans.get(plan.plan_id)
    assert final is not None
    decisions = [k for k in kinds(idle, plan.plan_id) if k[0] in ("approved", "rejected")]
    assert decisions == [(won[0], "execute")]
    if won == ["approved"]:
        assert final.pipeline_state is PipelineState.running
        assert phases_queued(idle, plan.plan_id) == ["strategize", "execute"]
    else:
        assert final.pipeline_state is PipelineState.rejected
        assert phases_queued(idle, plan.plan_id) == ["strategize"]


@pytest.mark.parametrize("second", ["approve", "reject"])
def test_a_decision_on_a_plan_read_before_another_decided_is_refused(
    idle: Runtime, second: str
) -> None:
    """The race's losing interleaving, forced: both deciders read the waiting plan first.

    Threads above meet it only when the scheduler lets both read before either writes;
    here it happens every time, so the compare-and-set on the plan's version must refuse.
    """
    plan = new_plan(idle)
    idle.lifecycle.run_plan(plan.plan_id, through="apply", approve_before="execute")
    (job,) = idle.jobs.list_by_plan(plan.plan_id)
    assert idle.worker.run_job(job.job_id).value == "succeeded"
    first_read, second_read = idle.plans.get(plan.plan_id), idle.plans.get(plan.plan_id)
    assert first_read is not None and second_read is not None
    assert first_read.pipeline_state is PipelineState.awaiting_approval

    pipeline = idle.ledger.pipeline
    assert pipeline.decide(first_read, True, "ann", None) is not None  # approved: execute queued
    with pytest.raises(NotAwaitingApprovalError, match="decided by someone else"):
        pipeline.decide(second_read, second == "approve", "bob", None)
    assert phases_queued(idle, plan.plan_id) == ["strategize", "execute"]
    decisions = [k for k in kinds(idle, plan.plan_id) if k[0] in ("approved", "rejected")]
    assert decisions == [("approved", "execute")]
    final = idle.plans.get(plan.plan_id)
    assert final is not None and final.pipeline_state is PipelineState.running


def test_reject_ends_the_pipeline_with_who_and_why(runtime: Runtime) -> None:
    plan = new_plan(runtime)
    runtime.lifecycle.run_plan(plan.plan_id, through="apply", approve_before="apply")
    pipeline_reaches(runtime, plan.plan_id, PipelineState.awaiting_approval)
    rejected = runtime.lifecycle.reject_plan(plan.plan_id, actor="carol", note="not today")
    assert rejected.pipeline_state is PipelineState.rejected
    assert rejected.label == "Execute/COMPLETE"
    with pytest.raises(NotAwaitingApprovalError):
        runtime.lifecycle.approve_plan(plan.plan_id, actor="dave")
    assert phases_queued(runtime, plan.plan_id) == ["strategize", "execute"]
    last = runtime.lifecycle.plan_events(plan.plan_id)[-1]
    assert (last.kind, last.actor, last.note) == ("rejected", "carol", "not today")


def test_cancel_while_waiting_stops_the_pipeline(runtime: Runtime) -> None:
    plan = new_plan(runtime)
    runtime.lifecycle.run_plan(plan.plan_id, through="apply", approve_before="apply")
    pipeline_reaches(runtime, plan.plan_id, PipelineState.awaiting_approval)
    landed = runtime.service.jobs.cancel_plan(plan.plan_id, actor="erin")
    assert landed.plan.pipeline_state is PipelineState.cancelled and landed.outcomes == {}
    with pytest.raises(NotAwaitingApprovalError):
        runtime.lifecycle.approve_plan(plan.plan_id)
    last = runtime.lifecycle.plan_events(plan.plan_id)[-1]
    assert (last.kind, last.actor) == ("cancel_requested", "erin")


def test_cancel_while_a_phase_runs_cancels_it_and_stops_the_pipeline(
    redis_url: str, database_url: str
) -> None:
    app = app_for(redis_url, database_url, executors={"execute": f"{EXEC}:waits_for_cancel"})
    with embedded_runtime(app) as rt:
        plan = new_plan(rt)
        rt.lifecycle.run_plan(plan.plan_id, through="apply")

        def execute_running() -> bool:
            jobs = rt.jobs.list_by_plan(plan.plan_id)
            return any(
                j.phase is PlanPhase.execute and j.status is AsyncJobStatus.running for j in jobs
            )

        wait_for(execute_running, timeout=30, what="execute to run")
        landed = rt.service.jobs.cancel_plan(plan.plan_id, actor="frank")
        assert landed.plan.pipeline_state is PipelineState.cancelled
        cancelled = list(landed.outcomes)
        assert len(cancelled) == 1 and not landed.finished
        row = wait_for(
            lambda: (
                (j := rt.jobs.get(cancelled[0])) is not None
                and j.status is AsyncJobStatus.cancelled
            ),
            timeout=30,
            what="the running phase to end cancelled",
        )
        assert row
        final = rt.plans.get(plan.plan_id)
        assert final is not None and final.label == "Execute/CANCELLED"
        assert phases_queued(rt, plan.plan_id) == ["strategize", "execute"]
        assert ("cancel_requested", "execute") in kinds(rt, plan.plan_id)
        assert kinds(rt, plan.plan_id)[-1] == ("cancelled", "execute")


def test_a_failed_phase_stops_the_pipeline_and_a_retry_resumes_it(
    redis_url: str, database_url: str
) -> None:
    app = app_for(redis_url, database_url, executors={"execute": f"{EXEC}:fails_first_attempt"})
    with embedded_runtime(app) as rt:
        plan = new_plan(rt)
        rt.lifecycle.run_plan(plan.plan_id, through="apply")

        def failed() -> Plan | None:
            found = rt.plans.get(plan.plan_id)
            return found if found is not None and found.status is PlanStatus.failed else None

        stopped = wait_for(failed, timeout=30, what="execute to fail")
        assert stopped.label == "Execute/FAILED"
        assert stopped.pipeline_dict() is not None
        assert stopped.pipeline_dict()["state"] == "failed"  # type: ignore[index]
        assert phases_queued(rt, plan.plan_id) == ["strategize", "execute"]
        failed_job = rt.jobs.list_by_plan(plan.plan_id)[-1]
        new, _ = rt.service.jobs.retry(failed_job.job_id)
        assert new is not None
        done = pipeline_reaches(rt, plan.plan_id, PipelineState.done)
        assert done.label == "Apply/COMPLETE"
        assert ("retried", "execute") in kinds(rt, plan.plan_id)


def test_bad_input_is_a_typed_error_and_writes_nothing(idle: Runtime) -> None:
    plan = new_plan(idle)
    before = idle.plans.get(plan.plan_id)
    task = idle.app.tasks["planq.run_plan"]
    with pytest.raises(PipelineError, match="through must be one of"):
        task.delay(plan.plan_id, through="deploy")
    with pytest.raises(PipelineError, match="approve_before=apply must come after"):
        task.delay(plan.plan_id, through="execute", approve_before="apply")
    with pytest.raises(PipelineError, match="approve_before=strategize"):
        task.delay(plan.plan_id, through="apply", approve_before="strategize")
    with pytest.raises(NotAwaitingApprovalError):
        idle.lifecycle.approve_plan(plan.plan_id, actor="gina")
    with pytest.raises(PlanNotFoundError):
        task.delay("01HXYZ01HXYZ01HXYZ01HXYZ01")
    with pytest.raises(TypeError):
        task.delay(plan.plan_id, "apply", None, "me", "extra")
    assert idle.plans.get(plan.plan_id) == before
    assert idle.jobs.list_by_plan(plan.plan_id) == []
    assert idle.lifecycle.plan_events(plan.plan_id) == []
    idle.lifecycle.run_plan(plan.plan_id, through="strategize")
    with pytest.raises(InvalidPlanTransitionError):  # queued: nothing to start now
        idle.lifecycle.run_plan(plan.plan_id, through="apply")


def test_a_plan_waiting_at_its_gate_cannot_be_queued_past_it(runtime: Runtime) -> None:
    plan = new_plan(runtime)
    runtime.lifecycle.run_plan(plan.plan_id, through="apply", approve_before="apply")
    waiting = pipeline_reaches(runtime, plan.plan_id, PipelineState.awaiting_approval)
    with pytest.raises(InvalidPlanTransitionError, match="awaiting approval"):
        runtime.app.tasks["planq.apply_plan"].delay(plan.plan_id)
    assert runtime.plans.get(plan.plan_id) == waiting
    assert phases_queued(runtime, plan.plan_id) == ["strategize", "execute"]


def test_a_next_phase_committed_but_never_published_is_sent_by_the_relay_once(
    runtime: Runtime,
) -> None:
    """The window between the finish's commit and the publish (a process that dies there)."""
    lost: list[str] = []

    def dies_before_publishing(jobs: Any) -> None:
        if all(job.phase is PlanPhase.strategize for job in jobs):
            runtime.publish(jobs)  # run_plan's first phase goes out as usual
            return
        lost.extend(j.job_id for j in jobs)
        raise ConnectionError("the process died before it published")

    runtime.ledger.enqueue = dies_before_publishing  # the process's one ledger
    plan = new_plan(runtime)
    first = runtime.lifecycle.run_plan(plan.plan_id, through="execute").job
    assert first is not None

    def execute_queued_unsent() -> bool:
        jobs = runtime.jobs.list_by_plan(plan.plan_id)
        return [j.phase for j in jobs] == [PlanPhase.strategize, PlanPhase.execute]

    wait_for(execute_queued_unsent, timeout=30, what="execute queued by the finish")
    assert len(lost) == 1
    row = runtime.jobs.get(lost[0])
    assert row is not None and row.status is AsyncJobStatus.queued and row.dispatched_at is None
    runtime.ledger.enqueue = runtime.publish  # a live process's relay
    assert runtime.service.jobs.relay(unsent_grace=0.0) == [lost[0]]
    done = pipeline_reaches(runtime, plan.plan_id, PipelineState.done)
    assert done.label == "Execute/COMPLETE"
    assert phases_queued(runtime, plan.plan_id) == ["strategize", "execute"]
    assert [k for k in kinds(runtime, plan.plan_id) if k == ("started", "execute")] == [
        ("started", "execute")
    ]


def expired_waits() -> float:
    """Expiries the approval-wait histogram of this process has seen."""
    labels = {"decision": "expired"}
    return REGISTRY.get_sample_value("planq_plan_approval_wait_seconds_count", labels) or 0.0


def test_a_gate_nobody_decides_in_time_expires_the_plan(idle: Runtime) -> None:
    expiries = expired_waits()
    plan = new_plan(idle)
    idle.lifecycle.run_plan(
        plan.plan_id, through="apply", approve_before="execute", approval_timeout=0.5
    )
    (job,) = idle.jobs.list_by_plan(plan.plan_id)
    assert idle.worker.run_job(job.job_id).value == "succeeded"
    assert idle.plans.get(plan.plan_id).pipeline_state is PipelineState.awaiting_approval  # type: ignore[union-attr]
    idle.worker.detect_stuck_jobs()  # too early: still waiting
    assert idle.plans.get(plan.plan_id).pipeline_state is PipelineState.awaiting_approval  # type: ignore[union-attr]

    def expired() -> Plan | None:
        idle.worker.detect_stuck_jobs()  # the beat sweep that also ends forgotten gates
        found = idle.plans.get(plan.plan_id)
        return found if found and found.pipeline_state is PipelineState.expired else None

    ended = wait_for(expired, timeout=30, what="the gate to expire")
    assert ended.label == "Strategize/COMPLETE"
    assert expired_waits() == expiries + 1  # the wait histogram, as the worker serves it
    with pytest.raises(NotAwaitingApprovalError):
        idle.lifecycle.approve_plan(plan.plan_id, actor="late")
    last = idle.lifecycle.plan_events(plan.plan_id)[-1]
    assert (last.kind, last.phase, last.actor) == ("expired", PlanPhase.execute, "timeout")
    assert phases_queued(idle, plan.plan_id) == ["strategize"]


def test_an_approval_timeout_needs_a_gate_and_a_sane_number(idle: Runtime) -> None:
    plan = new_plan(idle)
    with pytest.raises(PipelineError, match="needs approve_before"):
        idle.lifecycle.run_plan(plan.plan_id, through="apply", approval_timeout=60)
    with pytest.raises(BoundsError, match="approval_timeout"):
        idle.lifecycle.run_plan(
            plan.plan_id, through="apply", approve_before="apply", approval_timeout=-1
        )
    assert idle.jobs.list_by_plan(plan.plan_id) == []
    assert idle.lifecycle.plan_events(plan.plan_id) == []


def test_cancelling_a_pipelines_phase_job_records_who_and_stops_it(
    redis_url: str, database_url: str
) -> None:
    app = app_for(redis_url, database_url, executors={"execute": f"{EXEC}:waits_for_cancel"})
    with embedded_runtime(app) as rt:
        plan = new_plan(rt)
        rt.lifecycle.run_plan(plan.plan_id, through="apply")

        def execute_running() -> str | None:
            for job in rt.jobs.list_by_plan(plan.plan_id):
                if job.phase is PlanPhase.execute and job.status is AsyncJobStatus.running:
                    return job.job_id
            return None

        job_id = wait_for(execute_running, timeout=30, what="execute to run")
        assert rt.worker.cancel_job(job_id, actor="cli:ops")
        stopped = wait_for(
            lambda: (
                (p := rt.plans.get(plan.plan_id)) is not None
                and p.status is PlanStatus.cancelled
                and p
            ),
            timeout=30,
            what="the phase to end cancelled",
        )
        assert stopped.pipeline_dict()["state"] == "cancelled"  # type: ignore[index]
        assert phases_queued(rt, plan.plan_id) == ["strategize", "execute"]
        trail = rt.lifecycle.plan_events(plan.plan_id)
        asked = [e for e in trail if e.kind == "cancel_requested"]
        assert [(e.job_id, e.actor) for e in asked] == [(job_id, "cli:ops")]
        assert [(e.kind.value, e.phase.value if e.phase else None) for e in trail] == [
            ("queued", "strategize"),
            ("started", "strategize"),
            ("succeeded", "strategize"),
            ("queued", "execute"),
            ("started", "execute"),
            ("cancel_requested", "execute"),
            ("cancelled", "execute"),
        ]


def test_a_note_or_actor_with_a_secret_is_stored_redacted(idle: Runtime) -> None:
    secret = "hunter2secret"
    plan = new_plan(idle)
    idle.lifecycle.run_plan(plan.plan_id, through="execute", approve_before="execute")
    (job,) = idle.jobs.list_by_plan(plan.plan_id)
    assert idle.worker.run_job(job.job_id).value == "succeeded"
    idle.lifecycle.reject_plan(
        plan.plan_id, actor=f"ops password={secret}", note=f"token leaked: password={secret}"
    )
    last = idle.lifecycle.plan_events(plan.plan_id)[-1]
    assert last.kind == "rejected" and last.note is not None and last.actor is not None
    assert secret not in last.note and secret not in last.actor
    assert last.note.startswith("token leaked:")


def test_the_ttl_cleanup_removes_old_events_with_old_jobs(idle: Runtime) -> None:
    plan = new_plan(idle)
    idle.lifecycle.run_plan(plan.plan_id, through="strategize")
    (job,) = idle.jobs.list_by_plan(plan.plan_id)
    assert idle.worker.run_job(job.job_id).value == "succeeded"
    assert len(idle.lifecycle.plan_events(plan.plan_id)) == 4  # queued, started, succeeded, done
    assert idle.ledger.cleanup(3600.0) == 0  # nothing is an hour old
    assert len(idle.lifecycle.plan_events(plan.plan_id)) == 4
    assert idle.ledger.cleanup(0.0) == 1  # everything ended before now: the job and its trail
    assert idle.lifecycle.plan_events(plan.plan_id) == []
    assert idle.plans.get(plan.plan_id) is not None  # the plan itself is not the TTL's


def test_an_event_for_a_plan_that_is_gone_is_refused_and_nothing_is_kept(idle: Runtime) -> None:
    from planq.domain.ids import new_id
    from planq.domain.pipeline import EventKind, PlanEvent

    with pytest.raises(PlanNotFoundError):
        idle.plans.add_event(PlanEvent(plan_id=new_id(), kind=EventKind.approved))
    plan = new_plan(idle)
    idle.plans.add_event(PlanEvent(plan_id=plan.plan_id, kind=EventKind.approved, actor="ann"))
    assert [e.actor for e in idle.lifecycle.plan_events(plan.plan_id)] == ["ann"]


def ended_events(rt: Runtime, plan_id: str) -> list[tuple[str, str | None, str | None, str | None]]:
    """The trail's ends and cancel requests: (kind, job id, actor, note)."""
    wanted = ("succeeded", "failed", "cancelled", "cancel_requested")
    return [
        (e.kind.value, e.job_id, e.actor, e.note)
        for e in rt.lifecycle.plan_events(plan_id)
        if e.kind.value in wanted
    ]


@pytest.mark.parametrize("door", ["cancel", "cancel_queued"])
def test_a_queued_phase_cancelled_before_it_ran_is_on_the_trail(idle: Runtime, door: str) -> None:
    plan = new_plan(idle)
    idle.lifecycle.run_plan(plan.plan_id, through="apply")
    (job,) = idle.jobs.list_by_plan(plan.plan_id)
    if door == "cancel":
        assert idle.ledger.cancel(job.job_id, actor="cli:ops").value == "cancelled"
    else:  # a revoke nobody recorded, which a node ends on its own
        assert idle.ledger.cancel_queued(job.job_id, actor="flower")
    actor = "cli:ops" if door == "cancel" else "flower"
    assert ended_events(idle, plan.plan_id) == [
        ("cancel_requested", job.job_id, actor, None),
        ("cancelled", job.job_id, None, None),
    ]


def test_a_phase_the_stuck_sweep_fails_is_on_the_trail(idle: Runtime) -> None:
    plan = new_plan(idle)
    idle.lifecycle.run_plan(plan.plan_id, through="apply")
    (job,) = idle.jobs.list_by_plan(plan.plan_id)
    assert idle.ledger.claim(job.job_id, "gone@host/1") is not None  # a holder that then dies
    swept = wait_for(
        lambda: idle.ledger.expire_stuck(0.01) or None, timeout=30, what="the stuck sweep"
    )
    assert [j.job_id for j in swept] == [job.job_id]
    assert ended_events(idle, plan.plan_id) == [("failed", job.job_id, None, "heartbeat expired")]
    assert phases_queued(idle, plan.plan_id) == ["strategize"]  # a failed phase stops it


def test_a_phase_no_worker_picked_up_is_on_the_trail(idle: Runtime) -> None:
    plan = new_plan(idle)
    idle.lifecycle.run_plan(plan.plan_id, through="apply")
    (job,) = idle.jobs.list_by_plan(plan.plan_id)
    assert idle.ledger.fail_undeliverable(job, 5)
    note = "never picked up after 5 dispatches"
    assert ended_events(idle, plan.plan_id) == [("failed", job.job_id, None, note)]
