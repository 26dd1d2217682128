"""Phase executors: what a job actually does, given a JobContext."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from planq.domain.cancellation import CancellationToken
from planq.domain.errors import UnknownExecutorError
from planq.domain.jobs import AsyncJob, serialise_checkpoint
from planq.domain.plans import Plan, PlanPhase

ENTRY_POINT_GROUP = "planq.executors"
logger = logging.getLogger("planq.executors")


@dataclass
class JobContext:
    """Everything an executor gets: the job, its plan, its token, progress and checkpoint."""

    job: AsyncJob
    token: CancellationToken
    plan: Plan | None = None
    logger: logging.LoggerAdapter[logging.Logger] = field(
        default_factory=lambda: logging.LoggerAdapter(logger, {})
    )
    save: Callable[[float | None, str | None], None] = lambda progress, checkpoint: None
    progress: float | None = None

    @property
    def resume_state(self) -> dict[str, Any]:
        """The checkpoint a previous attempt saved ({} on a first run)."""
        return self.job.checkpoint or {}

    @property
    def cancelled(self) -> bool:
        """Whether the executor should return at its next safe point."""
        return self.token.is_cancelled

    def report_progress(self, fraction: float) -> None:
        """Record progress (0..1) in the ledger."""
        self.progress = max(0.0, min(1.0, float(fraction)))
        self.save(self.progress, None)

    def checkpoint(self, state: Mapping[str, Any], progress: float | None = None) -> None:
        """Save resumable state (a JSON object); a retry of this job starts from it."""
        if progress is not None:
            self.progress = max(0.0, min(1.0, float(progress)))
        # bounded (1 MiB, 64 levels, strict JSON): a BoundsError here, not a RecursionError;
        # the store takes the text as checked (CheckpointJson) and does not parse it again
        self.save(self.progress, serialise_checkpoint(state))


Executor = Callable[[JobContext], None]


def noop(ctx: JobContext) -> None:
    """Do nothing: the benchmark measures planq's own overhead with it."""


def walk_steps(ctx: JobContext) -> None:
    """Walk the plan's steps, checkpointing after each; stop at a step boundary on cancel.

    A step is {"name": str, "seconds": float (default 0.05), "fail": str (optional)}.
    """
    steps = ctx.plan.steps if ctx.plan else []
    start = int(ctx.resume_state.get("next_step", 0))
    total = max(len(steps), 1)
    for index in range(start, len(steps)):
        if ctx.cancelled:
            ctx.logger.info("cancelled before step %d of %d", index + 1, len(steps))
            return
        step = steps[index]
        if ctx.token.wait(float(step.get("seconds", 0.05))):
            ctx.logger.info("cancelled during step %r", step.get("name"))
            return
        if step.get("fail"):
            raise RuntimeError(str(step["fail"]))
        ctx.checkpoint({"next_step": index + 1}, progress=(index + 1) / total)
    if not steps:
        ctx.report_progress(1.0)


BUILTIN: dict[str, Executor] = {"walk_steps": walk_steps, "noop": noop}


def resolve(reference: str | Executor) -> Executor:
    """A callable from a builtin name, 'package.module:attr', or the callable itself."""
    if callable(reference):
        return reference
    if reference in BUILTIN:
        return BUILTIN[reference]
    module_name, _, attr = reference.partition(":")
    if not attr:
        raise UnknownExecutorError(
            f"executor {reference!r} is neither a builtin ({', '.join(BUILTIN)}) nor 'module:attr'"
        )
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UnknownExecutorError(f"cannot load executor {reference!r}: {exc}") from exc
    if not callable(target):
        raise UnknownExecutorError(f"executor {reference!r} is not callable")
    return target  # type: ignore[no-any-return]


class ExecutorRegistry:
    """Maps each phase to its executor: defaults, then entry points, then settings."""

    def __init__(self, default: str | Executor = "walk_steps") -> None:
        self._by_phase: dict[PlanPhase, Executor] = {p: resolve(default) for p in PlanPhase}

    def register(self, phase: PlanPhase | str, executor: str | Executor) -> None:
        """Use executor for phase (validated now, not when the first job runs)."""
        self._by_phase[PlanPhase(phase)] = resolve(executor)

    def load_entry_points(self) -> None:
        """Register executors published under the `planq.executors` entry-point group."""
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            self.register(ep.name, ep.load())

    def for_phase(self, phase: PlanPhase) -> Executor:
        """The executor for phase."""
        return self._by_phase[phase]

    @classmethod
    def from_settings(
        cls, mapping: Mapping[str, str], default: str = "walk_steps"
    ) -> ExecutorRegistry:
        """Defaults, entry points, then the explicit mapping (phase -> reference)."""
        registry = cls(default)
        registry.load_entry_points()
        for phase, ref in mapping.items():
            registry.register(phase, ref)
        return registry
