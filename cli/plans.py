"""`planq plans …`: create, inspect and move plans through strategize -> execute -> apply.

Parsing and rendering live here; every ledger action is the service object's
(tasks/service.py), shared with the API.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from planq.cli import limits, services
from planq.cli.context import planq
from planq.cli.output import BadInput, boundary, emit_json, print_fields, warn
from planq.cli.views import job_dict, print_events, print_jobs, print_plans
from planq.domain.principals import cli_actor

plans_app = typer.Typer(help="Plans and their phase jobs.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (for scripts).")]
STEPS_HELP = "Step names, comma-separated; NAME:SECONDS sets how long a step takes."
PlanId = Annotated[str, typer.Argument(help="The plan's ULID.", show_default=False)]
PlanIds = Annotated[list[str], typer.Argument(help="One or more plan ULIDs.", show_default=False)]
Limit = Annotated[int, typer.Option("--limit", min=1, help="At most this many (newest first).")]
Offset = Annotated[int, typer.Option("--offset", min=0, help="Skip this many newest ones.")]


def parse_steps(text: str) -> list[dict[str, Any]]:
    """'fetch,score:2.5,apply' -> step objects; ':SECONDS' sets how long the step takes.

    Only the syntax is checked here; names and seconds are bounded by the domain (BoundsError).
    """
    steps: list[dict[str, Any]] = []
    for raw in text.split(","):
        name, _, seconds = raw.strip().partition(":")
        name = name.strip()
        if not name:
            raise BadInput(f"--steps: empty step name in {text[:80]!r}")
        step: dict[str, Any] = {"name": name}
        if seconds:
            try:
                step["seconds"] = float(seconds)
            except ValueError:
                raise BadInput(f"--steps: {raw.strip()[:80]!r}: seconds must be a number") from None
            if step["seconds"] < 0:
                raise BadInput(f"--steps: {raw.strip()[:80]!r}: seconds must be >= 0")
        steps.append(step)
    return steps


@plans_app.command("create")
@boundary
def create(
    steps: Annotated[str, typer.Option("--steps", help=STEPS_HELP)],
    name: Annotated[str, typer.Option("--name", help="A name for people.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Store a new plan (state New); nothing is queued yet."""
    from planq.domain.plans import Plan

    parsed = parse_steps(steps)
    Plan.with_steps(parsed, name=name)  # the domain's bounds (BoundsError), before the ledger
    with planq() as session:
        plan = session.service.plans.create(parsed, name=name)
    if as_json:
        emit_json(plan.as_cli_dict())
    else:
        print_fields("plan created", plan.as_cli_dict())


@plans_app.command("show")
@boundary
def show(plan_id: PlanId, as_json: JsonOpt = False) -> None:
    """One plan and its phase jobs (in the order they ran)."""
    with planq() as session:
        plan, jobs = services.plan_jobs(session, plan_id)
        if as_json:
            events = services.plan_events(session, plan_id)
            emit_json(
                {
                    **plan.as_cli_dict(),
                    "jobs": [job_dict(j) for j in jobs],
                    "events": [e.as_cli_dict() for e in events],
                }
            )
            return
        events = services.plan_events(session, plan_id)
    data = plan.as_cli_dict()
    data["steps"] = ", ".join(s.get("name", "?") for s in plan.steps) or "-"
    data["pipeline"] = _pipeline_line(plan)
    print_fields(f"plan {plan.plan_id}", data)
    print_jobs("jobs", jobs, empty="no jobs yet (run `planq plans strategize ID`)")
    if events:
        print_events(events)


def _pipeline_line(plan: Any) -> str:
    """'awaiting_approval (through apply, approve before apply)', or '-'."""
    info = plan.pipeline_dict()
    if info is None:
        return "-"
    gate = f", approve before {info['approve_before']}" if info["approve_before"] else ""
    return f"{info['state']} (through {info['through']}{gate})"


@plans_app.command("list")
@boundary
def list_plans(
    limit: Limit = 50,
    offset: Offset = 0,
    after: Annotated[
        str | None,
        typer.Option("--after", help="Only plans listed after this plan id (the next page)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Plans, newest first, with how many there are in all ("more than 10,000" past that)."""
    from planq.domain.ids import require_ulid

    limits.check_window(limit, offset)  # every input checked before the ledger is opened
    if after is not None:
        require_ulid("--after", after)
    with planq() as session:
        page = services.plan_page(session, limit, offset, after)
    if as_json:
        emit_json(page.header("plans", [p.as_cli_dict() for p in page.rows]))
    else:
        print_plans("plans", page.rows, footer=page.showing())


def queue_phase(plan_ids: list[str], phase_name: str, as_json: bool) -> None:
    """Queue a phase: plans checked, broker checked, rows in one statement, then the messages.

    One plan id prints {plan, job}; several go in one batch (all queued, or none) and print a
    list of {plan, job}.
    """
    with planq() as session:
        queued = session.service.plans.queue(plan_ids, phase_name, ready=session.require_broker)
    docs = [
        {"plan": plan.as_cli_dict(), "job": job_dict(job) if job else None} for plan, job in queued
    ]
    for _, job in queued:  # a job a worker already took got its message, stamped or not
        if job is not None and job.status.value == "queued" and job.dispatched_at is None:
            warn(f"job {job.job_id} is queued but its message was not sent; the relay will send it")
    if as_json:
        emit_json(docs[0] if len(plan_ids) == 1 else docs)
    elif len(plan_ids) == 1:
        plan, _ = queued[0]
        print_fields(f"plan {plan.plan_id} is {plan.label}", docs[0]["job"] or {})
    else:
        jobs = [job for _, job in queued if job is not None]
        print_jobs(f"queued {phase_name} for {len(jobs)} plans", jobs)


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
        float, typer.Option("--timeout", help="Give up (exit 1) after this many seconds.")
    ] = 600.0,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between ledger polls (0.05 to 3600).")
    ] = 0.5,
    as_json: JsonOpt = False,
) -> None:
    """Live progress bars of the plan's jobs until every one has ended.

    Exits as the latest job ended: 0 succeeded, 1 failed (its error on stderr), 4 cancelled;
    1 on timeout. Ctrl-C (130) stops the watching only: the job keeps running.
    """
    from planq.cli.watch import watch_plan

    limits.check_watch(timeout, interval)
    with planq() as session:
        watch_plan(session, plan_id, timeout, interval, as_json)


