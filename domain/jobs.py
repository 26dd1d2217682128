"""The job: one phase of one plan, its payload and the state machine every store enforces."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from planq.domain.bounds import (
    ID_LENGTH,
    INT32_MAX,
    MAX_CHECKPOINT_BYTES,
    MAX_JSON_DEPTH,
    MAX_PAYLOAD_BYTES,
    MAX_SCHEMA_VERSION,
    MAX_TRACEBACK_LENGTH,
    MAX_WORKER_ID_LENGTH,
    MIN_SCHEMA_VERSION,
    check_int,
    check_json_text,
    check_json_value,
    check_number,
    check_optional_text,
    check_size,
    check_text,
    describe,
    json_depth_exceeds,
)
from planq.domain.bounds import MAX_ERROR_LENGTH as MAX_ERROR_LENGTH
from planq.domain.clock import as_utc, utcnow
from planq.domain.errors import BoundsError, InvalidJobTransitionError, WrongTypeError
from planq.domain.ids import is_ulid, new_id
from planq.domain.plans import PlanPhase
from planq.domain.redaction import BUILTIN, Redactor
from planq.domain.tracebacks import redact_traceback


class AsyncJobStatus(StrEnum):
    """Where a job is in its life; the last three are terminal."""

    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"


TERMINAL_STATUSES = frozenset(
    {AsyncJobStatus.succeeded, AsyncJobStatus.failed, AsyncJobStatus.cancelled}
)

ALLOWED_TRANSITIONS: dict[AsyncJobStatus, frozenset[AsyncJobStatus]] = {
    # queued -> failed: never picked up after max_dispatches publishes (the relay gives up)
    AsyncJobStatus.queued: frozenset(
        {AsyncJobStatus.running, AsyncJobStatus.cancelled, AsyncJobStatus.failed}
    ),
    AsyncJobStatus.running: frozenset(
        {AsyncJobStatus.succeeded, AsyncJobStatus.failed, AsyncJobStatus.cancelled}
    ),
    AsyncJobStatus.succeeded: frozenset(),
    AsyncJobStatus.failed: frozenset(),
    AsyncJobStatus.cancelled: frozenset(),
}


def sources_of(to_status: AsyncJobStatus) -> frozenset[AsyncJobStatus]:
    """The statuses a job may be in to move to to_status (the SQL CAS uses this)."""
    return frozenset(src for src, targets in ALLOWED_TRANSITIONS.items() if to_status in targets)


def can_transition_job(from_status: AsyncJobStatus, to_status: AsyncJobStatus) -> bool:
    """Whether the state machine allows from_status -> to_status."""
    for name, value in (("from_status", from_status), ("to_status", to_status)):
        if not isinstance(value, AsyncJobStatus):
            raise TypeError(f"{name} must be an AsyncJobStatus, got {type(value).__name__}")
    return to_status in ALLOWED_TRANSITIONS[from_status]


def check_worker_id(worker_id: object, *, optional: bool = False) -> str | None:
    """A worker id: a non-empty string that fits async_jobs.worker_id (None if optional)."""
    if optional and worker_id is None:
        return None
    return check_text("worker_id", worker_id, MAX_WORKER_ID_LENGTH)


def check_error_message(error: object) -> str | None:
    """A stored error: None or text of at most MAX_ERROR_LENGTH chars, without NUL."""
    return check_optional_text("error_message", error, MAX_ERROR_LENGTH, allow_empty=True)


def check_error_traceback(text: object) -> str | None:
    """A stored traceback: None or text of at most MAX_TRACEBACK_LENGTH chars, without NUL."""
    return check_optional_text("error_traceback", text, MAX_TRACEBACK_LENGTH, allow_empty=True)


def check_progress(progress: object) -> float | None:
    """Progress is None or a finite fraction between 0 and 1."""
    return None if progress is None else check_number("progress", progress, 0.0, 1.0)


class CheckpointJson(str):
    """A checkpoint as `serialise_checkpoint` wrote it: already strict, bounded JSON.

    Built only there. The store's check_checkpoint_json takes it as it is instead of
    parsing the text it was just serialised to: a checkpoint is validated once per write.
    """

    __slots__ = ()


def serialise_checkpoint(state: Mapping[str, Any], field: str = "checkpoint") -> CheckpointJson:
    """State as checkpoint JSON: strict, at most MAX_CHECKPOINT_BYTES, nested at most 64 deep."""
    return CheckpointJson(check_json_value(field, dict(state), MAX_CHECKPOINT_BYTES))


def check_checkpoint_json(text: object) -> str | None:
    """None, or strict JSON text of at most MAX_CHECKPOINT_BYTES, nested at most 64 deep.

    A CheckpointJson was checked when it was serialised: it comes back as a plain str,
    unparsed. Any other text is parsed here.
    """
    if text is None:
        return None
    if type(text) is CheckpointJson:
        return str(text)
    check_json_text("checkpoint_json", text, MAX_CHECKPOINT_BYTES)
    assert isinstance(text, str)
    return text


def check_job_fields(job: AsyncJob) -> None:
    """Re-check a job's bounded fields (model_copy and model_construct skip validation)."""
    check_text("job_id", job.job_id, 26)
    check_text("plan_id", job.plan_id, 26)
    for name, high in (("attempt", INT32_MAX), ("dispatch_count", INT32_MAX)):
        check_int(name, getattr(job, name), 0 if name == "dispatch_count" else 1, high)
    check_int("schema_version", job.schema_version, MIN_SCHEMA_VERSION, MAX_SCHEMA_VERSION)
    check_worker_id(job.worker_id, optional=True)
    check_error_message(job.error_message)
    check_error_traceback(job.error_traceback)
    check_progress(job.progress)
    check_checkpoint_json(job.checkpoint_json)
    deserialize_job_payload(job.payload_json)


