"""Every planq error, under one root, with retryability declared where it is defined."""

from __future__ import annotations

from typing import Any


class PlanqError(Exception):
    """Something in planq went wrong."""

    retryable: bool = False

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class InvalidJobTransitionError(PlanqError):
    """The job state machine forbids this move."""

    def __init__(self, job_id: str, from_status: str, to_status: str) -> None:
        self.job_id = job_id
        self.from_status = from_status
        self.to_status = to_status
        super().__init__(f"job {job_id}: cannot move from {from_status!r} to {to_status!r}")


class InvalidPlanTransitionError(PlanqError):
    """The plan is not in a state that allows this phase."""

    def __init__(self, plan_id: str, current: str, wanted: str) -> None:
        self.plan_id = plan_id
        self.current = current
        self.wanted = wanted
        super().__init__(f"plan {plan_id}: cannot go from {current} to {wanted}")


class PlanNotFoundError(PlanqError):
    """No plan has this id."""

    def __init__(self, plan_id: str) -> None:
        self.plan_id = plan_id
        super().__init__(f"no plan with id {plan_id!r}")


class JobNotFoundError(PlanqError):
    """No job has this id."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"no job with id {job_id!r}")


class InvalidIdError(PlanqError, ValueError):
    """An id is not a valid ULID."""

    def __init__(self, what: str, value: object) -> None:
        self.what = what
        self.value = value
        shown = repr(value)
        if len(shown) > 60:  # a huge value never makes a huge message
            shown = f"{shown[:40]}… ({type(value).__name__} of {len(shown)} chars)"
        super().__init__(f"{what} must be a ULID string, got {shown}")


class DuplicateJobError(PlanqError, ValueError):
    """A job with this id is already in the ledger."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id!r} already exists")


class ConcurrentUpdateError(PlanqError):
    """Someone else changed this row since it was read; read it again and retry."""

    retryable = True


class LedgerUnavailableError(PlanqError):
    """The ledger database cannot be reached right now; the operation may be retried."""

    retryable = True


class EmbeddedWorkerError(PlanqError):
    """The in-process worker did not start or stop within its bound."""


class LedgerRejectedError(PlanqError):
    """The ledger refused a write for a reason that will not pass (a constraint, bad data).

    Not retryable: the same write fails the same way. The message names the operation and
    the constraint (or the error class) only, never the SQL text or its parameters, so it
    can be stored, logged and shown as it is: "ledger rejected the finish: ck_…".
    """

    retryable = False

    def __init__(self, operation: str, reason: str) -> None:
        self.operation = operation
        self.reason = reason
        super().__init__(f"ledger rejected the {operation}: {reason}")


class UnknownExecutorError(PlanqError, LookupError):
    """No executor is registered for this phase."""


class ConfigurationError(PlanqError, ValueError):
    """A setting is invalid; planq refuses to start with it."""


class RunNotFoundError(PlanqError, LookupError):
    """No recoverable run has this id (it may have been purged)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no recoverable run with id {run_id!r}")


class RunNotActiveError(PlanqError):
    """The run is no longer Running here (swept, finished or taken over); stop working on it."""

    def __init__(self, run_id: str, status: str | None) -> None:
        self.run_id = run_id
        self.status = status
        super().__init__(f"run {run_id} is not active (status {status!r}); stop working on it")


class RunFencedError(RunNotActiveError):
    """The process lost the run: its lease was revoked (swept) or taken by a later open.

    Every write of a run carries the lease epoch its store was opened with; a write under
    an older epoch is refused with this error and changes nothing. The engine turns it into
    "stop now, write nothing". A RunNotActiveError, so handlers that stop on that still do.
    """

    def __init__(
        self, run_id: str, held_epoch: int, current_epoch: int | None, status: str | None
    ) -> None:
        self.run_id = run_id
        self.status = status
        self.held_epoch = held_epoch
        self.current_epoch = current_epoch
        now = "" if current_epoch is None else f", now {current_epoch}, status {status!r}"
        PlanqError.__init__(
            self, f"run {run_id} is no longer held by this process (lease epoch {held_epoch}{now})"
        )


class BatchError(PlanqError, ValueError):
    """A batch of plan ids cannot be queued as given (empty, not a list, a plan twice)."""


class JobFailedError(PlanqError):
    """The job ended failed; `error` is the redacted text its ledger row keeps.

    What `AsyncResult.get()` raises for it: planq's own type, never an exception rebuilt
    from the worker's, so callers can catch it without knowing the executor's classes.
    """

    def __init__(self, job_id: str, error: str | None, info: dict[str, Any] | None = None) -> None:
        self.job_id = job_id
        self.error = error
        self.info: dict[str, Any] = dict(info or {})
        super().__init__(f"job {job_id} failed: {error or 'no error recorded'}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id, self.error, self.info))


class JobCancelledError(PlanqError):
    """The job ended cancelled (cancel_job, revoke, Flower); its checkpoint is in `info`."""

    def __init__(self, job_id: str, info: dict[str, Any] | None = None) -> None:
        self.job_id = job_id
        self.info: dict[str, Any] = dict(info or {})
        super().__init__(f"job {job_id} was cancelled")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id, self.info))


class BoundsError(PlanqError, ValueError):
    """A value is outside the limits of the boundary it was handed to; nothing was written.

    `field` names the argument or field, `limit` says what is allowed (the limits live in
    domain/bounds.py and the table in docs/reliability.md). The message is one line.
    """

    def __init__(self, field: str, limit: str, got: str | None = None) -> None:
        self.field = field
        self.limit = limit
        self.got = got
        tail = f", got {got}" if got else ""
        super().__init__(f"{field}: {limit}{tail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.limit, self.got))


class WrongTypeError(BoundsError, TypeError):
    """A value has the wrong type for its boundary (a BoundsError, and a TypeError too)."""


class PipelineError(PlanqError, ValueError):
    """A pipeline request that cannot be: an unknown phase, or phases in the wrong order."""


class NotAwaitingApprovalError(PlanqError):
    """The plan is not waiting at an approval gate (never was, or someone decided first)."""

    def __init__(self, plan_id: str, state: str) -> None:
        self.plan_id = plan_id
        self.state = state
        super().__init__(f"plan {plan_id} is not awaiting approval (pipeline: {state})")


class PrincipalError(PlanqError, ValueError):
    """A principal's name, role or expiry that cannot be (bad input: nothing is written)."""


