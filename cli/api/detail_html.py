"""The dashboard's list footers and detail pages (plan, job, run), rendered on the server.

Kept apart from fragments.py (the sections of the main page) so each stays one screenful of
rendering; both escape everything they print and link with quoted ids only.
"""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from planq.cli.api.fragments import (
    e,
    error_box,
    error_text,
    finding_rows,
    job_actions,
    job_link,
    link,
    plan_link,
    run_progress,
    severity_pills,
    status,
    when,
)
from planq.cli.api.listing import Listing
from planq.cli.api.models import FindingOut, JobOut, PlanOut, RunSummaryOut

#: Job fields that are times: shown in UTC with a relative time.
TIME_FIELDS = frozenset(
    {
        "created_at",
        "started_at",
        "finished_at",
        "dispatched_at",
        "cancel_requested_at",
        "last_heartbeat",
        "updated_at",
    }
)


def pager(listing: Listing, page: str, what: str, first: bool) -> str:
    """'20 of 41 plans' (or 'more than 10,000'), what a filter looked through, newer/older links."""
    count = f"{len(listing.rows)} older" if listing.later else str(len(listing.rows))
    shown = f"{count} of {listing.total} {what}" if listing.total else f"{count} {what}"
    parts = [
        f'<span class="shown">{escape(shown)}</span> <span class="muted">(newest first)</span>'
    ]
    if listing.note:
        parts.append(f'<span class="muted">{escape(listing.note)}</span>')
    links = []
    if not first:
        start = f"{page}?{urlencode(listing.query)}" if listing.query else page
        links.append(link(start, "« newest", "nav"))
    if listing.older:
        links.append(link(f"{page}?{urlencode(listing.older)}", "older »", "nav older"))
    if links:
        parts.append(" ".join(links))
    return f'<p class="pager">{" · ".join(parts)}</p>'


def fields_table(values: dict[str, Any], keys: list[str] | None = None) -> str:
    """Every field of a row, one per line: times in UTC, ids linked, the rest escaped."""
    rows = []
    for key in keys or list(values):
        value = values.get(key)
        if key in TIME_FIELDS:
            shown = when(value)
        elif key in ("plan_id",):
            shown = plan_link(value, 26)
        elif key in ("job_id", "retry_of"):
            shown = job_link(value, 26)
        elif key == "status" and value:
            shown = status(str(value))
        elif isinstance(value, dict | list):
            shown = f"<code>{e(value)}</code>"
        elif key in ("error_message", "error_traceback", "unreadable") and value:
            shown = f'<pre class="error-text">{escape(str(value))}</pre>'
        else:
            shown = e(value)
        rows.append(f'<tr data-field="{escape(key)}"><th>{escape(key)}</th><td>{shown}</td></tr>')
    return f'<table class="fields"><tbody>{"".join(rows)}</tbody></table>'


def plan_detail(plan: PlanOut, steps: list[dict[str, Any]], jobs: list[JobOut]) -> str:
    """A plan: its fields, its steps and every job it has had (newest first), linked."""
    values = plan.model_dump()
    head = fields_table(values, list(values))
    step_rows = "".join(
        f"<li><code>{e(step.get('name'))}</code>"
        + (f' <span class="muted">{e(step.get("seconds"))} s</span>' if "seconds" in step else "")
        + "</li>"
        for step in steps
    )
    job_rows = []
    for job in reversed(jobs):
        job_rows.append(
            f'<tr data-job="{escape(job.job_id)}"><td>{job_link(job.job_id, 26)}</td>'
            f"<td>{e(job.phase)}</td><td>{job.attempt}</td><td>{status(job.status)}</td>"
            f"<td>{when(job.created_at)}</td><td>{when(job.finished_at)}</td>"
            f"<td>{error_text(job.error_message, 200)}</td><td>{job_actions(job)}</td></tr>"
        )
    table = (
        "<table><thead><tr><th>job</th><th>phase</th><th>attempt</th><th>status</th>"
        "<th>created</th><th>finished</th><th>error</th><th></th></tr></thead>"
        f"<tbody>{''.join(job_rows)}</tbody></table>"
        if job_rows
        else '<p class="muted">No job has been queued for this plan.</p>'
    )
    return (
        f"{head}<h3>Steps ({len(steps)})</h3><ol>{step_rows}</ol>"
        f"<h3>Jobs ({len(jobs)}, newest first)</h3>{table}"
    )


def job_detail(values: dict[str, Any], flower_url: str) -> str:
    """A job: every field it has (whatever the ledger's version adds), its plan and Flower."""
    job_id = str(values.get("job_id", ""))
    links = [link(f"/dashboard/plans/{quote(str(values.get('plan_id', '')))}", "its plan")]
    if flower_url:
        task = f"{flower_url.rstrip('/')}/task/{quote(job_id)}"
        links.append(f'<a href="{escape(task)}" rel="noopener" class="flower">Flower task</a>')
    if values.get("retry_of"):
        links.append(
            link(f"/dashboard/jobs/{quote(str(values['retry_of']))}", "the attempt before")
        )
    error = values.get("error_message") or values.get("unreadable")
    box = (
        f'<h3>Error</h3><pre class="error-text" id="job-error">{escape(str(error))}</pre>'
        if error
        else ""
    )
    trace = values.get("error_traceback")
    if trace:
        box += (
            "<h3>Traceback (redacted)</h3>"
            f'<pre class="error-text" id="job-traceback">{escape(str(trace))}</pre>'
        )
    model = JobOut.model_validate(values)
    actions = job_actions(model)
    return (
        f'<p class="links">{" · ".join(links)} {actions}</p>{box}'
        f"<h3>Fields</h3>{fields_table(values)}"
    )


def run_detail(
    run: RunSummaryOut, counts: dict[str, int], page: list[FindingOut], offset: int, limit: int
) -> str:
    """A run: its fields, outcome pills and one page of its findings with previous/next links."""
    values = run.model_dump(exclude={"progress", "stats", "params"})
    fields = fields_table(
        values | {"stats": run.stats, "params": run.params},
        [*values, "stats", "params"],
    )
    total = sum(counts.values())
    pills = severity_pills(counts, run.status == "Failed")
    head = f'<p>{pills} {run_progress(run)} <span class="muted">{total} findings</span></p>'
    base = f"/dashboard/runs/{quote(run.id)}"
    if not page:
        found = f'<p class="muted">No findings after {offset} (of {total}).</p>'
    else:
        rows = finding_rows(page)
        nav = []
        if offset > 0:
            nav.append(link(f"{base}?offset={max(offset - limit, 0)}", "« previous", "nav"))
        if offset + len(page) < total:
            nav.append(link(f"{base}?offset={offset + limit}", "next »", "nav older"))
        found = (
            f'<p class="pager"><span class="shown">{offset + 1}-{offset + len(page)} of {total}'
            f" findings</span> {' · '.join(nav)}</p><table><thead><tr><th>severity</th>"
            "<th>kind</th><th>resource</th><th>detail</th><th>recorded</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    return f"{head}{fields}<h3>Findings</h3>{found}"


def not_loaded(why: str) -> str:
    """What a detail section shows when its row cannot be read."""
    return error_box(why)
