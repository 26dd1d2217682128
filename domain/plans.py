"""Plans and the phase rules: strategize, then execute, then apply."""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from planq.domain.bounds import (
    INT32_MAX,
    MAX_PLAN_NAME_LENGTH,
    MAX_SPEC_BYTES,
    MAX_STEP_NAME_LENGTH,
    MAX_STEP_SECONDS,
    MAX_STEPS,
    check_int,
    check_json_text,
    check_json_value,
    check_number,
    check_text,
    describe,
)
from planq.domain.clock import as_utc, utcnow
from planq.domain.errors import BoundsError, InvalidPlanTransitionError, WrongTypeError
from planq.domain.ids import is_ulid, new_id


class PlanPhase(StrEnum):
    """The three phases, in the order a plan goes through them."""

    strategize = "strategize"
    execute = "execute"
    apply = "apply"


class PlanStatus(StrEnum):
    """The status of the plan's current phase."""

    queued = "queued"
    running = "running"
    complete = "complete"
    failed = "failed"
    cancelled = "cancelled"


class PipelineState(StrEnum):
    """Where a plan's pipeline stands (domain/pipeline.py); a failed phase shows on the plan."""

    running = "running"  #: a phase is queued or running; the next follows by itself
    awaiting_approval = "awaiting_approval"  #: the previous phase is complete; a person decides
    done = "done"  #: `through` succeeded
    rejected = "rejected"  #: a person said no at the gate
    cancelled = "cancelled"  #: the whole plan was cancelled
    expired = "expired"  #: nobody decided within its approval timeout


RERUNNABLE = frozenset({PlanStatus.failed, PlanStatus.cancelled})

#: What must be complete before a phase may be queued (None: a brand-new plan).
PHASE_PREREQUISITE: dict[PlanPhase, PlanPhase | None] = {
    PlanPhase.strategize: None,
    PlanPhase.execute: PlanPhase.strategize,
    PlanPhase.apply: PlanPhase.execute,
}

#: Moves a job outcome may make within the current phase.
STATUS_MOVES: dict[PlanStatus, frozenset[PlanStatus]] = {
    PlanStatus.queued: frozenset({PlanStatus.running, PlanStatus.cancelled, PlanStatus.failed}),
    PlanStatus.running: frozenset(
        {PlanStatus.complete, PlanStatus.failed, PlanStatus.cancelled, PlanStatus.queued}
    ),
    PlanStatus.complete: frozenset(),
    PlanStatus.failed: frozenset({PlanStatus.queued}),
    PlanStatus.cancelled: frozenset({PlanStatus.queued}),
}


def plan_label(phase: PlanPhase | None, status: PlanStatus | None) -> str:
    """Human form of a plan's state, e.g. 'Execute/QUEUED'."""
    if phase is None or status is None:
        return "New"
    return f"{phase.value.capitalize()}/{status.value.upper()}"


def can_queue_phase(phase: PlanPhase | None, status: PlanStatus | None, wanted: PlanPhase) -> bool:
    """Whether a plan in (phase, status) may queue the wanted phase."""
    if phase is wanted and status in RERUNNABLE:
        return True
    prerequisite = PHASE_PREREQUISITE[wanted]
    if prerequisite is None:
        return phase is None
    return phase is prerequisite and status is PlanStatus.complete


def check_plan_name(name: object) -> str:
    """A plan name fits plans.name: at most 200 chars, no NUL (empty is allowed)."""
    return check_text("name", name, MAX_PLAN_NAME_LENGTH, allow_empty=True)


def check_step(index: int, step: object) -> dict[str, Any]:
    """One step: a name, or {"name": str, "seconds": finite >= 0, "fail": str, ...}."""
    field = f"steps[{index}]"
    if isinstance(step, str):
        return {"name": check_text(f"{field}.name", step, MAX_STEP_NAME_LENGTH)}
    if not isinstance(step, dict):
        raise WrongTypeError(field, "must be a step name or a step object", describe(step))
    check_text(f"{field}.name", step.get("name"), MAX_STEP_NAME_LENGTH)
    if "seconds" in step:
        check_number(f"{field}.seconds", step["seconds"], 0.0, MAX_STEP_SECONDS)
    if step.get("fail") is not None:
        check_text(f"{field}.fail", step["fail"], MAX_STEP_NAME_LENGTH, allow_empty=True)
    return dict(step)


def check_steps(steps: object) -> list[dict[str, Any]]:
    """Steps are a real list (not a string, not a dict) of at most MAX_STEPS valid steps."""
    if not isinstance(steps, list):
        raise WrongTypeError("steps", "must be a list of steps", describe(steps))
    if len(steps) > MAX_STEPS:
        raise BoundsError("steps", f"must have at most {MAX_STEPS} steps", f"{len(steps)}")
    return [check_step(index, step) for index, step in enumerate(steps)]


def check_spec_json(text: object) -> str:
    """A spec: a JSON object within MAX_SPEC_BYTES whose optional 'steps' are valid steps."""
    data = check_json_text("spec_json", text, MAX_SPEC_BYTES)
    if not isinstance(data, dict):
        raise BoundsError("spec_json", "must be a JSON object", type(data).__name__)
    if "steps" in data:
        if not isinstance(data["steps"], list):
            raise BoundsError("spec_json steps", "must be a list", type(data["steps"]).__name__)
        try:
            check_steps(data["steps"])
        except BoundsError as exc:
            raise BoundsError(f"spec_json {exc.field}", exc.limit, exc.got) from None
    assert isinstance(text, str)
    return text


