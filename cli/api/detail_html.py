"""The dashboard's list footers and detail pages (plan, job, run), from Jinja2 templates.

Kept apart from fragments.py (the overview's sections) so each stays one screenful; both
render through autoescaped templates and link with quoted ids only.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from markupsafe import Markup

from planq.cli.api.listing import Listing
from planq.cli.api.models import FindingOut, JobOut, PlanOut, RunSummaryOut
from planq.cli.api.templating import render


def pager(listing: Listing, page: str, what: str, first: bool) -> Markup:
    """'20 of 41 plans' (or 'more than 10,000'), what a filter looked through, newer/older links."""
    count = f"{len(listing.rows)} older" if listing.later else str(len(listing.rows))
    shown = f"{count} of {listing.total} {what}" if listing.total else f"{count} {what}"
    newest = None
    if not first:
        newest = f"{page}?{urlencode(listing.query)}" if listing.query else page
    older = f"{page}?{urlencode(listing.older)}" if listing.older else None
    return render("pager.html", shown=shown, note=listing.note, newest=newest, older=older)


def plan_detail(
    plan: PlanOut, steps: list[dict[str, Any]], jobs: list[JobOut], pipeline: str = ""
) -> Markup:
    """A plan: its fields, its steps, every job it has had (newest first), then its pipeline."""
    values = plan.model_dump()
    return render("plan_detail.html", values=values, steps=steps, jobs=jobs, pipeline=pipeline)


def job_detail(values: dict[str, Any], flower_url: str) -> Markup:
    """A job: every field it has (whatever the ledger's version adds), its plan and Flower."""
    job_id = str(values.get("job_id", ""))
    task_url = f"{flower_url.rstrip('/')}/task/{quote(job_id)}" if flower_url else ""
    job = JobOut.model_validate(values)
    return render("job_detail.html", values=values, task_url=task_url, job=job)


def run_detail(
    run: RunSummaryOut, counts: dict[str, int], page: list[FindingOut], offset: int, limit: int
) -> Markup:
    """A run: its fields, outcome pills and one page of its findings with previous/next links."""
    values = run.model_dump(exclude={"progress", "stats", "params"})
    return render(
        "run_detail.html",
        run=run,
        counts=counts,
        values=values | {"stats": run.stats, "params": run.params},
        keys=[*values, "stats", "params"],
        page=page,
        offset=offset,
        limit=limit,
    )
