"""The embedded demo (filled in by the Celery issue): for now, the lifecycle on memory."""

from __future__ import annotations

from rich.console import Console

from domain import JobLedger, PlanLifecycleService
from domain.jobs import AsyncJobStatus
from store import in_memory_ledger


def run_demo() -> int:
    """Walk one plan through its three phases on the in-memory ledger."""
    console = Console()
    jobs, plans = in_memory_ledger()
    service = PlanLifecycleService(plans, jobs)
    ledger = JobLedger(jobs, plans)
    plan = service.create_plan(["fetch", "transform", "load"], name="demo")
    for queue in (service.strategize_plan, service.execute_plan, service.apply_plan):
        queued = queue(plan.plan_id)
        assert queued.job is not None
        claimed = ledger.claim(queued.job.job_id, "worker-demo")
        assert claimed is not None
        ledger.finish(claimed, AsyncJobStatus.succeeded)
        console.print(
            f"{queued.job.phase.value:<10} job {queued.job.job_id} -> "
            f"{service.get_plan(plan.plan_id).label}"
        )
    console.print("[dim]Celery-backed run: coming in the Celery issue[/dim]")
    return 0
