"""The three phase tasks: `.delay(plan_id)` goes through the lifecycle, row first."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from celery import Celery, Task
from celery.exceptions import Ignore
from celery.result import AsyncResult

from planq.domain.ids import is_ulid
from planq.domain.jobs import AsyncJob
from planq.domain.plans import PlanPhase
from planq.domain.redaction import describe_exception
from planq.tasks import tracing
from planq.tasks.engine import PickupResult
from planq.tasks.runtime import runtime_for

logger = logging.getLogger("planq.tasks")


class PhaseJobError(Exception):
    """What a phase task raises when its body failed: a redacted `ExcType: message`."""


class PhaseJobFailed(Exception):
    """The job ran and ended failed: its redacted ledger error, for Flower's FAILURE row."""


class ExecutorTraceback(Exception):
    """The failed job's stored traceback (redacted, bounded), as PhaseJobFailed's cause.

    Never raised: Celery formats the task's exception with its cause chain into the
    task-failed event's `traceback` (what Flower's task page shows), so the user's own
    frames are shown above planq's, from the row's redacted text only. The one-line
    `exception` Flower shows stays PhaseJobFailed's.
    """


class InvalidJobMessage(Exception):
    """A message that names no job (crafted, or not planq's): dropped, nothing run.

    An expected outcome (`throws`): one log line, no traceback, acked, FAILURE in Flower.
    """


#: How much of a bad message's job id a log line or Flower shows (redacted first).
SHOWN_ID_CHARS = 60


class PhaseTask(Task):  # type: ignore[misc]
    """A plan phase. Producers call delay(plan_id); the message carries only ids."""

    phase: PlanPhase
    acks_late = True
    reject_on_worker_lost = True
    ignore_result = True
    typing = False  # arguments are checked by the lifecycle, with typed errors
    throws = (PhaseJobFailed, InvalidJobMessage)  # expected: one log line, no traceback

    def apply_async(
        self, args: Any = None, kwargs: Any = None, **options: Any
    ) -> AsyncResult | None:
        """Producer path: validate and record the job in one statement, then publish.

        The only thing a producer passes is a plan id: a message for a job is sent by
        planq itself (Runtime.publish) once its row is committed, never from here.
        """
        kwargs = dict(kwargs or {})
        extra = set(kwargs) - {"plan_id"}
        if extra or (args and len(args) != 1) or (args and "plan_id" in kwargs):
            raise TypeError(
                f"{self.name} takes one argument, plan_id (got args={len(args or ())}, "
                f"kwargs={sorted(kwargs)}); jobs are published by planq from their ledger row"
            )
        plan_id = args[0] if args else kwargs.get("plan_id")
        queued = runtime_for(self.app).lifecycle.queue_phase(plan_id, self.phase)
        return None if queued.job is None else self.AsyncResult(queued.job.job_id)

    def delay_many(self, plan_ids: Sequence[str]) -> list[str]:
        """Queue this phase for many plans: one transaction, then every message; the job ids.

        All or nothing: a bad id, a missing plan or a plan not ready raises its typed error
        with nothing written and nothing published.
        """
        queued = runtime_for(self.app).lifecycle.queue_phases(plan_ids, self.phase)
        return [q.job.job_id for q in queued if q.job is not None]

    def publish_job(self, job: AsyncJob) -> None:
        """Send the message for a committed row again (the runtime's one publish path)."""
        runtime_for(self.app).publish([job])

    def run(self, *args: Any, job_id: Any = None, plan_id: Any = None, **_: Any) -> str:
        """Claim and run the job, then tell Celery (and so Flower) what the ledger says.

        succeeded -> SUCCESS; failed -> FAILURE with the row's redacted error (and, as its
        cause, the row's redacted traceback: Flower shows the user's frames); cancelled
        -> REVOKED; a delivery that found the job owned or ended elsewhere -> IGNORED (so
        a dropped duplicate never overwrites the real delivery's state). Every outcome is
        acked: none is redelivered. A message with no valid job id (or with positional
        arguments: planq sends ids as keywords) is dropped as InvalidJobMessage (FAILURE).
        """
        runtime = runtime_for(self.app)
        if args or not is_ulid(job_id):
            shown = runtime.redactor(repr(args or job_id))[:SHOWN_ID_CHARS]
            logger.warning("%s: message without a valid job id (%s): dropped", self.name, shown)
            raise InvalidJobMessage(f"no valid job id in the message: {shown}")
        parent = tracing.context_from(plan_id if is_ulid(plan_id) else None, self.request)
        delivery = getattr(self.request, "delivery_info", None) or {}
        try:
            result, error, stack = runtime.worker.run_job_reporting(
                job_id, parent, self.phase.value, delivery.get("routing_key")
            )
        except Exception as exc:
            # Celery logs, stores and sends (to Flower) what escapes: only its redacted text,
            # with neither its traceback's cause chain nor its own message.
            raise PhaseJobError(describe_exception(exc, runtime.redactor)) from None
        if result is PickupResult.succeeded:
            return result.value
        if result in (PickupResult.failed, PickupResult.interrupted):
            failed = PhaseJobFailed(error or result.value)
            raise failed from (None if stack is None else ExecutorTraceback(stack))
        if result is PickupResult.cancelled:
            self.send_event("task-revoked", terminated=False, signum=None, expired=False)
        raise Ignore()


