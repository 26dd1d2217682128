"""Bounds on what people type into the CLI, checked before a ledger is opened, and one page.

Every check raises a one-line BadInput (exit 2) or the domain's BoundsError (also exit 2), so
`inf`, `1e23`, a NUL byte or an over-long name never reaches a store or a timer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planq.cli.output import BadInput

#: The most rows a listing pages over (offset + limit): a bound for people and scripts.
MAX_PAGE_WINDOW = 10_000
#: `plans watch`: the longest wait and the longest pause between polls.
MAX_WATCH_SECONDS = 7 * 86_400.0
MAX_POLL_SECONDS = 3_600.0
MIN_POLL_SECONDS = 0.05


#: Totals count no further than this (one more row tells "more than"): a bounded count.
TOTAL_CAP = MAX_PAGE_WINDOW


@dataclass(frozen=True)
class Page:
    """One page of a newest-first listing and how many rows the filter matches in all.

    A total over TOTAL_CAP is not counted: it is TOTAL_CAP with lower_bound set, shown as
    "more than 10,000" (`total_is_lower_bound` in JSON). next_after is the cursor for the
    next page (`--after` / `?after=`) when this one is full.
    """

    rows: list[Any]
    total: int
    limit: int
    offset: int = 0
    lower_bound: bool = False
    next_after: str | None = None
    #: The listing's order, said under a table ("oldest first" for a run's findings).
    order: str = "newest first"

    @classmethod
    def bounded(
        cls, rows: list[Any], counted: int, limit: int, offset: int = 0, **more: Any
    ) -> Page:
        """A page whose total came from a count capped at TOTAL_CAP + 1."""
        over = counted > TOTAL_CAP
        return cls(rows, TOTAL_CAP if over else counted, limit, offset, over, **more)

    def total_text(self) -> str:
        """'1234', or 'more than 10,000' for a capped count."""
        return f"more than {self.total:,}" if self.lower_bound else str(self.total)

    def showing(self) -> str:
        """'showing 50 of 1234 (newest first)' for the line under a table."""
        if not self.rows:
            return f"showing 0 of {self.total_text()}"
        first, last = self.offset + 1, self.offset + len(self.rows)
        span = f"{len(self.rows)}" if self.offset == 0 else f"{first}-{last}"
        tail = f"; next page: --after {self.next_after}" if self.next_after else ""
        return f"showing {span} of {self.total_text()} ({self.order}{tail})"

    def header(self, key: str, documents: list[Any]) -> dict[str, Any]:
        """The JSON document: the rows under key, with total, limit, offset and the cursor."""
        return {
            key: documents,
            "total": self.total,
            "total_is_lower_bound": self.lower_bound,
            "limit": self.limit,
            "offset": self.offset,
            "next_after": self.next_after,
        }


def check_window(limit: int, offset: int) -> None:
    """BadInput unless 1 <= limit and 0 <= offset and the window stays bounded."""
    if limit < 1 or offset < 0 or offset + limit > MAX_PAGE_WINDOW:
        raise BadInput(
            f"limit must be >= 1, offset >= 0 and offset + limit <= {MAX_PAGE_WINDOW} "
            f"(got limit={limit}, offset={offset})"
        )


def number_option(option: str, value: float, low: float, high: float) -> float:
    """The domain's check_number, refusing in the words of an option (BadInput)."""
    from planq.domain.bounds import check_number  # lazy: `planq --help` loads no domain
    from planq.domain.errors import BoundsError

    try:
        return check_number(option, value, low, high)
    except BoundsError:
        raise BadInput(
            f"{option} must be a finite number from {low:g} to {high:g}, got {value!r}"
        ) from None


def check_watch(timeout: float, interval: float) -> None:
    """`plans watch` bounds: a finite timeout and a poll interval within reason."""
    number_option("--timeout", timeout, 0.0, MAX_WATCH_SECONDS)
    number_option("--interval", interval, MIN_POLL_SECONDS, MAX_POLL_SECONDS)