def redact_error(error: str | None, redactor: Redactor) -> str | None:
    """Redact and bound an error message before it can reach the ledger."""
    if error is None:
        return None
    return redactor.bounded(str(error), MAX_ERROR_LENGTH)


def redact_error_traceback(text: str | None, redactor: Redactor) -> str | None:
    """Redact (the whole text, first) and bound a traceback before it can reach the ledger."""
    return None if text is None else redact_traceback(text, redactor)


# -- the payload: the versioned JSON each job carries, ids and small data, never objects --
PAYLOAD_KEYS = ("schema_version", "plan_id", "phase")
_PHASE_LENGTH = 16


def check_schema_version(value: object, field: str = "payload schema_version") -> int:
    """A schema version this planq can read: an int from 1 to MAX_SCHEMA_VERSION."""
    return check_int(field, value, MIN_SCHEMA_VERSION, MAX_SCHEMA_VERSION)


def serialize_job_payload(
    plan_id: str,
    phase: str,
    schema_version: int = 1,
    extra: dict[str, Any] | None = None,
) -> str:
    """Encode a job's input so queued messages survive adding fields later."""
    check_text("payload plan_id", plan_id, ID_LENGTH)
    check_text("payload phase", phase, _PHASE_LENGTH)
    check_schema_version(schema_version)
    if extra is not None and not isinstance(extra, dict):
        raise WrongTypeError("payload extra", "must be a dict", describe(extra))
    data: dict[str, Any] = dict(extra or {})
    data.update(schema_version=schema_version, plan_id=plan_id, phase=phase)
    check_json_value("payload", data, MAX_PAYLOAD_BYTES)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def deserialize_job_payload(text: str) -> dict[str, Any]:
    """Decode a payload: a JSON object with a schema_version this planq can read.

    Refused (BoundsError, naming the field): not a JSON object, over MAX_PAYLOAD_BYTES or
    MAX_JSON_DEPTH, or a schema_version that is missing, not an int, below 1 or too new.
    """
    if not isinstance(text, str) or not text.strip():
        raise BoundsError("payload", "text is empty; expected a JSON object")
    check_size("payload", text, MAX_PAYLOAD_BYTES)
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise BoundsError("payload", f"must nest at most {MAX_JSON_DEPTH} levels deep") from None
    except ValueError as exc:
        raise BoundsError("payload", f"is not valid JSON (expected a JSON object): {exc}") from None
    if not isinstance(data, dict):
        raise BoundsError("payload", f"must be a JSON object, got {type(data).__name__}")
    if json_depth_exceeds(data, MAX_JSON_DEPTH):
        raise BoundsError("payload", f"must nest at most {MAX_JSON_DEPTH} levels deep")
    if "schema_version" not in data:
        raise BoundsError("payload schema_version", "is missing from the JSON object")
    check_schema_version(data["schema_version"])
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


