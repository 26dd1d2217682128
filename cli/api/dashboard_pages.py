"""The dashboard's listing and detail pages: plans, jobs, failed jobs; one plan, job or run.

All GET, all reads: each page is the shell (shell.py) around sections whose fragments are
served here behind the same read rule as the JSON API. Paging is by link (`after=`, the
stores' keyset cursor), filters are GET forms, so the pages read with JavaScript off; the
buttons on them post through the same guarded doors as the overview's. The three listings
(plans, jobs, failed jobs) are one ListingKind each: its section, fragment and page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from planq.cli import services
from planq.cli.api import detail_html, fragments, listing, pipeline_html
from planq.cli.api.models import FindingOut, JobOut, PlanOut, RunSummaryOut
from planq.cli.api.routes_ledger import plan_detail
from planq.cli.api.shell import Section, html, page
from planq.cli.api.state import api_state, session
from planq.cli.api.templating import render
from planq.cli.context import Planq
from planq.cli.limits import MAX_PAGE_WINDOW
from planq.cli.output import one_line

router = APIRouter(include_in_schema=False)
Session = Annotated[Planq, Depends(session)]
#: Rows per page on the listing pages (the overview asks for fewer).
PAGE_ROWS = 50
MAX_ROWS = 200
FINDINGS_PAGE = 25
IdPath = Annotated[str, Path(min_length=1, max_length=40, pattern=r"^[0-9A-Za-z]+$")]


@dataclass(frozen=True)
class ListQuery:
    """A listing's filters and position, as the page's URL and its fragment's carry them."""

    status: str = ""
    phase: str = ""
    ident: str = ""
    after: str = ""
    limit: int = PAGE_ROWS

    def encoded(self, **extra: str) -> str:
        """The query string (only what is set), for the fragment URL of a page."""
        pairs = {
            "status": self.status,
            "phase": self.phase,
            "id": self.ident,
            "after": self.after,
            "limit": str(self.limit) if self.limit != PAGE_ROWS else "",
            **extra,
        }
        return urlencode({k: v for k, v in pairs.items() if v})

    def url(self, path: str) -> str:
        """The path with this query (no bare '?' when nothing is set)."""
        query = self.encoded()
        return f"{path}?{query}" if query else path

    @property
    def first(self) -> bool:
        """Whether this is the newest page."""
        return not self.after


def list_query(
    status: Annotated[str, Query(max_length=20)] = "",
    phase: Annotated[str, Query(max_length=20)] = "",
    ident: Annotated[str, Query(alias="id", max_length=40)] = "",
    after: Annotated[str, Query(max_length=40)] = "",
    limit: Annotated[int, Query(ge=1, le=MAX_ROWS)] = PAGE_ROWS,
) -> ListQuery:
    """Dependency: the listing's query (values are checked where they are used)."""
    return ListQuery(status.strip(), phase.strip(), ident.strip(), after.strip(), limit)


Listed = Annotated[ListQuery, Depends(list_query)]


# -- what each section shows ----------------------------------------------------------------
def plans_html(planq: Planq, q: ListQuery) -> Markup:
    """Plans newest first with their phases, the total and the older page's link."""
    found = listing.plans(planq, q.limit, q.after or None, q.status, q.phase, q.ident)
    rows: list[tuple[PlanOut, dict[str, JobOut | None] | str]] = []
    for plan in found.rows:
        try:
            rows.append((PlanOut.of(plan), plan_detail(planq, plan.plan_id).phases))
        except ValueError as exc:
            rows.append((PlanOut.of(plan), f"its jobs do not load: {one_line(exc)}"))
    footer = detail_html.pager(found, "/dashboard/plans", "plans", q.first and not q.ident)
    return fragments.plans_table(rows, footer)


def jobs_html(planq: Planq, q: ListQuery) -> Markup:
    """Jobs newest first (every status unless filtered), the total and the older page's link."""
    found = listing.jobs(planq, q.limit, q.after or None, q.status, q.phase, q.ident)
    footer = detail_html.pager(found, "/dashboard/jobs", "jobs", q.first and not q.ident)
    return fragments.jobs_table([JobOut.of(j) for j in found.rows], footer)


def without_status(query: dict[str, str]) -> dict[str, str]:
    """A query without its status (the failed-jobs page's own filter)."""
    return {k: v for k, v in query.items() if k != "status"}


def failed_html(planq: Planq, q: ListQuery) -> Markup:
    """Failed jobs newest first, their error text in the row."""
    found = listing.jobs(planq, q.limit, q.after or None, "failed", q.phase, q.ident)
    found = replace(  # the page itself means status=failed: its links need not say so
        found,
        query=without_status(found.query),
        older=without_status(found.older) if found.older else None,
    )
    footer = detail_html.pager(found, "/dashboard/failed", "failed jobs", q.first and not q.ident)
    return fragments.failed_table([JobOut.of(j) for j in found.rows], footer)


def plan_html(planq: Planq, plan_id: str) -> Markup:
    """One plan's page content."""
    detail = plan_detail(planq, plan_id)
    plan = PlanOut.model_validate(detail.model_dump(exclude={"step_list", "jobs", "phases"}))
    pipeline = pipeline_html.plan_pipeline(planq, plan_id)  # the pipeline's section
    return detail_html.plan_detail(plan, detail.step_list, detail.jobs, pipeline)


