"""The overview's sections, rendered on the server from Jinja2 templates (autoescaped).

The page's script only swaps these fragments in (and posts the buttons' actions), so every
row is rendered in exactly one place: its template under templates/. The small pieces a
row is made of (ids, links, times, pills, bars, buttons) are macros.html's.
"""

from __future__ import annotations

from markupsafe import Markup

from planq.cli.api.models import (
    FindingOut,
    JobOut,
    PlanOut,
    RecoverableJobOut,
    RunSummaryOut,
)
from planq.cli.api.templating import macro, render


def plans_table(
    plans: list[tuple[PlanOut, dict[str, JobOut | None] | str]], footer: str = ""
) -> Markup:
    """Plans newest first, with their three phases side by side (or why they cannot show)."""
    return render("plans_table.html", plans=plans, footer=footer)


def jobs_table(jobs: list[JobOut], footer: str = "") -> Markup:
    """Jobs with live progress bars, heartbeats, checkpoints, errors and their actions."""
    return render("jobs_table.html", jobs=jobs, footer=footer)


def failed_table(jobs: list[JobOut], footer: str = "") -> Markup:
    """Failed jobs newest first, each with its error text in the row and a link to its page."""
    return render("failed_table.html", jobs=jobs, footer=footer)


def recoverable_table(jobs: list[RecoverableJobOut]) -> Markup:
    """Registered recoverable jobs: the badge of their last outcome, trigger and cancel."""
    return render("recoverable_table.html", jobs=jobs)


def runs_table(runs: list[tuple[RunSummaryOut, dict[str, int]]]) -> Markup:
    """Recent runs of every job, newest first, with progress and outcome pills."""
    return render("runs_table.html", runs=runs)


def findings_table(
    job_name: str, run_id: str, page: list[FindingOut], total: int, limit: int, offset: int
) -> Markup:
    """One page of a run's findings, with previous/next buttons."""
    return render(
        "findings_table.html",
        job_name=job_name,
        run_id=run_id,
        page=page,
        total=total,
        limit=limit,
        offset=offset,
    )


def error_box(message: str) -> Markup:
    """What a section shows when its data cannot be read (ledger down, auth, …)."""
    return macro("error_box", message)