class AsyncJob(BaseModel):
    """One row of the job ledger, with the transitions allowed on it."""

    model_config = ConfigDict(validate_assignment=True, use_enum_values=False)

    job_id: str = Field(default_factory=new_id)
    plan_id: str
    phase: PlanPhase
    status: AsyncJobStatus = AsyncJobStatus.queued
    schema_version: int = Field(default=1, ge=MIN_SCHEMA_VERSION, le=MAX_SCHEMA_VERSION)
    payload_json: str = ""
    worker_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_heartbeat: datetime | None = None
    error_message: str | None = None
    #: A failed job's traceback (the executor's, chain and all): redacted, then bounded.
    error_traceback: str | None = None
    attempt: int = Field(default=1, ge=1, le=INT32_MAX)
    retry_of: str | None = None
    dispatched_at: datetime | None = None
    dispatch_count: int = Field(default=0, ge=0, le=INT32_MAX)
    cancel_requested_at: datetime | None = None
    progress: float | None = None
    checkpoint_json: str | None = None

    @field_validator("job_id", "plan_id")
    @classmethod
    def _must_be_ulid(cls, value: str) -> str:
        if not is_ulid(value):
            raise ValueError("must be a non-empty ULID string")
        return value.upper()

    @field_validator("retry_of")
    @classmethod
    def _retry_of_ulid(cls, value: str | None) -> str | None:
        if value is not None and not is_ulid(value):
            raise ValueError("must be a ULID string")
        return value.upper() if value else value

    @field_validator(
        "created_at",
        "started_at",
        "finished_at",
        "last_heartbeat",
        "dispatched_at",
        "cancel_requested_at",
    )
    @classmethod
    def _aware_utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)

    @field_validator("checkpoint_json")
    @classmethod
    def _checkpoint_is_json(cls, value: str | None) -> str | None:
        return check_checkpoint_json(value)

    @field_validator("worker_id")
    @classmethod
    def _worker_id_fits(cls, value: str | None) -> str | None:
        return check_worker_id(value, optional=True)

    @field_validator("error_message")
    @classmethod
    def _error_fits(cls, value: str | None) -> str | None:
        return check_error_message(value)

    @field_validator("error_traceback")
    @classmethod
    def _traceback_fits(cls, value: str | None) -> str | None:
        return check_error_traceback(value)

    @field_validator("progress")
    @classmethod
    def _progress_fits(cls, value: float | None) -> float | None:
        return check_progress(value)

    @model_validator(mode="after")
    def _payload_is_object(self) -> AsyncJob:
        if not self.payload_json:
            object.__setattr__(
                self,
                "payload_json",
                serialize_job_payload(self.plan_id, self.phase.value, self.schema_version),
            )
        else:
            data = deserialize_job_payload(self.payload_json)
            for key, mine in (("plan_id", self.plan_id), ("phase", self.phase.value)):
                if key in data and str(data[key]).upper() != mine.upper():
                    raise ValueError(
                        f"payload {key} {data[key]!r} does not match the job's {mine!r}"
                    )
        return self

    # -- state machine -------------------------------------------------------------
    def transition_to(self, status: AsyncJobStatus) -> None:
        """Move to status if the state machine allows it, else InvalidJobTransitionError."""
        if not isinstance(status, AsyncJobStatus):
            raise TypeError(f"status must be an AsyncJobStatus, got {type(status).__name__}")
        if not can_transition_job(self.status, status):
            raise InvalidJobTransitionError(self.job_id, self.status.value, status.value)
        self.status = status

    def mark_running(self, worker_id: str) -> None:
        """Claim the job for worker_id; the heartbeat starts now."""
        check_worker_id(worker_id)
        self.transition_to(AsyncJobStatus.running)
        now = utcnow()
        self.worker_id = worker_id
        self.started_at = now
        self.last_heartbeat = now

    def mark_succeeded(self) -> None:
        """Finish successfully."""
        self.transition_to(AsyncJobStatus.succeeded)
        self.finished_at = utcnow()

    def mark_failed(self, error: str | None = None) -> None:
        """Finish with an error; the message is redacted before it is kept."""
        self.transition_to(AsyncJobStatus.failed)
        self.finished_at = utcnow()
        self.error_message = redact_error(error, BUILTIN)  # the spec's model: built-in only

    def mark_cancelled(self) -> None:
        """Finish as cancelled (from queued or running)."""
        self.transition_to(AsyncJobStatus.cancelled)
        self.finished_at = utcnow()

    def record_heartbeat(self) -> None:
        """Show the job is alive; only a running job has a heartbeat."""
        if self.status is not AsyncJobStatus.running:
            raise ValueError(f"job {self.job_id} is {self.status.value}, not running")
        self.last_heartbeat = utcnow()

    # -- views ---------------------------------------------------------------------
    @property
    def is_terminal(self) -> bool:
        """Whether nothing can happen to this job any more."""
        return self.status in TERMINAL_STATUSES

    @property
    def is_running(self) -> bool:
        """Whether a worker holds the job now."""
        return self.status is AsyncJobStatus.running

    @property
    def payload(self) -> dict[str, Any]:
        """The parsed payload."""
        return deserialize_job_payload(self.payload_json)

    @property
    def checkpoint(self) -> dict[str, Any] | None:
        """The last checkpoint the executor saved, if any."""
        if self.checkpoint_json is None:
            return None
        data = json.loads(self.checkpoint_json)
        return data if isinstance(data, dict) else {"value": data}

    def as_cli_dict(self) -> dict[str, Any]:
        """A stable, JSON-ready view for the CLI and scripts."""
        out: dict[str, Any] = {
            "job_id": self.job_id,
            "plan_id": self.plan_id,
            "phase": self.phase.value,
            "status": self.status.value,
            "worker_id": self.worker_id,
            "attempt": self.attempt,
            "created_at": self.created_at.isoformat(),
        }
        for key in ("started_at", "finished_at"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value.isoformat()
        if self.error_message is not None:
            out["error_message"] = self.error_message
        if self.progress is not None:
            out["progress"] = self.progress
        if self.retry_of is not None:
            out["retry_of"] = self.retry_of
        return out


class UnreadableJob(AsyncJob):
    """A stored job row the domain refuses (a corrupt payload or checkpoint), as stored.

    Built only by a store's listing (`of`: nothing re-validated), so one bad row is listed
    with its problem named instead of failing the whole page. It is never written back:
    every store write re-checks the payload and refuses it.
    """

    problem: str = ""

    @classmethod
    def of(cls, values: Mapping[str, Any], error: Exception) -> UnreadableJob:
        """The row's columns as they are, with why the domain refuses them (one line)."""
        fields = dict(values)
        fields["status"] = AsyncJobStatus(fields["status"])  # the schema's CHECKs hold these
        fields["phase"] = PlanPhase(fields["phase"])
        return cls.model_construct(**fields, problem=_one_line(error))

    @property
    def checkpoint(self) -> dict[str, Any] | None:
        """The checkpoint if it parses (it may be what is wrong), else None."""
        try:
            return super().checkpoint
        except ValueError:
            return None

    def as_cli_dict(self) -> dict[str, Any]:
        """The stored fields, and `unreadable`: why the domain refuses the row."""
        return {**super().as_cli_dict(), "unreadable": self.problem}


def _one_line(error: Exception, limit: int = 300) -> str:
    errors = getattr(error, "errors", None)  # pydantic's ValidationError: one line per field
    if callable(errors):
        text = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'row'}: {e['msg']}" for e in errors()
        )
    else:
        text = f"{type(error).__name__}: {error}"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
