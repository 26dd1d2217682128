"""The dashboard's HTML, rendered on the server: one function per section, escaped throughout.

The page's script only swaps these fragments in (and posts the buttons' actions), so every
row is rendered in exactly one place: here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote

from planq.cli.api.access import role_of_url
from planq.cli.api.models import (
    SEVERITY_ORDER,
    FindingOut,
    JobOut,
    PlanOut,
    RecoverableJobOut,
    RunOutcomeOut,
    RunSummaryOut,
    pill_for,
)
from planq.cli.output import cut

#: Pill colours by outcome: red for data loss, amber for inconsistent, neutral for anomaly.
PILL_COLOURS = {
    "data_loss": "#b91c1c",
    "inconsistent": "#b45309",
    "anomaly": "#6b7280",
    "clean": "#15803d",
    "failed": "#7f1d1d",
}
STATUS_CLASS = {
    "succeeded": "ok",
    "Completed": "ok",
    "failed": "bad",
    "Failed": "bad",
    "cancelled": "warn",
    "Paused": "warn",
    "CancelRequested": "warn",
    "running": "live",
    "Running": "live",
    "queued": "idle",
}


def e(value: object) -> str:
    """Escaped text; '-' for nothing."""
    return "-" if value is None or value == "" else escape(str(value))


def short(text: str | None, keep: int = 8) -> str:
    """The tail of a ULID (its random part), full id in the title."""
    if not text:
        return "-"
    return f'<span class="id" title="{escape(text)}">{escape(text[-keep:])}</span>'


def ago(value: datetime, now: datetime | None = None) -> str:
    """How long ago value was, coarsely: '12 s ago', '3 min ago', '5 h ago', '2 d ago'."""
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    late = seconds >= 0
    seconds = abs(seconds)
    for size, unit in ((86_400, "d"), (3_600, "h"), (60, "min")):
        if seconds >= size:
            amount = f"{int(seconds // size)} {unit}"
            break
    else:
        amount = f"{int(seconds)} s"
    return f"{amount} ago" if late else f"in {amount}"


def utc(value: datetime) -> datetime:
    """The time in UTC (a naive value is taken as UTC, as the ledger stores it)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def when(value: Any, now: datetime | None = None) -> str:
    """A timestamp to the second, labelled UTC, with how long ago beside it; or '-'."""
    if value is None:
        return "-"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    at = utc(value)
    text = at.strftime("%Y-%m-%d %H:%M:%S")
    return (
        f'<time datetime="{at.isoformat()}">{text} <abbr title="Coordinated Universal Time">'
        f'UTC</abbr></time> <span class="ago">({ago(at, now)})</span>'
    )


def link(href: str, text: str, css: str = "") -> str:
    """An <a>; href is built by the caller from quoted parts."""
    cls = f' class="{css}"' if css else ""
    return f'<a href="{escape(href)}"{cls}>{text}</a>'


def plan_link(plan_id: str | None, keep: int = 8) -> str:
    """The plan's short id, linking to its page."""
    if not plan_id:
        return "-"
    return link(f"/dashboard/plans/{quote(plan_id)}", short(plan_id, keep))


def job_link(job_id: str | None, keep: int = 8) -> str:
    """The job's short id, linking to its page."""
    if not job_id:
        return "-"
    return link(f"/dashboard/jobs/{quote(job_id)}", short(job_id, keep))


def run_link(run_id: str | None, keep: int = 8) -> str:
    """The run's short id, linking to its page."""
    if not run_id:
        return "-"
    return link(f"/dashboard/runs/{quote(run_id)}", short(run_id, keep))


def status(text: str) -> str:
    """A status label coloured by what it means."""
    return f'<span class="status {STATUS_CLASS.get(text, "idle")}">{escape(text)}</span>'


def pill(kind: str, label: str) -> str:
    """An outcome pill; its colour is inline so it reads the same in any stylesheet."""
    colour = PILL_COLOURS[kind]
    return (
        f'<span class="pill pill-{kind}" data-pill="{kind}" '
        f'style="background-color: {colour}">{escape(label)}</span>'
    )


