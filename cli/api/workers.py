"""The dashboard's worker status: each node, its processes' heartbeats and its in-flight jobs.

Two views side by side, each bounded so the page stays fast:

- the ledger's: the newest RUNNING_SCAN running jobs (read from the partial index of live
  jobs) grouped by node (a worker id is `<node>/<pid>`), each node with its processes, its
  jobs and its newest heartbeat; a heartbeat older than PLANQ_JOB_TIMEOUT is marked stale
  (the stuck sweep's rule), since that process has stopped beating;
- Celery's: one bounded `inspect().active()` broadcast, its answer kept a few seconds
  (celery_view.py), so a page that refreshes every 2 s never waits on a silent broker.

Nodes that answer Celery but run nothing are listed as idle; nodes with running jobs that do
not answer are marked so: that is what an operator looks for after a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from planq.cli import services
from planq.cli.api.celery_view import CeleryAsker, CeleryView
from planq.cli.api.shell import Section, html, page
from planq.cli.api.state import api_state, session
from planq.cli.api.templating import ago, render, utc
from planq.cli.context import Planq

router = APIRouter(include_in_schema=False)
#: The most running jobs one render reads (newest first); more is said under the table.
RUNNING_SCAN = 500
#: Jobs listed per node; the rest are counted.
JOBS_SHOWN = 10


@dataclass
class Node:
    """One worker node as the ledger and Celery see it."""

    name: str
    pids: set[str] = field(default_factory=set)
    jobs: list[Any] = field(default_factory=list)
    last_heartbeat: datetime | None = None
    #: Tasks Celery says it is running; None when it did not answer.
    celery_active: int | None = None


def node_of(worker_id: str) -> tuple[str, str]:
    """(node, pid) of a ledger worker id `<node>/<pid>`; a bare id is its own node."""
    node, _, pid = worker_id.rpartition("/")
    return (node, pid) if node else (worker_id, "")


def nodes(running: list[Any], celery: CeleryView | None) -> list[Node]:
    """Running jobs grouped by node, with Celery's answer; busiest first, then by name."""
    found: dict[str, Node] = {}
    for job in running:
        worker = getattr(job, "worker_id", None) or "?"
        name, pid = node_of(str(worker))
        node = found.setdefault(name, Node(name))
        if pid:
            node.pids.add(pid)
        node.jobs.append(job)
        beat = getattr(job, "last_heartbeat", None)
        if beat is not None and (node.last_heartbeat is None or utc(beat) > node.last_heartbeat):
            node.last_heartbeat = utc(beat)
    if celery is not None:
        for name, active in celery.active.items():
            found.setdefault(name, Node(name)).celery_active = active
    return sorted(found.values(), key=lambda n: (-len(n.jobs), n.name))


def count(n: int, noun: str) -> str:
    """'1 node', '3 nodes'."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


@dataclass(frozen=True)
class NodeRow:
    """One node as its table row shows it: its pids in order, whether its beat is stale."""

    node: Node
    pids: str
    stale: bool


def summary(listed: list[Node], scanned: int, celery: CeleryView | None, at: datetime) -> list[str]:
    """The lines under the table: what the ledger's scan and Celery's broadcast each said."""
    busy = sum(1 for n in listed if n.jobs)
    lines = [f"{count(scanned, 'running job')} on {count(busy, 'node')} (ledger)"]
    if scanned >= RUNNING_SCAN:
        lines[0] = f"the newest {RUNNING_SCAN:,} running jobs (ledger; there may be more)"
    if celery is None:
        lines.append("Celery: not asked yet")
    elif celery.error:
        lines.append(f"Celery: no answer ({celery.error[:200]})")
    else:
        asked = ago(celery.asked_utc, at)
        lines.append(f"Celery: {count(len(celery.active), 'node')} answered (asked {asked})")
    return lines


def workers_table(
    listed: list[Node],
    scanned: int,
    celery: CeleryView | None,
    stale_after: float,
    now: datetime | None = None,
) -> Markup:
    """The section's HTML: one row per node and what each view said."""
    at = now or datetime.now(UTC)
    rows = [
        NodeRow(
            n,
            ", ".join(sorted(n.pids, key=lambda p: (len(p), p))),
            n.last_heartbeat is not None and (at - n.last_heartbeat).total_seconds() > stale_after,
        )
        for n in listed
    ]
    return render(
        "workers_table.html",
        rows=rows,
        celery=celery,
        now=at,
        jobs_shown=JOBS_SHOWN,
        lines=summary(listed, scanned, celery, at),
    )


def workers_html(planq: Planq, asker: CeleryAsker) -> Markup:
    """The worker status section: the ledger's running jobs by node, and Celery's answer."""
    running = services.list_jobs(planq, "running", None, RUNNING_SCAN)
    celery = asker.view(planq.app)
    stale_after = float(planq.settings.job_timeout)
    return workers_table(nodes(running, celery), len(running), celery, stale_after)


def workers_section(request: Request) -> Section:
    """The Workers box (the overview's and the Workers page's)."""
    asker = api_state(request).celery
    return Section(
        "workers",
        "Workers",
        "/dashboard/fragments/workers",
        lambda planq: workers_html(planq, asker),
    )


@router.get("/dashboard/fragments/workers")
def workers_fragment(request: Request, planq: Annotated[Planq, Depends(session)]) -> HTMLResponse:
    """The worker status."""
    return html(workers_html(planq, api_state(request).celery))


@router.get("/dashboard/workers")
def workers_page(request: Request) -> HTMLResponse:
    """Worker nodes, their heartbeats and in-flight jobs."""
    return page(request, "Workers · planq", [workers_section(request)], "/dashboard/workers")