# -- the pipeline: a plan that runs its phases by itself ------------------------------------
By = Annotated[
    str | None,
    typer.Option("--by", help="A name for the note; the actor is always you (cli:USER@HOST)."),
]
Note = Annotated[str | None, typer.Option("--note", help="Why, for the audit trail.")]


@plans_app.command("run")
@boundary
def run(
    plan_id: PlanId,
    through: Annotated[
        str, typer.Option("--through", help="The last phase to run (strategize/execute/apply).")
    ] = "apply",
    approve_before: Annotated[
        str | None,
        typer.Option("--approve-before", help="Wait for `plans approve` before this phase."),
    ] = None,
    approval_timeout: Annotated[
        float | None,
        typer.Option("--approval-timeout", help="Seconds to wait at the gate, then expire."),
    ] = None,
    approvals: Annotated[
        int | None,
        typer.Option(
            "--approvals", help="Distinct approvers the gate needs, none of them you (default 1)."
        ),
    ] = None,
    notify: Annotated[
        list[str] | None,
        typer.Option(
            "--notify",
            help="A webhook URL told of the gate, a failure and the end (repeatable; "
            "needs PLANQ_WEBHOOK_SECRET).",
        ),
    ] = None,
    by: By = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the plan's phases by themselves through PHASE; exit 2 on bad phases, 1 if busy."""
    with planq() as session:
        plan, job = session.service.plans.run(
            plan_id,
            through,
            approve_before,
            cli_actor(),
            approval_timeout,
            approvals,
            _by_note(by),
            notify,
            ready=session.require_broker,
        )
    if as_json:
        emit_json({"plan": plan.as_cli_dict(), "job": job_dict(job) if job else None})
    else:
        print_fields(f"plan {plan.plan_id} is {plan.label}: {_pipeline_line(plan)}", job_dict(job))


def _by_note(by: str | None, note: str | None = None) -> str | None:
    """--by is only text for the note: the actor is the OS user and host, never a flag."""
    said = f"by: {by}" if by else None
    return "; ".join(t for t in (said, note) if t) or None


def _decide(plan_id: str, approve: bool, by: str | None, note: str | None, as_json: bool) -> None:
    with planq() as session:
        plans, who, said = session.service.plans, cli_actor(), _by_note(by, note)
        if approve:
            plan, job = plans.approve(plan_id, who, said, ready=session.require_broker)
        else:
            plan, job = plans.reject(plan_id, who, said), None
    if as_json:
        emit_json({"plan": plan.as_cli_dict(), "job": job_dict(job) if job else None})
    else:
        verb = "approved" if approve else "rejected"
        print_fields(f"plan {plan.plan_id} {verb}: {_pipeline_line(plan)}", plan.as_cli_dict())


@plans_app.command("approve")
@boundary
def approve(plan_id: PlanId, note: Note = None, by: By = None, as_json: JsonOpt = False) -> None:
    """Let a plan waiting at its gate go on; exit 1 if it is not waiting (or was decided)."""
    _decide(plan_id, True, by, note, as_json)


@plans_app.command("reject")
@boundary
def reject(plan_id: PlanId, note: Note = None, by: By = None, as_json: JsonOpt = False) -> None:
    """Stop a plan waiting at its gate; exit 1 if it is not waiting (or was decided)."""
    _decide(plan_id, False, by, note, as_json)


@plans_app.command("cancel")
@boundary
def cancel(plan_id: PlanId, by: By = None, as_json: JsonOpt = False) -> None:
    """Cancel the whole plan: its pipeline stops and its running phase is cancelled."""
    with planq() as session:
        landed = session.service.jobs.cancel_plan(
            plan_id, cli_actor(), _by_note(by), wait=float(session.settings.cancel_wait)
        )
    plan, jobs = landed.plan, {job_id: o.value for job_id, o in landed.outcomes.items()}
    outcome = "cancelled" if landed.finished else "cancel requested"
    if as_json:
        emit_json(
            {
                "plan": plan.as_cli_dict(),
                "outcome": outcome,
                "cancelled_jobs": list(jobs),
                "jobs": jobs,
            }
        )
    else:
        print_fields(
            f"plan {plan.plan_id}: {outcome}",
            {"pipeline": _pipeline_line(plan), "jobs": list(jobs)},
        )
