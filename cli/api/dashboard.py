"""The dashboard: a server-rendered page whose sections refresh in place (no full reload).

The page shell carries no ledger data and needs no token; its sections are HTML fragments
behind the same read rule as the JSON API, fetched by the page's small script with the
bearer token (kept in the tab's sessionStorage, given once as `/#token=…` or in the form;
`&findings=<job>/<run id>` opens a run's findings).
When reads need no token, the shell arrives with the sections already rendered.
Without any token configured, the page also carries the CSRF token its buttons send (and
sets the cookie it is bound to): same_origin.py refuses a browser's write without both.
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response

from planq.cli import services
from planq.cli.api import assets, fragments
from planq.cli.api.auth import configured_token, reads_need_token, require_read
from planq.cli.api.csrf import CsrfTokens
from planq.cli.api.models import FindingOut, JobOut, PlanOut, RunSummaryOut
from planq.cli.api.routes_ledger import plan_detail
from planq.cli.api.routes_runs import MAX_FINDINGS, recoverable_job
from planq.cli.api.state import api_state, session
from planq.cli.context import Planq
from planq.cli.output import classify, one_line

router = APIRouter(include_in_schema=False)
Session = Annotated[Planq, Depends(session)]
READ = [Depends(require_read)]
PLANS_SHOWN = 20
RUNS_SHOWN = 20
JOBS_SHOWN = 50
FINDINGS_PAGE = 25


def recoverable_section(planq: Planq) -> str:
    """Registered recoverable jobs and their badges."""
    from planq.tasks.recoverable import registered_jobs

    jobs = [recoverable_job(planq, name) for name in sorted(registered_jobs(planq.app))]
    return fragments.recoverable_table(jobs)


def runs_section(planq: Planq) -> str:
    """Recent runs of every job with their severity counts."""
    runs = planq.runs.list_runs(None, limit=RUNS_SHOWN)
    rows = [(RunSummaryOut.of(r), planq.runs.finding_severity_counts(r.id)) for r in runs]
    return fragments.runs_table(rows)


def plans_section(planq: Planq) -> str:
    """Recent plans with the latest job of each phase.

    A plan whose job rows do not load (a corrupt payload: what ledger_consistency reports)
    shows why in its own row; the other plans still render.
    """
    rows: list[tuple[PlanOut, dict[str, JobOut | None] | str]] = []
    for plan in services.recent_plans(planq, PLANS_SHOWN):
        try:
            rows.append((PlanOut.of(plan), plan_detail(planq, plan.plan_id).phases))
        except ValueError as exc:
            rows.append((PlanOut.of(plan), f"its jobs do not load: {one_line(exc)}"))
    return fragments.plans_table(rows)


def jobs_section(planq: Planq) -> str:
    """Running, then queued, jobs."""
    active = [
        JobOut.of(j)
        for wanted in ("running", "queued")
        for j in services.list_jobs(planq, wanted, None, JOBS_SHOWN)
    ]
    return fragments.jobs_table(active)


SECTIONS: dict[str, tuple[str, Callable[[Planq], str]]] = {
    "recoverable": ("Recoverable jobs", recoverable_section),
    "runs": ("Runs", runs_section),
    "plans": ("Plans", plans_section),
    "jobs": ("Queued and running jobs", jobs_section),
}


def _html(text: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status_code, headers={"Cache-Control": "no-store"})


@router.get("/dashboard/fragments/findings", dependencies=READ)
def findings_fragment(
    planq: Session,
    run: Annotated[str, Query(pattern=r"^[^/]{1,200}/[^/]{1,40}$")],
    offset: Annotated[int, Query(ge=0)] = 0,
) -> HTMLResponse:
    """One page of a run's findings (run = 'job_name/run_id')."""
    job_name, run_id = run.split("/", 1)
    found = services.find_run(planq, run_id, job_name=job_name)
    page = planq.runs.list_findings(found.id, limit=min(FINDINGS_PAGE, MAX_FINDINGS), offset=offset)
    total = sum(planq.runs.finding_severity_counts(found.id).values())
    rows = [FindingOut.of(f) for f in page]
    return _html(fragments.findings_table(job_name, found.id, rows, total, FINDINGS_PAGE, offset))


@router.get("/dashboard/fragments/{name}", dependencies=READ)
def fragment(planq: Session, name: str) -> HTMLResponse:
    """One section's HTML."""
    if name not in SECTIONS:
        return _html(fragments.error_box(f"no section {name!r}"), 404)
    return _html(SECTIONS[name][1](planq))


@router.get("/dashboard/assets/dashboard.js")
def script() -> Response:
    """The page's script."""
    return Response(assets.JS, media_type="text/javascript")


@router.get("/dashboard/assets/dashboard.css")
def stylesheet() -> Response:
    """The page's stylesheet."""
    return Response(assets.CSS, media_type="text/css")


def _inline(request: Request, render: Callable[[Planq], str]) -> str:
    """A section rendered into the shell; a failure is shown in place, never raised."""
    state = api_state(request)
    try:
        return render(state.ready())
    except Exception as exc:
        error = classify(exc)
        text = error.message if error is not None else f"internal error: {type(exc).__name__}"
        return fragments.error_box(state.redact(one_line(Exception(text))))


def csrf_cookie(request: Request) -> tuple[str, str] | None:
    """No-token mode: (cookie name, nonce) the page's CSRF token is bound to; else None.

    With a token configured the buttons send the bearer token, which no other site can attach.
    """
    if configured_token(api_state(request).settings) is not None:
        return None
    name = CsrfTokens.cookie_name(request.scope)
    return name, CsrfTokens.nonce(request.cookies.get(name))


@router.get("/")
@router.get("/dashboard")
def page(request: Request) -> HTMLResponse:
    """The dashboard page."""
    settings = api_state(request).settings
    locked = reads_need_token(settings)
    flower = str(settings.flower_url or "")
    link = f'<a href="{escape(flower)}" rel="noopener">Flower</a>' if flower else ""
    parts = []
    for key, (title, render) in SECTIONS.items():
        inner = '<p class="muted">loading…</p>' if locked else _inline(request, render)
        parts.append(f'<section><h2>{escape(title)}</h2><div id="{key}">{inner}</div></section>')
        if key == "runs":
            parts.append(
                '<section><h2>Findings</h2><div id="findings"><p class="muted">'
                "Pick a run's findings above.</p></div></section>"
            )
    hidden = "" if locked else " hidden"
    csrf = csrf_cookie(request)
    token = api_state(request).csrf.token(csrf[1]) if csrf else ""
    meta = f'<meta name="planq-csrf" content="{token}">\n' if csrf else ""
    response = _html(
        f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{meta}<title>planq dashboard</title>
<link rel="stylesheet" href="/dashboard/assets/dashboard.css"></head>
<body data-refresh-ms="2000">
<header><h1>planq</h1>{link}<a href="/docs">API</a>
<span id="token-form"{hidden}><input id="token" type="password" placeholder="PLANQ_API_TOKEN"
 autocomplete="off"> <button type="button" class="act" id="save-token">use token</button></span>
<span id="updated" class="muted"></span><span id="notice" class="notice"></span></header>
<main>{"".join(parts)}</main>
<script src="/dashboard/assets/dashboard.js"></script>
</body></html>"""
    )
    if csrf is not None:
        response.set_cookie(*csrf, httponly=True, samesite="strict", path="/")
    return response
