"""A plan's pipeline: which phases run by themselves, where a person must approve, and its events.

The pipeline lives on the plan row (`pipeline_through`, `pipeline_gate`, `pipeline_state`),
so the claim that returns the plan tells the worker whether its finish must advance it.
The rules here are pure: the ledger (domain/ledger.py) applies them inside the finish's
transaction, so a phase that succeeds and the next phase's job commit together.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from planq.domain.bounds import (
    MAX_DURATION_SECONDS,
    MAX_STEP_NAME_LENGTH,
    check_number,
    check_text,
)
from planq.domain.clock import as_utc, utcnow
from planq.domain.errors import PipelineError
from planq.domain.ids import new_id
from planq.domain.plans import PipelineState, Plan, PlanPhase, PlanStatus, can_queue_phase

#: The phases in the order a plan goes through them.
ORDER: tuple[PlanPhase, ...] = tuple(PlanPhase)
MAX_NOTE_LENGTH = 2000
MAX_ACTOR_LENGTH = MAX_STEP_NAME_LENGTH


class EventKind(StrEnum):
    """What a plan event records."""

    queued = "queued"
    started = "started"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    cancel_requested = "cancel_requested"
    awaiting_approval = "awaiting_approval"
    approved = "approved"
    rejected = "rejected"
    retried = "retried"
    done = "done"
    expired = "expired"
    approval_refused = "approval_refused"  #: four-eyes: the runner may not approve its gate


class PlanEvent(BaseModel):
    """One line of a plan's audit trail: append-only, its texts already redacted."""

    model_config = ConfigDict(frozen=True)

    event_id: str = Field(default_factory=new_id)
    plan_id: str
    at: datetime = Field(default_factory=utcnow)
    kind: EventKind
    phase: PlanPhase | None = None
    job_id: str | None = None
    actor: str | None = None
    note: str | None = None

    @field_validator("at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return as_utc(value)

    def as_cli_dict(self) -> dict[str, object]:
        """A stable, JSON-ready view."""
        return {
            "event_id": self.event_id,
            "at": self.at.isoformat(),
            "kind": self.kind.value,
            "phase": self.phase.value if self.phase else None,
            "job_id": self.job_id,
            "actor": self.actor,
            "note": self.note,
        }


def parse_phase(what: str, value: object) -> PlanPhase:
    """A phase named by a user; anything else is a PipelineError."""
    if isinstance(value, PlanPhase):
        return value
    if isinstance(value, str) and value.strip().lower() in PlanPhase.__members__:
        return PlanPhase(value.strip().lower())
    names = ", ".join(p.value for p in ORDER)
    raise PipelineError(f"{what} must be one of {names}, got {str(value)[:40]!r}")


def check_actor(actor: object) -> str | None:
    """Who acted: a short name, or None."""
    if actor is None or actor == "":
        return None
    return check_text("by", actor, MAX_ACTOR_LENGTH)


#: The most distinct approvers a gate may ask for.
MAX_APPROVALS = 10


def check_approvals(approvals: object, gate: PlanPhase | None) -> int | None:
    """How many distinct approvers open the gate (None: one); PipelineError without a gate."""
    if approvals is None:
        return None
    if isinstance(approvals, bool) or not isinstance(approvals, int):
        raise PipelineError(f"approvals must be a whole number, got {str(approvals)[:40]!r}")
    if not 1 <= approvals <= MAX_APPROVALS:
        raise PipelineError(f"approvals must be 1..{MAX_APPROVALS}, got {approvals}")
    if gate is None and approvals > 1:
        raise PipelineError("approvals needs approve_before: there is no gate to approve")
    return approvals


def check_note(note: object) -> str | None:
    """A person's note: bounded text, or None."""
    if note is None or note == "":
        return None
    return check_text("note", note, MAX_NOTE_LENGTH)


def next_phase(phase: PlanPhase) -> PlanPhase | None:
    """The phase after this one (None after apply)."""
    index = ORDER.index(phase)
    return ORDER[index + 1] if index + 1 < len(ORDER) else None


def first_phase(plan: Plan) -> PlanPhase | None:
    """The phase a pipeline on this plan starts with: the one it may queue now, if any."""
    for phase in ORDER:
        if can_queue_phase(plan.phase, plan.status, phase):
            return phase
    return None


@dataclass(frozen=True)
class PipelineRequest:
    """A checked run request: the phase it starts with, where it stops and where it waits."""

    start: PlanPhase
    through: PlanPhase
    gate: PlanPhase | None
    approval_timeout: float | None = None

    @classmethod
    def check(
        cls,
        start: PlanPhase,
        through: object,
        approve_before: object,
        approval_timeout: object = None,
    ) -> PipelineRequest:
        """Refuse (PipelineError) a stop before the start, or a gate outside (start, through].

        An approval timeout (seconds, BoundsError outside its range) needs a gate.
        """
        timeout = None
        if approval_timeout is not None:
            timeout = check_number("approval_timeout", approval_timeout, 0.1, MAX_DURATION_SECONDS)
            if approve_before in (None, ""):
                raise PipelineError("approval_timeout needs approve_before: there is no gate")
        stop = parse_phase("through", through)
        gate = (
            None if approve_before in (None, "") else parse_phase("approve_before", approve_before)
        )
        if ORDER.index(stop) < ORDER.index(start):
            raise PipelineError(
                f"through={stop.value} comes before {start.value}, the phase this plan runs next"
            )
        if gate is not None and not ORDER.index(start) < ORDER.index(gate) <= ORDER.index(stop):
            raise PipelineError(
                f"approve_before={gate.value} must come after {start.value} and no later than "
                f"through={stop.value}"
            )
        return cls(start, stop, gate, timeout)


class Step(StrEnum):
    """What a pipeline does when its phase succeeds."""

    queue_next = "queue_next"
    await_approval = "await_approval"
    done = "done"
    none = "none"  #: no running pipeline (or the plan moved on): the finish alone


def after_success(plan: Plan, phase: PlanPhase) -> tuple[Step, PlanPhase | None]:
    """The step a pipeline takes once `phase` succeeded (plan as the finish left it)."""
    if plan.pipeline_state is not PipelineState.running or plan.phase is not phase:
        return Step.none, None
    if plan.status is not PlanStatus.complete or plan.pipeline_through is None:
        return Step.none, None
    following = next_phase(phase)
    if following is None or ORDER.index(phase) >= ORDER.index(plan.pipeline_through):
        return Step.done, None
    if following is plan.pipeline_gate:
        return Step.await_approval, following
    return Step.queue_next, following


def finished_despite_cancel(plan: Plan, phase: PlanPhase) -> bool:
    """Whether a cancelled pipeline's last phase succeeded anyway (asked too late to stop).

    Then the pipeline is done, not cancelled: everything it was to run has run.
    """
    return (
        plan.pipeline_state is PipelineState.cancelled
        and plan.pipeline_through is phase
        and plan.phase is phase
        and plan.status is PlanStatus.complete
    )


@dataclass(frozen=True)
class GateSummary:
    """The plans waiting at an approval gate, read for the metrics endpoint's gauges.

    `waiting` counts no further than the reader's cap (at the cap it means "at least");
    `oldest_since` is when the longest-waiting one reached its gate (None: nobody waits).
    """

    waiting: int
    oldest_since: datetime | None


def waiting_for(plan: Plan) -> PlanPhase | None:
    """The phase a plan awaiting approval would run next (None if it is not waiting)."""
    if plan.pipeline_state is not PipelineState.awaiting_approval or plan.phase is None:
        return None
    return next_phase(plan.phase)


__all__ = ["EventKind", "GateSummary", "PipelineRequest", "PipelineState", "PlanEvent", "Step"]
