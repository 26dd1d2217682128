"""The three phase tasks: `.delay(plan_id)` goes through the lifecycle, row first."""

from __future__ import annotations

from typing import Any

from celery import Celery, Task
from celery.result import AsyncResult

from domain.jobs import AsyncJob
from domain.plans import PlanPhase
from tasks.runtime import runtime_for


class PhaseTask(Task):  # type: ignore[misc]
    """A plan phase. Producers call delay(plan_id); the message carries only ids."""

    phase: PlanPhase
    acks_late = True
    reject_on_worker_lost = True
    ignore_result = True
    typing = False  # arguments are checked by the lifecycle, with typed errors

    def apply_async(
        self, args: Any = None, kwargs: Any = None, **options: Any
    ) -> AsyncResult | None:
        """Producer path: validate and record the job, then publish. Internal: just send."""
        kwargs = dict(kwargs or {})
        if "job_id" in kwargs:
            return super().apply_async(args, kwargs, **options)
        plan_id = args[0] if args else kwargs.get("plan_id")
        queued = runtime_for(self.app).lifecycle.queue_phase(plan_id, self.phase)
        return None if queued.job is None else self.AsyncResult(queued.job.job_id)

    def publish_job(self, job: AsyncJob) -> None:
        """Send the message for a committed row; task id = job id, args redacted for Flower."""
        kwargs = {"job_id": job.job_id, "plan_id": job.plan_id}
        redactor = runtime_for(self.app).redactor
        super().apply_async(
            (),
            kwargs,
            task_id=job.job_id,
            argsrepr="()",
            kwargsrepr=redactor(repr(kwargs)),
        )

    def run(self, job_id: str, plan_id: str | None = None) -> str:
        """Claim and run the job (a second delivery finds it claimed and drops it)."""
        return runtime_for(self.app).worker.run_job(job_id).value


def register_phase_tasks(app: Celery) -> dict[PlanPhase, PhaseTask]:
    """Create planq.strategize_plan, planq.execute_plan and planq.apply_plan on app."""
    created: dict[PlanPhase, PhaseTask] = {}
    for phase in PlanPhase:
        name = f"{phase.value}_plan"
        cls = type(name, (PhaseTask,), {"phase": phase, "name": f"planq.{name}"})
        created[phase] = app.register_task(cls())
    return created