class Plan(BaseModel):
    """A plan and where it stands; its spec lists the steps the executors walk."""

    model_config = ConfigDict(validate_assignment=True)

    plan_id: str = Field(default_factory=new_id)
    name: str = ""
    phase: PlanPhase | None = None
    status: PlanStatus | None = None
    spec_json: str = '{"steps": []}'
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    version: int = Field(default=0, ge=0, le=INT32_MAX)
    #: The pipeline (None: phases are queued one at a time, as the spec says).
    pipeline_through: PlanPhase | None = None
    pipeline_gate: PlanPhase | None = None
    pipeline_state: PipelineState | None = None
    #: Seconds a decision may take once the plan waits at its gate (None: no limit).
    pipeline_approval_timeout: float | None = None
    #: Who ran the pipeline (the four-eyes rule: not its approver), from the credential.
    pipeline_started_by: str | None = None
    #: Distinct approvers the gate needs (None: one).
    pipeline_approvals: int | None = Field(default=None, ge=1, le=10)
    #: Who approved the current wait so far, in order (cleared when a wait begins).
    pipeline_approved_by: list[str] = Field(default_factory=list)
    #: The pipeline's own webhook receivers (`--notify`), beside PLANQ_WEBHOOK_URLS.
    pipeline_notify: list[str] = Field(default_factory=list)

    @field_validator("plan_id")
    @classmethod
    def _ulid(cls, value: str) -> str:
        if not is_ulid(value):
            raise ValueError("must be a non-empty ULID string")
        return value.upper()

    @field_validator("created_at", "updated_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return as_utc(value)

    @field_validator("pipeline_approved_by", "pipeline_notify", mode="before")
    @classmethod
    def _json_list(cls, value: object) -> object:
        """The ledger keeps these lists as JSON text (NULL: none)."""
        if value is None:
            return []
        return json.loads(value) if isinstance(value, str) else value

    @field_validator("spec_json")
    @classmethod
    def _spec_object(cls, value: str) -> str:
        return check_spec_json(value)

    @field_validator("name")
    @classmethod
    def _name_fits(cls, value: str) -> str:
        return check_plan_name(value)

    @classmethod
    def with_steps(cls, steps: list[dict[str, Any]] | list[str], name: str = "") -> Plan:
        """A new plan whose spec lists these steps (names or step objects).

        Bad steps or name raise BoundsError (WrongTypeError for a non-list) before any
        plan exists: steps="abc" is refused, not three steps.
        """
        normalised = check_steps(steps)
        check_plan_name(name)
        spec_json = check_json_value("spec_json", {"steps": normalised}, MAX_SPEC_BYTES)
        return cls(name=name, spec_json=spec_json)

    def check_fields(self) -> None:
        """Re-check the bounded fields (model_copy and model_construct skip validation)."""
        check_text("plan_id", self.plan_id, 26)
        check_plan_name(self.name)
        check_spec_json(self.spec_json)
        check_int("version", self.version, 0, INT32_MAX)

    @property
    def spec(self) -> dict[str, Any]:
        """The parsed spec."""
        data: dict[str, Any] = json.loads(self.spec_json)
        return data

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The steps the executors walk, in order."""
        return list(self.spec.get("steps", []))

    @property
    def label(self) -> str:
        """e.g. 'Execute/COMPLETE'."""
        return plan_label(self.phase, self.status)

    def queue_phase(self, wanted: PlanPhase) -> None:
        """Move to <wanted>/QUEUED, or raise InvalidPlanTransitionError."""
        if not can_queue_phase(self.phase, self.status, wanted):
            raise InvalidPlanTransitionError(
                self.plan_id, self.label, plan_label(wanted, PlanStatus.queued)
            )
        if self.pipeline_state is PipelineState.awaiting_approval:  # only approval passes
            raise InvalidPlanTransitionError(
                self.plan_id,
                f"{self.label} (awaiting approval)",
                plan_label(wanted, PlanStatus.queued),
            )
        # both fields move together (assigning one at a time would trip the validator)
        self.__dict__.update(phase=wanted, status=PlanStatus.queued)
        self.updated_at = utcnow()

    def follow_job(self, phase: PlanPhase, status: PlanStatus) -> bool:
        """Apply a job outcome of phase; False (no change) if the plan has moved on."""
        if self.phase is not phase or self.status is None:
            return False
        if self.status is status:
            return False
        if status not in STATUS_MOVES[self.status]:
            raise InvalidPlanTransitionError(self.plan_id, self.label, plan_label(phase, status))
        self.status = status
        self.updated_at = utcnow()
        return True

    def as_cli_dict(self) -> dict[str, Any]:
        """A stable, JSON-ready view for the CLI."""
        return {
            "plan_id": self.plan_id,
            "name": self.name,
            "phase": self.phase.value if self.phase else None,
            "status": self.status.value if self.status else None,
            "state": self.label,
            "steps": len(self.steps),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "pipeline": self.pipeline_dict(),
        }

    def pipeline_dict(self) -> dict[str, Any] | None:
        """The pipeline as the CLI and the API show it (None without one)."""
        if self.pipeline_state is None:
            return None
        state = self.pipeline_state.value
        if self.pipeline_state is PipelineState.running and self.status in RERUNNABLE:
            state = self.status.value  # its phase stopped it; `jobs retry` resumes it
        return {
            "state": state,
            "through": self.pipeline_through.value if self.pipeline_through else None,
            "approve_before": self.pipeline_gate.value if self.pipeline_gate else None,
            "approval_timeout": None
            if self.pipeline_approval_timeout is None
            else f"{self.pipeline_approval_timeout:g}",
        }