class ForbiddenError(PlanqError):
    """The principal is known but may not do this (HTTP 403): a missing role, or four-eyes."""

    def __init__(self, message: str, code: str = "forbidden") -> None:
        self.code = code
        super().__init__(message)


class SelfApprovalError(ForbiddenError):
    """The principal that ran a pipeline may not approve its gate (PLANQ_APPROVAL_SELF=false)."""

    def __init__(self, plan_id: str, actor: str) -> None:
        self.plan_id = plan_id
        self.actor = actor
        super().__init__(
            f"plan {plan_id}: {actor} ran this pipeline and may not approve its gate "
            "(four-eyes: another principal with the approve role must; PLANQ_APPROVAL_SELF)",
            code="self_approval",
        )


class AlreadyApprovedError(PlanqError):
    """The principal's approval is already counted at this gate (it counts once)."""

    def __init__(self, plan_id: str, actor: str, have: int, need: int) -> None:
        self.plan_id = plan_id
        super().__init__(
            f"plan {plan_id}: {actor} already approved this gate ({have} of {need} approvals)"
        )


class NothingToCancelError(PlanqError):
    """A whole-plan cancel came too late: the pipeline ended and no job is left to stop."""

    def __init__(self, plan_id: str, why: str) -> None:
        self.plan_id = plan_id
        super().__init__(f"plan {plan_id}: nothing to cancel ({why})")


class CancelTooLateError(PlanqError):
    """A whole-plan cancel landed, but a running phase ended otherwise before it stopped."""

    def __init__(self, plan_id: str, job: Any) -> None:
        self.plan_id = plan_id
        self.job_id = str(job.job_id)
        at = job.finished_at.isoformat() if job.finished_at else "?"
        super().__init__(
            f"the cancel came too late: plan {plan_id}'s {job.phase.value} job {job.job_id} "
            f"ended {job.status.value} at {at} before it reached a safe point "
            "(the request is in the plan's events)"
        )


class PlanGoneError(PlanNotFoundError):
    """The job's plan no longer exists: a retry would have nothing to run (a refusal)."""

    def __init__(self, job_id: str, plan_id: str) -> None:
        self.job_id = job_id
        self.plan_id = plan_id
        PlanqError.__init__(
            self, f"job {job_id}'s plan {plan_id} no longer exists; nothing to retry"
        )


class UnknownRecoverableJobError(PlanqError, LookupError):
    """No recoverable job of this name is registered on the app."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        listed = ", ".join(sorted(known)) or "none are registered"
        super().__init__(f"unknown recoverable job {name[:80]!r} (known: {listed})")


class UnknownRunArgError(PlanqError, ValueError):
    """A trigger arg the recoverable job does not read (it would be silently ignored)."""


class NoRunningRunError(PlanqError):
    """A run cancel found no Running run of that job name to pause."""

    def __init__(self, name: str, latest: str | None) -> None:
        self.name = name
        state = f"its latest run is {latest}" if latest else "it has no runs"
        super().__init__(f"no Running run of {name!r} to cancel ({state})")


class AlreadyRetriedError(InvalidPlanTransitionError):
    """A retry found the job retried already, or its plan moved on from that failure."""

    def __init__(self, job_id: str, plan_id: str, current: str, wanted: str) -> None:
        self.plan_id, self.current, self.wanted, self.job_id = plan_id, current, wanted, job_id
        PlanqError.__init__(
            self, f"job {job_id} was already retried, or its plan has moved on (plan {current})"
        )
