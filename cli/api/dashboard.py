"""The dashboard: a server-rendered page whose sections refresh in place (no full reload).

The overview's sections (recoverable jobs, runs, findings, the newest plans, failed and all
jobs) link to the listing and detail pages (dashboard_pages.py); every page is shell.py's
shell. The page shell carries no ledger data and needs no token; its sections are HTML fragments
behind the same read rule as the JSON API, fetched by the page's small script with the
bearer token (kept in the tab's sessionStorage, given once as `/#token=…` or in the form;
`&findings=<job>/<run id>` opens a run's findings).
When reads need no token, the shell arrives with the sections already rendered.
Without any token configured, the page also carries the CSRF token its buttons send (and
sets the cookie it is bound to): same_origin.py refuses a browser's write without both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from planq.cli import services
from planq.cli.api import dashboard_pages, fragments, shell, workers
from planq.cli.api.dashboard_pages import ListQuery
from planq.cli.api.models import FindingOut, RunSummaryOut
from planq.cli.api.routes_runs import MAX_FINDINGS, recoverable_job
from planq.cli.api.shell import Section, html
from planq.cli.api.state import session
from planq.cli.context import Planq

router = APIRouter(include_in_schema=False)
Session = Annotated[Planq, Depends(session)]
PLANS_SHOWN = 20
RUNS_SHOWN = 20
JOBS_SHOWN = 25
FAILED_SHOWN = 10
FINDINGS_PAGE = 25


def recoverable_section(planq: Planq) -> Markup:
    """Registered recoverable jobs and their badges."""
    from planq.tasks.run_service import registered_jobs

    jobs = [recoverable_job(planq, name) for name in sorted(registered_jobs(planq.app))]
    return fragments.recoverable_table(jobs)


def runs_section(planq: Planq) -> Markup:
    """Recent runs of every job with their severity counts."""
    runs = planq.runs.list_runs(None, limit=RUNS_SHOWN)
    rows = [(RunSummaryOut.of(r), planq.runs.finding_severity_counts(r.id)) for r in runs]
    return fragments.runs_table(rows)


SECTIONS: dict[str, tuple[str, Callable[[Planq], str]]] = {
    "recoverable": ("Recoverable jobs", recoverable_section),
    "runs": ("Runs", runs_section),
}


@router.get("/dashboard/fragments/findings")
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
    return html(fragments.findings_table(job_name, found.id, rows, total, FINDINGS_PAGE, offset))


@router.get("/dashboard/fragments/{name}")
def fragment(planq: Session, name: str) -> HTMLResponse:
    """One section's HTML."""
    if name not in SECTIONS:
        return html(fragments.error_box(f"no section {name!r}"), 404)
    return html(SECTIONS[name][1](planq))


def overview_sections(request: Request) -> list[Section]:
    """The overview: recoverable jobs, runs, findings, workers, then each listing's first page."""
    sections = [
        Section(key, title, f"/dashboard/fragments/{key}", render)
        for key, (title, render) in SECTIONS.items()
    ]
    sections.append(
        Section(
            "findings",
            "Findings",
            "",
            placeholder="Pick a run's findings above.",
        )
    )
    sections.append(workers.workers_section(request))
    sections.append(dashboard_pages.FAILED.section(ListQuery(limit=FAILED_SHOWN)))
    sections.append(dashboard_pages.PLANS.section(ListQuery(limit=PLANS_SHOWN)))
    sections.append(dashboard_pages.JOBS.section(ListQuery(limit=JOBS_SHOWN)))
    return sections


@router.get("/")
@router.get("/dashboard")
def overview(request: Request) -> HTMLResponse:
    """The dashboard's overview page."""
    return shell.page(request, "planq dashboard", overview_sections(request), "/dashboard")