def severity_pills(counts: dict[str, int], failed: bool = False) -> str:
    """One pill per severity present (worst first), or a single clean/failed pill."""
    pills = [pill(s, f"{counts[s]} {s}") for s in SEVERITY_ORDER if counts.get(s, 0) > 0]
    if not pills:
        kind = pill_for(counts, failed)
        pills = [pill(kind, kind)]
    return " ".join(pills)


def bar(fraction: float | None, title: str, kind: str | None = None) -> str:
    """A progress bar clamped to 0-100% for its width; the raw fraction stays in the title."""
    if fraction is None:
        return '<span class="muted">no progress reported</span>'
    width = min(max(fraction, 0.0), 1.0) * 100
    label = f"{min(fraction, 9.99) * 100:.0f}%"
    kind_label = f' <span class="kind">{escape(kind)}</span>' if kind else ""
    return (
        f'<span class="bar" role="progressbar" title="{escape(title)}" '
        f'data-fraction="{fraction:.6g}" aria-valuenow="{width:.1f}" aria-valuemin="0" '
        f'aria-valuemax="100"><span class="fill" style="width: {width:.1f}%"></span></span>'
        f' <span class="pct">{label}</span>{kind_label}'
    )


def button(label: str, url: str, confirm: str, danger: bool = False) -> str:
    """A button the script turns into a confirmed POST to url."""
    css = "act danger" if danger else "act"
    role = role_of_url(url)  # the access table's: the page greys it for a principal without
    needs = f' data-role="{role.value}"' if role is not None else ""
    return (
        f'<button type="button" class="{css}" data-post="{escape(url)}"{needs} '
        f'data-confirm="{escape(confirm)}">{escape(label)}</button>'
    )


# -- sections -------------------------------------------------------------------------------
def job_actions(job: JobOut, confirm_name: str = "job") -> str:
    """The button a job's status allows: cancel while queued or running, retry once ended badly."""
    if job.status in ("running", "queued"):
        return button(
            "cancel",
            f"/api/ledger/jobs/{job.job_id}/cancel",
            f"Cancel {confirm_name} {job.job_id}?",
            danger=True,
        )
    if job.status in ("failed", "cancelled"):
        return button(
            "retry",
            f"/api/ledger/jobs/{job.job_id}/retry",
            f"Retry {confirm_name} {job.job_id} as a new attempt?",
        )
    return ""


def error_text(message: str | None, keep: int = 300) -> str:
    """A job's error, shown in the row itself (the whole text is on the job's page)."""
    if not message:
        return ""
    text = message if len(message) <= keep else message[: keep - 1] + "…"
    return f'<span class="err">{escape(text)}</span>'


def job_cell(job: JobOut | None) -> str:
    """A plan's phase cell: its latest job's status, progress, error and the action it allows."""
    if job is None:
        return '<span class="muted">not queued</span>'
    title = f"progress {job.progress!r}" if job.progress is not None else "no progress"
    parts = [status(job.status), job_link(job.job_id)]
    if job.status in ("running", "queued"):
        parts.append(bar(job.progress, title))
    elif job.status in ("failed", "cancelled") and job.error_message:
        parts.append("<br>" + error_text(job.error_message, 160))
    parts.append(job_actions(job, f"{job.phase} job"))
    return " ".join(p for p in parts if p)


def plans_table(
    plans: list[tuple[PlanOut, dict[str, JobOut | None] | str]], footer: str = ""
) -> str:
    """Plans newest first, with their three phases side by side (or why they cannot show)."""
    if not plans:
        return '<p class="muted">No plans match.</p>' + footer
    rows = []
    for plan, phases in plans:
        if isinstance(phases, str):
            cells = f'<td colspan="3">{error_box(phases)}</td>'
        else:
            cells = "".join(f'<td class="phase">{job_cell(j)}</td>' for j in phases.values())
        rows.append(
            f'<tr data-plan="{escape(plan.plan_id)}"><td>{e(plan.name)}<br>'
            f"{plan_link(plan.plan_id)}</td><td>{e(plan.state)}<br>{when(plan.updated_at)}</td>"
            f"{cells}</tr>"
        )
    return (
        "<table><thead><tr><th>plan</th><th>state (updated)</th><th>strategize</th>"
        f"<th>execute</th><th>apply</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        + footer
    )


