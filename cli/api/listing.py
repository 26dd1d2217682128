"""The dashboard's listings: one page of plans or jobs, filtered, with its total and next page.

The stores page jobs and plans by key (`after=`, store/keyset.py) and count them, bounded
("more than 10,000"); they filter jobs by status and plans by nothing. A filter a store
does not have (a job's phase, a plan's status or phase) is applied here while walking the
store's pages, newest first, and stops after SCAN_CAP rows: such a page says how far it
looked instead of a total, so the dashboard never claims a count it did not make.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from planq.cli import services
from planq.cli.context import Planq
from planq.cli.output import BadInput, NotFound

#: The most rows one filtered page walks through before it stops and offers "older".
SCAN_CAP = 2_000
#: Rows read per store call while walking.
BATCH = 200
PLAN_STATUSES = ("queued", "running", "complete", "failed", "cancelled")
PHASES = ("strategize", "execute", "apply")
JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class Listing:
    """One page: its rows, how many match in all (text) and the query of the older page."""

    rows: list[Any]
    #: "41", "more than 10,000", or "" when the filter is not one the store counts.
    total: str
    older: dict[str, str] | None = None
    #: What a scanned (uncounted) page looked through, said under the table.
    note: str = ""
    query: dict[str, str] = field(default_factory=dict)
    #: Whether this page starts after a cursor (an older page: "50 older of 75").
    later: bool = False


def choice(name: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
    """The value if it is one of allowed, None for nothing; BadInput naming the valid ones."""
    text = (value or "").strip().lower()
    if not text:
        return None
    if text not in allowed:
        raise BadInput(f"{name} {describe(text)} is not one of: {', '.join(allowed)}")
    return text


def describe(text: str) -> str:
    """A short quoted form of what was typed (never echoed whole)."""
    return repr(text if len(text) <= 40 else text[:39] + "…")


def _phase_of(row: Any) -> str:
    phase = getattr(row, "phase", None)
    return str(getattr(phase, "value", phase) or "")


def _status_of(row: Any) -> str:
    status = getattr(row, "status", None)
    return str(getattr(status, "value", status) or "")


def _ulid(text: str) -> str:
    from planq.domain.ids import is_ulid

    wanted = text.strip().upper()
    if not is_ulid(wanted):
        raise BadInput(f"id {describe(text)} is not a plan or job id (a 26-character ULID)")
    return wanted


def plan_for_id(planq: Planq, ident: str) -> Any:
    """The plan named by a plan id, or the plan of a job id; NotFound when neither."""
    wanted = _ulid(ident)
    plan = planq.ledger.plans.get(wanted)
    if plan is not None:
        return plan
    job = planq.ledger.jobs.get(wanted)
    if job is not None:
        return services.find_plan(planq, job.plan_id)
    raise NotFound(f"no plan or job with id {wanted}")


def jobs_for_id(planq: Planq, ident: str) -> list[Any]:
    """The job with that id, or every job of the plan with that id (newest first)."""
    wanted = _ulid(ident)
    job = planq.ledger.jobs.get(wanted)
    if job is not None:
        return [job]
    if planq.ledger.plans.get(wanted) is not None:
        return list(reversed(planq.ledger.jobs.list_by_plan(wanted)))
    raise NotFound(f"no job or plan with id {wanted}")


def plans(
    planq: Planq,
    limit: int,
    after: str | None = None,
    status: str | None = None,
    phase: str | None = None,
    ident: str | None = None,
) -> Listing:
    """Plans newest first: by id, keyset pages with the store's bounded total, or walked."""
    status, phase, query, matches = _criteria(status, phase, PLAN_STATUSES)
    if ident and ident.strip():
        plan = plan_for_id(planq, ident)
        keep = matches(plan)
        return Listing([plan] if keep else [], "1" if keep else "0", query=query)
    if status is None and phase is None:
        page = services.plan_page(planq, limit, after=after)
        older = {"after": page.next_after} if page.next_after else None
        return Listing(page.rows, page.total_text(), older, query=query, later=bool(after))
    return _filtered(
        lambda cursor: services.recent_plans(planq, BATCH, after=cursor),
        matches,
        ("plan_id", after, limit),
        query,
        ("filtered", "plans"),
    )