class RunPlanTask(Task):  # type: ignore[misc]
    """`run_plan.delay(plan_id, through="apply", approve_before="apply")`: a whole pipeline.

    Producer side only, as a phase task's delay: the lifecycle checks the input (typed
    errors, nothing written), stores the pipeline on the plan and queues its first phase
    in one transaction, then publishes that phase's job. The result is the first job's.
    Each next phase is queued by the finish of the one before (domain/pipeline_ledger.py).
    """

    name = "planq.run_plan"
    ignore_result = True
    typing = False
    throws = (InvalidJobMessage,)
    _ARGS = ("plan_id", "through", "approve_before", "actor", "approval_timeout")

    def apply_async(
        self, args: Any = None, kwargs: Any = None, **options: Any
    ) -> AsyncResult | None:
        """Validate, write the pipeline and its first job, publish; the first job's result."""
        given = dict(zip(self._ARGS, args or (), strict=False))
        extra = set(kwargs or {}) - set(self._ARGS)
        if len(args or ()) > len(self._ARGS) or extra or set(given) & set(kwargs or {}):
            raise TypeError(
                f"{self.name} takes plan_id, through, approve_before, actor, approval_timeout "
                f"(got args={len(args or ())}, kwargs={sorted(kwargs or {})})"
            )
        given.update(kwargs or {})
        queued = runtime_for(self.app).lifecycle.run_plan(
            given.get("plan_id"),  # checked there: InvalidIdError
            given.get("through", PlanPhase.apply.value),
            given.get("approve_before"),
            given.get("actor", "producer"),
            given.get("approval_timeout"),
        )
        return None if queued.job is None else self.AsyncResult(queued.job.job_id)

    def run(self, *args: Any, **kwargs: Any) -> str:
        """No message is ever sent for this task: one that arrives is dropped."""
        raise InvalidJobMessage("planq.run_plan runs at the producer; no message is expected")


def register_phase_tasks(app: Celery) -> dict[PlanPhase, PhaseTask]:
    """Create planq.strategize_plan, planq.execute_plan and planq.apply_plan on app."""
    created: dict[PlanPhase, PhaseTask] = {}
    for phase in PlanPhase:
        name = f"{phase.value}_plan"
        cls = type(name, (PhaseTask,), {"phase": phase, "name": f"planq.{name}"})
        created[phase] = app.register_task(cls())
    app.register_task(RunPlanTask())
    return created