def job_html(planq: Planq, job_id: str, flower_url: str) -> Markup:
    """One job's page content: every field the ledger's view of it has."""
    from planq.cli.views import job_dict

    return detail_html.job_detail(
        job_dict(services.find_job(planq, job_id), detail=True, traceback=True), flower_url
    )


def run_html(planq: Planq, run_id: str, offset: int) -> Markup:
    """One run's page content with a page of its findings."""
    run = services.find_run(planq, run_id)
    counts = planq.runs.finding_severity_counts(run.id)
    found = planq.runs.list_findings(run.id, limit=FINDINGS_PAGE, offset=offset)
    return detail_html.run_detail(
        RunSummaryOut.of(run), counts, [FindingOut.of(f) for f in found], offset, FINDINGS_PAGE
    )


# -- the filter forms (in the shell, outside the refreshed part) -----------------------------
def filter_form(action: str, q: ListQuery, statuses: tuple[str, ...] | None) -> Markup:
    """A GET form: status, phase and an id to look for; it works with JavaScript off."""
    return render("filter_form.html", action=action, q=q, statuses=statuses, phases=listing.PHASES)


@dataclass(frozen=True)
class ListingKind:
    """One listing page's parts: its key (fragment and page path), title, rows and filters."""

    key: str
    title: str
    render: Callable[[Planq, ListQuery], str]
    statuses: tuple[str, ...] | None  #: the status filter's choices; None: the page fixes it

    def section(self, q: ListQuery) -> Section:
        """The listing's box for q (the overview's or its own page's)."""
        return Section(
            self.key,
            self.title,
            q.url(f"/dashboard/fragments/{self.key}"),
            lambda planq: self.render(planq, q),
            filter_form(f"/dashboard/{self.key}", q, self.statuses),
        )


PLANS = ListingKind("plans", "Plans", plans_html, listing.PLAN_STATUSES)
JOBS = ListingKind("jobs", "Jobs", jobs_html, listing.JOB_STATUSES)
FAILED = ListingKind("failed", "Failed jobs", failed_html, None)


# -- fragments --------------------------------------------------------------------------------
def _fragment(planq: Planq, render: Callable[[Planq], str]) -> HTMLResponse:
    return html(render(planq))


@router.get("/dashboard/fragments/plan/{plan_id}")
def plan_fragment(planq: Session, plan_id: IdPath) -> HTMLResponse:
    """One plan."""
    return _fragment(planq, lambda p: plan_html(p, plan_id))


@router.get("/dashboard/fragments/job/{job_id}")
def job_fragment(request: Request, planq: Session, job_id: IdPath) -> HTMLResponse:
    """One job."""
    flower = str(api_state(request).settings.flower_url or "")
    return _fragment(planq, lambda p: job_html(p, job_id, flower))


@router.get("/dashboard/fragments/run/{run_id}")
def run_fragment(
    planq: Session, run_id: IdPath, offset: Annotated[int, Query(ge=0, le=MAX_PAGE_WINDOW)] = 0
) -> HTMLResponse:
    """One run with a page of its findings."""
    return _fragment(planq, lambda p: run_html(p, run_id, offset))


# -- pages ------------------------------------------------------------------------------------
def route_listing(kind: ListingKind) -> None:
    """The listing's page (`/dashboard/<key>`) and its fragment, both GET."""

    def fragment(planq: Session, q: Listed) -> HTMLResponse:
        return html(kind.render(planq, q))

    def full_page(request: Request, q: Listed) -> HTMLResponse:
        path = f"/dashboard/{kind.key}"
        return page(request, f"{kind.title} · planq", [kind.section(q)], path)

    fragment.__doc__ = f"One page of {kind.title.lower()}."
    full_page.__doc__ = f"{kind.title}, newest first, paged by key, filtered, or found by id."
    router.add_api_route(f"/dashboard/fragments/{kind.key}", fragment, methods=["GET"])
    router.add_api_route(f"/dashboard/{kind.key}", full_page, methods=["GET"])


for _kind in (PLANS, JOBS, FAILED):
    route_listing(_kind)


@router.get("/dashboard/plans/{plan_id}")
def plan_page(request: Request, plan_id: IdPath) -> HTMLResponse:
    """One plan and its jobs."""
    section = Section(
        "plan",
        f"Plan {plan_id}",
        f"/dashboard/fragments/plan/{quote(plan_id)}",
        lambda planq: plan_html(planq, plan_id),
    )
    return page(request, f"Plan {plan_id} · planq", [section])


@router.get("/dashboard/jobs/{job_id}")
def job_page(request: Request, job_id: IdPath) -> HTMLResponse:
    """One job: every field, its error, its plan and its Flower task."""
    flower = str(api_state(request).settings.flower_url or "")
    section = Section(
        "job",
        f"Job {job_id}",
        f"/dashboard/fragments/job/{quote(job_id)}",
        lambda planq: job_html(planq, job_id, flower),
    )
    return page(request, f"Job {job_id} · planq", [section])


@router.get("/dashboard/runs/{run_id}")
def run_page(
    request: Request,
    run_id: IdPath,
    offset: Annotated[int, Query(ge=0, le=MAX_PAGE_WINDOW)] = 0,
) -> HTMLResponse:
    """One recoverable run and its findings, paged."""
    tail = f"?offset={offset}" if offset else ""
    section = Section(
        "run",
        f"Run {run_id}",
        f"/dashboard/fragments/run/{quote(run_id)}{tail}",
        lambda planq: run_html(planq, run_id, offset),
    )
    return page(request, f"Run {run_id} · planq", [section])
