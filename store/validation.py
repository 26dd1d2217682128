"""Argument checks at the store boundary, shared by every implementation."""

from __future__ import annotations

from collections.abc import Sequence

from domain.jobs import AsyncJob, AsyncJobStatus
from domain.plans import Plan


def check_job(job: object) -> None:
    """TypeError unless job is an AsyncJob."""
    if not isinstance(job, AsyncJob):
        raise TypeError(f"expected an AsyncJob, got {type(job).__name__}")


def check_plan(plan: object) -> None:
    """TypeError unless plan is a Plan."""
    if not isinstance(plan, Plan):
        raise TypeError(f"expected a Plan, got {type(plan).__name__}")


def check_job_id(job_id: object) -> None:
    """ValueError for an empty or non-string job id."""
    if not isinstance(job_id, str) or not job_id.strip():
        raise ValueError("job_id must be a non-empty string")


def check_status(status: object) -> None:
    """TypeError unless status is an AsyncJobStatus."""
    if not isinstance(status, AsyncJobStatus):
        raise TypeError(f"status must be an AsyncJobStatus, got {type(status).__name__}")


def check_fresh_jobs(jobs: Sequence[object]) -> None:
    """ValueError unless jobs are new queued first attempts of one phase, one per plan."""
    if not jobs:
        raise ValueError("nothing to queue: no jobs given")
    for job in jobs:
        check_job(job)
    typed = [j for j in jobs if isinstance(j, AsyncJob)]
    if len({j.phase for j in typed}) != 1:
        raise ValueError("one queue call queues one phase")
    if len({j.plan_id for j in typed}) != len(typed):
        raise ValueError("a plan can be queued once per call")
    for job in typed:
        if job.status is not AsyncJobStatus.queued or job.attempt != 1 or job.retry_of:
            raise ValueError(f"job {job.job_id} is not a new first attempt")
