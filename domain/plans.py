"""Plans and the phase rules: strategize, then execute, then apply."""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from domain.clock import as_utc, utcnow
from domain.errors import InvalidPlanTransitionError
from domain.ids import is_ulid, new_id


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
    version: int = Field(default=0, ge=0)

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

    @field_validator("spec_json")
    @classmethod
    def _spec_object(cls, value: str) -> str:
        data = json.loads(value)
        if not isinstance(data, dict):
            raise ValueError("spec_json must be a JSON object")
        steps = data.get("steps", [])
        if not isinstance(steps, list):
            raise ValueError("spec_json 'steps' must be a list")
        return value

    @classmethod
    def with_steps(cls, steps: list[dict[str, Any]] | list[str], name: str = "") -> Plan:
        """A new plan whose spec lists these steps (names or step objects)."""
        normalised = [{"name": s} if isinstance(s, str) else dict(s) for s in steps]
        return cls(name=name, spec_json=json.dumps({"steps": normalised}))

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
        }