def jobs_table(jobs: list[JobOut], footer: str = "") -> str:
    """Jobs with live progress bars, heartbeats, checkpoints, errors and their actions."""
    if not jobs:
        return '<p class="muted">No jobs match.</p>' + footer
    rows = []
    for job in jobs:
        title = f"progress {job.progress!r}" if job.progress is not None else "no progress"
        checkpoint = "-" if job.checkpoint is None else e(job.checkpoint)
        rows.append(
            f'<tr data-job="{escape(job.job_id)}"><td>{job_link(job.job_id)}</td>'
            f"<td>{plan_link(job.plan_id)}</td><td>{e(job.phase)}</td>"
            f"<td>{status(job.status)} {error_text(job.error_message or job.unreadable, 160)}</td>"
            f'<td class="progress">{bar(job.progress, title)}</td><td>{e(job.worker_id)}</td>'
            f"<td>{when(job.created_at)}</td><td>{when(job.last_heartbeat)}</td>"
            f"<td><code>{checkpoint}</code></td><td>{job_actions(job)}</td></tr>"
        )
    return (
        "<table><thead><tr><th>job</th><th>plan</th><th>phase</th><th>status</th>"
        "<th>progress</th><th>worker</th><th>created</th><th>heartbeat</th><th>checkpoint</th>"
        f"<th></th></tr></thead><tbody>{''.join(rows)}</tbody></table>" + footer
    )


def failed_table(jobs: list[JobOut], footer: str = "") -> str:
    """Failed jobs newest first, each with its error text in the row and a link to its page."""
    if not jobs:
        return '<p class="muted">No failed jobs.</p>' + footer
    rows = []
    for job in jobs:
        message = job.error_message or job.unreadable
        error = f'<pre class="error-text">{escape(message)}</pre>' if message else "-"
        rows.append(
            f'<tr data-failed="{escape(job.job_id)}"><td>{job_link(job.job_id)}</td>'
            f"<td>{plan_link(job.plan_id)}</td><td>{e(job.phase)}</td><td>{job.attempt}</td>"
            f"<td>{when(job.finished_at or job.created_at)}</td><td>{error}</td>"
            f"<td>{job_actions(job)}</td></tr>"
        )
    return (
        "<table><thead><tr><th>job</th><th>plan</th><th>phase</th><th>attempt</th>"
        "<th>failed</th><th>error</th><th></th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>" + footer
    )


def outcome_badge(outcome: RunOutcomeOut | None) -> str:
    """The badge of a job's last outcome."""
    if outcome is None:
        return '<span class="muted">never ran</span>'
    label = {"clean": "clean", "failed": "failed"}.get(outcome.pill, outcome.pill)
    return (
        f"{pill(outcome.pill, label)} {status(outcome.status)} "
        f'<span class="muted">{outcome.finding_count} findings</span>'
    )


