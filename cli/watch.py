"""`planq plans watch`: poll the ledger and draw one progress bar per phase job until all end.

It exits as the plan's latest job ended, so `planq plans execute ID && planq plans watch ID`
stops a script on a failure: 0 succeeded, 1 failed (with the job's redacted error), 4
cancelled; 1 on timeout too, and 130 on Ctrl-C, which stops the watching, not the job.
"""

from __future__ import annotations

import time
from typing import Any

from planq.cli.context import Planq
from planq.cli.output import (
    CliError,
    Interrupted,
    JobCancelled,
    JobFailed,
    TimedOut,
    console,
    emit_json,
    percent,
    status_style,
)
from planq.cli.views import job_dict


def snapshot(session: Planq, plan_id: str) -> tuple[Any, list[Any]]:
    """The plan and its jobs as the ledger has them now."""
    from planq.cli.services import plan_jobs

    return plan_jobs(session, plan_id)


def all_ended(jobs: list[Any]) -> bool:
    """Whether every job is terminal (a plan with no jobs has nothing to wait for)."""
    return all(job.is_terminal for job in jobs)


def outcome(jobs: list[Any]) -> CliError | None:
    """How the plan's latest job ended, as the error to exit with; None if it succeeded.

    Only the latest job counts: the plan's jobs run one at a time, in the order listed, so
    a failed attempt that was retried (or re-queued) and then succeeded is history.
    """
    if not jobs:
        return None
    job = jobs[-1]
    what = f"job {job.job_id} ({job.phase.value}, try {job.attempt})"
    if job.status.value == "failed":
        return JobFailed(f"{what} failed: {job.error_message or 'no error recorded'}")
    if job.status.value == "cancelled":
        return JobCancelled(f"{what} was cancelled")
    return None


def interrupted(jobs: list[Any]) -> Interrupted:
    """Ctrl-C: say that the jobs keep running, and how to stop them."""
    live = [j for j in jobs if not j.is_terminal]
    if not live:
        return Interrupted("stopped watching")
    ids = " ".join(j.job_id for j in live)
    verb = "keeps" if len(live) == 1 else "keep"
    return Interrupted(
        f"stopped watching; job {ids} {verb} running (cancel: `planq jobs cancel {live[0].job_id}`)"
    )


#: Below this console width the worker column is left out, so the bars keep their room.
WIDE = 110


def render(plan: Any, jobs: list[Any], elapsed: float, width: int = WIDE) -> Any:
    """A table: one row and one bar per job, driven by the row's progress column."""
    from rich.markup import escape
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    wide = width >= WIDE
    parts = (f"plan {plan.plan_id}", plan.name, plan.label, f"{elapsed:.0f}s")
    table = Table(title=escape(" - ".join(p for p in parts if p)), title_justify="left")
    table.add_column("job id", min_width=26, no_wrap=True)
    for name in ("phase", "try", "status"):
        table.add_column(name, no_wrap=True)
    table.add_column("progress", min_width=10, ratio=None if wide else 1)
    if wide:
        table.add_column("", justify="right", no_wrap=True)
        table.add_column("worker", overflow="fold")
    for job in jobs:
        done = 1.0 if job.status.value == "succeeded" else (job.progress or 0.0)
        style = status_style(job.status.value)
        bar = ProgressBar(
            total=1.0, completed=done, width=30 if wide else None, complete_style=style
        )
        cells: list[Any] = [
            job.job_id,
            job.phase.value,
            str(job.attempt),
            f"[{style}]{job.status.value}[/]",
            bar,
        ]
        table.add_row(*cells, *([percent(done), job.worker_id or "-"] if wide else []))
    if not jobs:
        table.add_row("-", "-", "-", "no jobs yet", "", *(["", "-"] if wide else []))
    return table


def watch_plan(
    session: Planq, plan_id: str, timeout: float, interval: float, as_json: bool
) -> None:
    """Poll until every job ends, then exit as the latest one ended (see `outcome`).

    TimedOut (exit 1) when timeout passes first; Interrupted (exit 130) on Ctrl-C.
    """
    from rich.live import Live

    start = time.monotonic()
    plan, jobs = snapshot(session, plan_id)
    out = None if as_json else console()
    live = Live(console=out, auto_refresh=False) if out is not None and out.is_terminal else None
    if live is not None:
        live.start()
    try:
        while True:
            if live is not None and out is not None:
                live.update(render(plan, jobs, time.monotonic() - start, out.width), refresh=True)
            remaining = timeout - (time.monotonic() - start)
            if all_ended(jobs) or remaining <= 0:
                break
            time.sleep(min(interval, remaining))  # --timeout holds whatever --interval says
            plan, jobs = snapshot(session, plan_id)
    except KeyboardInterrupt:
        raise interrupted(jobs) from None
    finally:
        if live is not None:
            live.stop()
    done = all_ended(jobs)
    if out is not None and live is None:  # a pipe or a log: the final view, once
        out.print(render(plan, jobs, time.monotonic() - start, out.width))
    if as_json:
        emit_json({"plan": plan.as_cli_dict(), "jobs": [job_dict(j) for j in jobs], "done": done})
    if not done:
        pending = ", ".join(f"{j.job_id} ({j.status.value})" for j in jobs if not j.is_terminal)
        raise TimedOut(f"after {timeout:g}s these jobs have not ended: {pending}")
    ended = outcome(jobs)
    if ended is not None:
        raise ended
