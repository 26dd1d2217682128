"""The dashboard's Jinja2 environment: templates under cli/api/templates, autoescaped.

Every text a page shows is printed by a template with autoescape on, so no rendering code
escapes by hand. A template's output is `Markup`, and only such output is composed into
another template (a section into the page shell, a pager under a table).

Templates are written indented, one element a line; a newline and the indentation after it
are dropped when a template is loaded (the output is one line, as the browser reads it), so
a space the page needs is written inside a line, never at its end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from jinja2.ext import Extension
from markupsafe import Markup

from planq.cli.api.access import role_of_url
from planq.cli.api.models import SEVERITY_ORDER, pill_for
from planq.cli.output import cut

TEMPLATES = Path(__file__).with_name("templates")
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

#: Fields that are times: a detail page shows them in UTC with a relative time.
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


class OneLine(Extension):
    """Drop each newline and the indentation after it from a template's source."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        """The source as one line (Jinja calls this before parsing)."""
        return re.sub(r"\n[ \t]*", "", source)


def utc(value: datetime) -> datetime:
    """The time in UTC (a naive value is taken as UTC, as the ledger stores it)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


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


@dataclass(frozen=True)
class Moment:
    """A timestamp as the `when` macro shows it: ISO, to the second, and how long ago."""

    iso: str
    text: str
    ago: str


def moment(value: Any, now: datetime | None = None) -> Moment | None:
    """The moment value (a datetime or ISO text) names, in UTC; None for nothing."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    at = utc(value)
    return Moment(at.isoformat(), at.strftime("%Y-%m-%d %H:%M:%S"), ago(at, now))


@dataclass(frozen=True)
class Gauge:
    """A progress bar's numbers: the raw fraction, its clamped width and its label."""

    fraction: str
    width: str
    label: str


def gauge(fraction: float) -> Gauge:
    """The bar of fraction: width clamped to 0-100%, the raw value kept for data-fraction."""
    width = min(max(fraction, 0.0), 1.0) * 100
    return Gauge(f"{fraction:.6g}", f"{width:.1f}", f"{min(fraction, 9.99) * 100:.0f}%")


def severities(counts: dict[str, int], failed: bool = False) -> list[tuple[str, str]]:
    """(pill kind, label) per severity present, worst first; else one clean/failed pill."""
    found: list[tuple[str, str]] = [
        (s, f"{counts[s]} {s}") for s in SEVERITY_ORDER if counts.get(s, 0) > 0
    ]
    if found:
        return found
    kind = str(pill_for(counts, failed))
    return [(kind, kind)]


def progress_title(progress: float | None) -> str:
    """A job's bar's title: its raw progress value."""
    return f"progress {progress!r}" if progress is not None else "no progress"


def clip(text: str, keep: int) -> str:
    """text, or its first keep-1 characters and an ellipsis."""
    return text if len(text) <= keep else text[: keep - 1] + "…"


ENV = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=True,
    undefined=StrictUndefined,  # a misspelt name fails the render instead of printing ""
    extensions=[OneLine, "jinja2.ext.do"],
)
ENV.filters["quote"] = quote  # an id in a path, as urllib quotes it
ENV.tests["data"] = lambda value: isinstance(value, dict | list)  # shown as <code>
ENV.globals.update(
    moment=moment,
    gauge=gauge,
    severities=severities,
    clip=clip,
    progress_title=progress_title,
    cut=cut,
    role_of_url=role_of_url,
    status_class=STATUS_CLASS,
    pill_colours=PILL_COLOURS,
    time_fields=TIME_FIELDS,
)


def render(name: str, **context: Any) -> Markup:
    """Template name rendered with context: markup another template may compose."""
    return Markup(ENV.get_template(name).render(**context))


def macro(name: str, *args: Any, **kwargs: Any) -> Markup:
    """One macro of macros.html called from Python (a cell of a section rendered elsewhere)."""
    return Markup(getattr(ENV.get_template("macros.html").module, name)(*args, **kwargs))