def recoverable_table(jobs: list[RecoverableJobOut]) -> str:
    """Registered recoverable jobs: the badge of their last outcome, trigger and cancel."""
    if not jobs:
        return '<p class="muted">No recoverable jobs are registered.</p>'
    rows = []
    for job in jobs:
        active = job.active_run
        run = f"{status(active.status)} {run_link(active.id)}" if active else "-"
        base = f"/api/admin/jobs/{job.name}"
        actions = button("trigger", f"{base}/trigger", f"Trigger {job.name}?")
        if active is not None and active.status == "Running":
            actions += " " + button(
                "cancel", f"{base}/cancel", f"Cancel the running {job.name} run?", True
            )
        every = f"every {job.interval_seconds:g}s" if job.interval_seconds else "by hand"
        rows.append(
            f'<tr data-recoverable="{escape(job.name)}"><td><code>{e(job.name)}</code></td>'
            f"<td>{e(every)}</td><td>{outcome_badge(job.last_outcome)}</td><td>{run}</td>"
            f"<td>{actions}</td></tr>"
        )
    return (
        "<table><thead><tr><th>job</th><th>schedule</th><th>last outcome</th>"
        f"<th>active run</th><th></th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def run_progress(run: RunSummaryOut) -> str:
    """A run's bar (raw fraction and kind in the title), or its raw scanned count."""
    progress = run.progress
    if progress is None:
        return f'<span class="muted">{run.stats.get("scanned_count", 0)} scanned</span>'
    title = (
        f"raw fraction {progress.fraction:.4f} ({progress.kind}): "
        f"{progress.scanned} / {progress.total}"
    )
    return bar(progress.fraction, title, progress.kind)


def runs_table(runs: list[tuple[RunSummaryOut, dict[str, int]]]) -> str:
    """Recent runs of every job, newest first, with progress and outcome pills."""
    if not runs:
        return '<p class="muted">No runs yet.</p>'
    rows = []
    for run, counts in runs:
        findings = button_link(run) if sum(counts.values()) else ""
        rows.append(
            f'<tr data-run="{escape(run.id)}"><td>{run_link(run.id)}</td><td><code>'
            f"{e(run.job_name)}</code></td><td>{status(run.status)}</td>"
            f'<td class="progress">{run_progress(run)}</td>'
            f'<td class="pills">{severity_pills(counts, run.status == "Failed")}</td>'
            f"<td><code>{e(run.cursor_hex)}</code></td><td>{when(run.started_at)}</td>"
            f"<td>{when(run.last_progress_at)}</td><td>{e(run.error_message)}</td>"
            f"<td>{findings}</td></tr>"
        )
    return (
        "<table><thead><tr><th>run</th><th>job</th><th>status</th><th>progress</th>"
        "<th>outcome</th><th>cursor_hex</th><th>started</th><th>last progress</th>"
        f"<th>error</th><th></th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def button_link(run: RunSummaryOut) -> str:
    """A button that shows the run's findings below."""
    return (
        f'<button type="button" class="act" data-findings="{escape(run.job_name)}/'
        f'{escape(run.id)}" data-offset="0">findings</button>'
    )


def finding_rows(page: list[FindingOut]) -> str:
    """The table rows of a findings page (the run's fragment and its detail page)."""
    return "".join(
        f'<tr data-finding="{escape(f.id)}"><td>{pill(f.severity, f.severity)}</td>'
        f"<td><code>{e(f.kind)}</code></td><td>{e(f.resource_id)}</td>"
        f"<td><code>{e(f.detail)}</code></td><td>{when(f.created_at)}</td></tr>"
        for f in page
    )


def findings_table(
    job_name: str, run_id: str, page: list[FindingOut], total: int, limit: int, offset: int
) -> str:
    """One page of a run's findings, with previous/next buttons."""
    target = f"{escape(job_name)}/{escape(run_id)}"
    head = f"<p>Findings of run {short(run_id, 26)} ({e(job_name)}): "
    if not page:
        return head + f"none after {offset} (of {total}).</p>"
    shown = f"{offset + 1}-{offset + len(page)} of {total}"
    rows = finding_rows(page)
    nav = []
    if offset > 0:
        nav.append(
            f'<button type="button" class="act" data-findings="{target}" '
            f'data-offset="{max(offset - limit, 0)}">previous</button>'
        )
    if offset + len(page) < total:
        nav.append(
            f'<button type="button" class="act" data-findings="{target}" '
            f'data-offset="{offset + limit}">next</button>'
        )
    return (
        f'{head}<span class="shown">{shown}</span></p><table><thead><tr><th>severity</th>'
        "<th>kind</th><th>resource</th><th>detail</th><th>recorded</th></tr></thead>"
        f'<tbody>{rows}</tbody></table><p class="nav">{" ".join(nav)}</p>'
    )


def error_box(message: str) -> str:
    """What a section shows when its data cannot be read (ledger down, auth, …)."""
    return f'<p class="error-box">{escape(cut(message))}</p>'