def jobs(
    planq: Planq,
    limit: int,
    after: str | None = None,
    status: str | None = None,
    phase: str | None = None,
    ident: str | None = None,
) -> Listing:
    """Jobs newest first: by id, keyset pages with the store's bounded total, or walked."""
    status, phase, query, matches = _criteria(status, phase, JOB_STATUSES)
    if ident and ident.strip():
        found = [j for j in jobs_for_id(planq, ident) if matches(j)]
        return Listing(found, str(len(found)), query=query)
    if phase is None:
        page = services.job_page(planq, status, None, limit, after=after)
        older = {**query, "after": page.next_after} if page.next_after else None
        return Listing(page.rows, page.total_text(), older, query=query, later=bool(after))
    return _filtered(
        lambda cursor: services.list_jobs(planq, status, None, BATCH, after=cursor),
        matches,  # the store filtered the status already
        ("job_id", after, limit),
        query,
        ("phase filtered", f"{status} jobs" if status else "jobs"),
    )


def _criteria(
    status: str | None, phase: str | None, statuses: tuple[str, ...]
) -> tuple[str | None, str | None, dict[str, str], Callable[[Any], bool]]:
    """A listing's filter, checked: (status, phase, its query string, whether a row matches)."""
    status = choice("status", status, statuses)
    phase = choice("phase", phase, PHASES)
    query = {k: v for k, v in (("status", status), ("phase", phase)) if v}

    def matches(row: Any) -> bool:
        return status in (None, _status_of(row)) and phase in (None, _phase_of(row))

    return status, phase, query, matches


def _filtered(
    fetch: Callable[[str | None], list[Any]],
    keep: Callable[[Any], bool],
    page: tuple[str, str | None, int],
    query: dict[str, str],
    said: tuple[str, str],
) -> Listing:
    """A page walked newest first through what the filter keeps, with a note: not counted.

    page is (id name, after, limit); said is (how it filtered, what it read).
    """
    id_name, after, limit = page
    walked = _walk(fetch, keep, id_name, after, limit)
    how, what = said
    note = f"{how} while reading {walked.scanned:,} {what} (newest first); not counted"
    return replace(walked.listing(query, note), later=bool(after))


@dataclass
class _Walked:
    """What a filtered walk found: the rows, where it stopped and how far it read."""

    rows: list[Any]
    cursor: str | None
    scanned: int
    exhausted: bool

    def listing(self, query: dict[str, str], note: str) -> Listing:
        """The page: no total (not counted), an older link unless the rows ran out."""
        older = None if self.exhausted or self.cursor is None else {**query, "after": self.cursor}
        return Listing(self.rows, "", older, note, query)


def _walk(
    fetch: Callable[[str | None], list[Any]],
    keep: Callable[[Any], bool],
    id_name: str,
    after: str | None,
    limit: int,
) -> _Walked:
    """Read keyset pages of BATCH rows from after, keeping rows keep() accepts, up to limit.

    It stops after SCAN_CAP rows read, so a filter that matches nothing costs a bounded read.
    """
    rows: list[Any] = []
    cursor = after
    scanned = 0
    while len(rows) < limit and scanned < SCAN_CAP:
        batch = fetch(cursor)
        for row in batch:
            scanned += 1
            cursor = str(getattr(row, id_name))
            if keep(row):
                rows.append(row)
                if len(rows) == limit:
                    break
        if len(batch) < BATCH and len(rows) < limit:
            return _Walked(rows, cursor, scanned, exhausted=True)
    return _Walked(rows, cursor, scanned, exhausted=False)
