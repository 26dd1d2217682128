"""The compare-and-set rules every store executes, derived from the two state machines.

A store never spells a status: it asks here which source states a move may start from.
The job table is `domain.jobs.ALLOWED_TRANSITIONS`; the plan's are `STATUS_MOVES` (within
a phase) and `can_queue_phase` (between phases). A store runs the job's CAS and the
plan's CAS together, one statement on PostgreSQL; the plan moves only if it is still on
the job's phase and in a source state, so a plan that moved on is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from itertools import product

from planq.domain.jobs import AsyncJobStatus, sources_of
from planq.domain.plans import STATUS_MOVES, PipelineState, PlanPhase, PlanStatus, can_queue_phase

#: A plan waiting at its approval gate queues no phase: only an approval (which moves the
#: pipeline on first) lets the next one through. Part of every queue compare-and-set.
GATED = PipelineState.awaiting_approval

#: How a job status shows on its plan.
PLAN_STATUS_FOR_JOB: dict[AsyncJobStatus, PlanStatus] = {
    AsyncJobStatus.queued: PlanStatus.queued,
    AsyncJobStatus.running: PlanStatus.running,
    AsyncJobStatus.succeeded: PlanStatus.complete,
    AsyncJobStatus.failed: PlanStatus.failed,
    AsyncJobStatus.cancelled: PlanStatus.cancelled,
}


@dataclass(frozen=True)
class JobMove:
    """A job CAS: to `to` from one of `sources`, and the plan move that goes with it."""

    to: AsyncJobStatus
    sources: frozenset[AsyncJobStatus]
    plan_to: PlanStatus
    plan_sources: frozenset[PlanStatus]


@dataclass(frozen=True)
class PhaseQueueMove:
    """A plan CAS into <phase>/QUEUED from one of `sources` ((None, None) is a new plan)."""

    phase: PlanPhase
    sources: frozenset[tuple[PlanPhase | None, PlanStatus | None]]


@cache
def job_move(to: AsyncJobStatus, *, from_status: AsyncJobStatus | None = None) -> JobMove:
    """The CAS for a job moving to `to` (optionally only from one allowed source)."""
    sources = sources_of(to)
    if from_status is not None:
        if from_status not in sources:
            raise ValueError(f"a job cannot move from {from_status.value} to {to.value}")
        sources = frozenset({from_status})
    plan_to = PLAN_STATUS_FOR_JOB[to]
    plan_sources = frozenset(s for s, moves in STATUS_MOVES.items() if plan_to in moves)
    return JobMove(to, sources, plan_to, plan_sources)


@cache
def phase_queue_move(phase: PlanPhase) -> PhaseQueueMove:
    """The plan states from which `phase` may be queued, enumerated from can_queue_phase."""
    states: list[tuple[PlanPhase | None, PlanStatus | None]] = [(None, None)]
    states += list(product(PlanPhase, PlanStatus))
    return PhaseQueueMove(
        phase, frozenset((p, s) for p, s in states if can_queue_phase(p, s, phase))
    )


#: A worker's claim: queued -> running; the plan follows queued -> running.
CLAIM = job_move(AsyncJobStatus.running)


def finish_move(status: AsyncJobStatus) -> JobMove:
    """A worker ending the job it runs: running -> status (terminal)."""
    return job_move(status, from_status=AsyncJobStatus.running)


#: A cancel of a job no worker holds yet: queued -> cancelled.
CANCEL_QUEUED = job_move(AsyncJobStatus.cancelled, from_status=AsyncJobStatus.queued)
#: The stuck sweep: running (heartbeat too old) -> failed.
EXPIRE = job_move(AsyncJobStatus.failed, from_status=AsyncJobStatus.running)
#: The relay giving up on a row no worker picked up: queued -> failed.
UNDELIVERABLE = job_move(AsyncJobStatus.failed, from_status=AsyncJobStatus.queued)
