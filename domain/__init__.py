"""planq's domain: plain Python and pydantic, no framework imports.

Its public names load on first use (domain/exports.py), so importing one submodule, as the
CLI's listings do, does not import every module named here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planq.domain.exports import lazy_exports

if TYPE_CHECKING:  # what type checkers see: the names, as if imported here (see __all__)
    from planq.domain.cancellation import CancellationToken
    from planq.domain.config import AsyncWorkerConfig
    from planq.domain.errors import (
        ConcurrentUpdateError,
        DuplicateJobError,
        InvalidIdError,
        InvalidJobTransitionError,
        InvalidPlanTransitionError,
        JobNotFoundError,
        PlanNotFoundError,
        PlanqError,
    )
    from planq.domain.health import WorkerHealthReport
    from planq.domain.jobs import (
        AsyncJob,
        AsyncJobStatus,
        can_transition_job,
        deserialize_job_payload,
        serialize_job_payload,
    )
    from planq.domain.ledger import JobLedger
    from planq.domain.lifecycle import PhaseQueued, PlanLifecycleService
    from planq.domain.plans import Plan, PlanPhase, PlanStatus
    from planq.domain.ports import CancelOutcome, JobStore, PlanStore
    from planq.domain.redaction import redact_secrets
    from planq.domain.runs import (
        Completed,
        Failed,
        Finding,
        JobOutcome,
        Paused,
        RecoverableJobHandler,
        RunOutcome,
        RunStatus,
        RunStore,
        RunStoreProvider,
        RunSummary,
        Severity,
        run_or_resume,
    )


EXPORTS: dict[str, tuple[str, ...]] = {
    "planq.domain.cancellation": ("CancellationToken",),
    "planq.domain.config": ("AsyncWorkerConfig",),
    "planq.domain.errors": (
        "ConcurrentUpdateError",
        "DuplicateJobError",
        "InvalidIdError",
        "InvalidJobTransitionError",
        "InvalidPlanTransitionError",
        "JobNotFoundError",
        "PlanNotFoundError",
        "PlanqError",
    ),
    "planq.domain.health": ("WorkerHealthReport",),
    "planq.domain.jobs": (
        "AsyncJob",
        "AsyncJobStatus",
        "can_transition_job",
        "deserialize_job_payload",
        "serialize_job_payload",
    ),
    "planq.domain.ledger": ("JobLedger",),
    "planq.domain.lifecycle": (
        "PhaseQueued",
        "PlanLifecycleService",
    ),
    "planq.domain.plans": (
        "Plan",
        "PlanPhase",
        "PlanStatus",
    ),
    "planq.domain.ports": (
        "CancelOutcome",
        "JobStore",
        "PlanStore",
    ),
    "planq.domain.redaction": ("redact_secrets",),
    "planq.domain.runs": (
        "Completed",
        "Failed",
        "Finding",
        "JobOutcome",
        "Paused",
        "RecoverableJobHandler",
        "RunOutcome",
        "RunStatus",
        "RunStore",
        "RunStoreProvider",
        "RunSummary",
        "Severity",
        "run_or_resume",
    ),
}
__all__ = [
    "AsyncJob",
    "AsyncJobStatus",
    "AsyncWorkerConfig",
    "CancelOutcome",
    "CancellationToken",
    "Completed",
    "ConcurrentUpdateError",
    "DuplicateJobError",
    "Failed",
    "Finding",
    "InvalidIdError",
    "InvalidJobTransitionError",
    "InvalidPlanTransitionError",
    "JobLedger",
    "JobNotFoundError",
    "JobOutcome",
    "JobStore",
    "Paused",
    "PhaseQueued",
    "Plan",
    "PlanLifecycleService",
    "PlanNotFoundError",
    "PlanPhase",
    "PlanStatus",
    "PlanStore",
    "PlanqError",
    "RecoverableJobHandler",
    "RunOutcome",
    "RunStatus",
    "RunStore",
    "RunStoreProvider",
    "RunSummary",
    "Severity",
    "WorkerHealthReport",
    "can_transition_job",
    "deserialize_job_payload",
    "redact_secrets",
    "run_or_resume",
    "serialize_job_payload",
]  # the EXPORTS' names (tests/unit/test_lazy_exports.py)
__getattr__ = lazy_exports(__name__, EXPORTS)
