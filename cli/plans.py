"""`planq plans …`: create, inspect and move plans through strategize -> execute -> apply."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.context import Planq, planq
from cli.output import BadInput, boundary, emit_json, print_fields, warn
from cli.views import job_dict, print_jobs, print_plans

plans_app = typer.Typer(help="Plans and their phase jobs.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (for scripts).")]
STEPS_HELP = "Step names, comma-separated; NAME:SECONDS sets how long a step takes."
PlanId = Annotated[str, typer.Argument(help="The plan's ULID.", show_default=False)]
PlanIds = Annotated[list[str], typer.Argument(help="One or more plan ULIDs.", show_default=False)]


def parse_steps(text: str) -> list[dict[str, Any]]:
    """'fetch,score:2.5,apply' -> step objects; ':SECONDS' sets how long the step takes."""
    steps: list[dict[str, Any]] = []
    for raw in text.split(","):
        name, _, seconds = raw.strip().partition(":")
        name = name.strip()
        if not name:
            raise BadInput(f"--steps: empty step name in {text!r}")
        step: dict[str, Any] = {"name": name}
        if seconds:
            try:
                step["seconds"] = float(seconds)
            except ValueError:
                raise BadInput(f"--steps: {raw.strip()!r}: seconds must be a number") from None
            if step["seconds"] < 0:
                raise BadInput(f"--steps: {raw.strip()!r}: seconds must be >= 0")
        steps.append(step)
    return steps


def show_plan(session: Planq, plan_id: str, as_json: bool) -> None:
    """The plan and its jobs (oldest first)."""
    rt = session.runtime
    plan = rt.lifecycle.get_plan(plan_id)
    jobs = rt.jobs.list_by_plan(plan.plan_id)
    if as_json:
        emit_json({**plan.as_cli_dict(), "jobs": [job_dict(j) for j in jobs]})
        return
    data = plan.as_cli_dict()
    data["steps"] = ", ".join(s.get("name", "?") for s in plan.steps) or "-"
    print_fields(f"plan {plan.plan_id}", data)
    print_jobs("jobs", jobs, empty="no jobs yet (run `planq plans strategize ID`)")


@plans_app.command("create")
@boundary
def create(
    steps: Annotated[str, typer.Option("--steps", help=STEPS_HELP)],
    name: Annotated[str, typer.Option("--name", help="A name for people.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Store a new plan (state New); nothing is queued yet."""
    parsed = parse_steps(steps)
    with planq() as session:
        plan = session.runtime.lifecycle.create_plan(parsed, name=name)
        if as_json:
            emit_json(plan.as_cli_dict())
        else:
            print_fields("plan created", plan.as_cli_dict())


@plans_app.command("show")
@boundary
def show(plan_id: PlanId, as_json: JsonOpt = False) -> None:
    """One plan and its phase jobs."""
    with planq() as session:
        show_plan(session, plan_id, as_json)


@plans_app.command("list")
@boundary
def list_plans(
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Plans, oldest first."""
    with planq() as session:
        plans = session.runtime.plans.list_all(limit)
        if as_json:
            emit_json([p.as_cli_dict() for p in plans])
        else:
            print_plans("plans", plans)


def queue_phase(plan_ids: list[str], phase_name: str, as_json: bool) -> None:
    """Queue a phase: broker checked, plan and job row in one statement, then the message.

    Several plan ids go in one batch (`delay_many`): all queued, or none.
    """
    from domain.plans import PlanPhase

    with planq() as session:
        for plan_id in plan_ids:  # a bad or unknown id is exit 2, first
            session.runtime.lifecycle.get_plan(plan_id)
        session.require_broker()
        if len(plan_ids) > 1:
            queue_many(session, plan_ids, PlanPhase(phase_name), as_json)
            return
        queued = session.runtime.lifecycle.queue_phase(plan_ids[0], PlanPhase(phase_name))
        session.runtime.stamps.flush()  # show the row as the relay will see it
        job = session.runtime.jobs.get(queued.job.job_id) if queued.job else None
        doc = {"plan": queued.plan.as_cli_dict(), "job": job_dict(job) if job else None}
        if job is not None and job.dispatched_at is None:
            warn(f"job {job.job_id} is queued but its message was not sent; the relay will send it")
        if as_json:
            emit_json(doc)
            return
        print_fields(f"plan {queued.plan.plan_id} is {queued.plan.label}", doc["job"] or {})


def queue_many(session: Any, plan_ids: list[str], phase: Any, as_json: bool) -> None:
    """One batch: every row in one transaction, then every message on one producer."""
    queued = session.runtime.lifecycle.queue_phases(plan_ids, phase)
    session.runtime.stamps.flush()
    jobs = [session.runtime.jobs.get(q.job.job_id) for q in queued if q.job is not None]
    if as_json:
        emit_json(
            [
                {"plan": q.plan.as_cli_dict(), "job": job_dict(j)}
                for q, j in zip(queued, jobs, strict=True)
            ]
        )
        return
    print_jobs(f"queued {phase.value} for {len(jobs)} plans", jobs)


def _phase_command(phase_name: str, needs: str) -> None:
    help_text = (
        f"Queue the {phase_name} phase as a job ({needs}); exit 1 if out of order. "
        "Several plan ids are queued in one batch: all or none."
    )

    @plans_app.command(phase_name, help=help_text)
    @boundary
    def command(plan_ids: PlanIds, as_json: JsonOpt = False) -> None:
        queue_phase(plan_ids, phase_name, as_json)


_phase_command("strategize", "needs a New plan, or a failed/cancelled strategize")
_phase_command("execute", "needs Strategize/COMPLETE")
_phase_command("apply", "needs Execute/COMPLETE")


@plans_app.command("watch")
@boundary
def watch(
    plan_id: PlanId,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0, help="Give up (exit 1) after this many seconds.")
    ] = 600.0,
    interval: Annotated[
        float, typer.Option("--interval", min=0.05, help="Seconds between ledger polls.")
    ] = 0.5,
    as_json: JsonOpt = False,
) -> None:
    """Live progress bars of the plan's jobs until every one has ended (exit 0; 1 on timeout)."""
    from cli.watch import watch_plan

    with planq() as session:
        watch_plan(session, plan_id, timeout, interval, as_json)
