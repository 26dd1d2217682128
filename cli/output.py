"""What the CLI prints and how it exits: rich tables for people, one JSON document for scripts.

Exit codes (stable, for scripts):

* 0  done
* 1  refused: the ledger said no (cancel a finished job, retry a succeeded one, a phase out of
  order), a wait timed out, or the job a wait followed failed
* 2  bad input: invalid or unknown id, invalid option value, invalid setting
* 3  unavailable: the ledger database or the broker cannot be reached
* 4  cancelled: the job a wait followed was cancelled
* 130  interrupted (Ctrl-C) while waiting; the job keeps running

A user error is ONE line on stderr, never a traceback; a bug still shows its traceback.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, tzinfo
from typing import Any, ParamSpec, TypeVar

import typer
from typer._click.exceptions import ClickException, NoArgsIsHelpError
from typer.core import TyperGroup

from planq.domain.redaction import BUILTIN, Redactor

OK = 0
REFUSED = 1
BAD_INPUT = 2
UNAVAILABLE = 3
CANCELLED = 4
INTERRUPTED = 130  #: the shell's own code for a SIGINT

#: A whole ISO-8601 timestamp with its offset, as the domain's as_cli_dict writes them.
_ISO_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2}|Z)")
PLAIN_WIDTH = 160  #: table width when stdout is not a terminal (pipes, CI, tests)

P = ParamSpec("P")
R = TypeVar("R")


class CliError(Exception):
    """A user-facing failure: one line on stderr and an exit code."""

    code = BAD_INPUT
    label = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadInput(CliError):
    """The arguments or settings are wrong (exit 2)."""


class NotFound(BadInput):
    """An id or name that names nothing (exit 2 in the CLI, 404 over HTTP)."""


class Refused(CliError):
    """The ledger refused the operation (exit 1)."""

    code = REFUSED
    label = "refused"


class Denied(CliError):
    """The caller may not do this (exit 1, HTTP 403): a missing role, or four-eyes."""

    code = REFUSED
    label = "forbidden"


class TimedOut(CliError):
    """A wait ended before what it waited for (exit 1)."""

    code = REFUSED
    label = "timeout"


class JobFailed(CliError):
    """The job a wait followed ended failed (exit 1), with its redacted error."""

    code = REFUSED
    label = "failed"


class JobCancelled(CliError):
    """The job a wait followed was cancelled (exit 4: a script tells it from a failure)."""

    code = CANCELLED
    label = "cancelled"


class Interrupted(CliError):
    """Ctrl-C during a wait (exit 130): the wait stops, the job does not."""

    code = INTERRUPTED
    label = "interrupted"


class Unavailable(CliError):
    """A service the command needs cannot be reached (exit 3)."""

    code = UNAVAILABLE
    label = "unavailable"


#: The longest message an error echoes: the input it quotes is cut, never sent back whole.
MAX_MESSAGE = 200


def cut(text: str, limit: int = MAX_MESSAGE) -> str:
    """text, or its head and tail around an ellipsis when longer than limit characters.

    The middle goes: an echoed input usually sits there, between what was wrong and the hint.
    """
    if len(text) <= limit:
        return text
    tail = limit // 4
    return f"{text[: limit - tail - 1]}…{text[len(text) - tail :]}"


def one_line(exc: BaseException) -> str:
    """A single line describing exc, redacted by this process's redactor (the one describer)."""
    from planq.domain.redaction import describe_exception

    return describe_exception(exc, process_redactor(), brief=True)


def process_redactor() -> Redactor:
    """The redactor of this process's settings (PLANQ_REDACTION_PATTERNS), as a session's.

    An error can come before any session exists (a bad option, a ledger that does not
    answer): it is redacted with the operator's own patterns all the same. Settings that do
    not load leave the built-in patterns (and the settings' own error explains why).
    """
    from planq.worker_config.settings import load_settings

    try:
        return load_settings().redactor()
    except Exception:
        return BUILTIN


def redacted(text: str) -> str:
    """Text through this process's redactor: the last door before stderr."""
    return process_redactor()(text)


def classify(exc: Exception) -> CliError | None:
    """The CliError a known exception stands for; None for a bug (let it show)."""
    from planq.domain.errors import (
        AlreadyApprovedError,
        CancelTooLateError,
        ConcurrentUpdateError,
        ForbiddenError,
        InvalidJobTransitionError,
        InvalidPlanTransitionError,
        JobNotFoundError,
        LedgerUnavailableError,
        NoRunningRunError,
        NotAwaitingApprovalError,
        NothingToCancelError,
        PlanGoneError,
        PlanNotFoundError,
        PlanqError,
        RunNotFoundError,
        UnknownRecoverableJobError,
    )

    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, PlanGoneError):  # a PlanNotFoundError, but the job exists: refused
        return Refused(one_line(exc))
    if isinstance(
        exc, JobNotFoundError | PlanNotFoundError | RunNotFoundError | UnknownRecoverableJobError
    ):
        return NotFound(one_line(exc))
    if isinstance(exc, ForbiddenError):
        return Denied(one_line(exc))
    if isinstance(
        exc,
        InvalidPlanTransitionError
        | InvalidJobTransitionError
        | NotAwaitingApprovalError
        | AlreadyApprovedError
        | NothingToCancelError
        | CancelTooLateError
        | NoRunningRunError,
    ):
        return Refused(one_line(exc))
    if isinstance(exc, ConcurrentUpdateError):
        return Refused(f"{one_line(exc)} (try again)")
    if isinstance(exc, LedgerUnavailableError):
        return Unavailable(f"ledger: {one_line(exc)}")
    if isinstance(exc, PlanqError | ValueError) or _domain_type_error(exc):
        return BadInput(one_line(exc))  # a bound, an id, a value the domain refused
    return _service_error(exc)


#: Where planq's own deliberate TypeErrors are defined.
OWN_MODULES = ("planq.domain.", "planq.store.", "planq.cli.")


def _domain_type_error(exc: Exception) -> bool:
    """A TypeError planq's own layers raise on purpose (a wrong type at a boundary)."""
    module = type(exc).__module__
    return isinstance(exc, TypeError) and module.startswith(OWN_MODULES)


def _service_error(exc: Exception) -> CliError | None:
    """Ledger (SQLAlchemy) and broker (kombu) failures."""
    from kombu.exceptions import OperationalError as BrokerError
    from sqlalchemy.exc import DataError, DBAPIError, OperationalError

    if isinstance(exc, DataError):  # the database refused a value: the input, not an outage
        return BadInput(f"the ledger refused a value: {one_line(exc)}")
    if isinstance(exc, OperationalError):
        return Unavailable(f"ledger: {one_line(exc)}")
    if isinstance(exc, DBAPIError):
        return Unavailable(f"ledger: {one_line(exc)} (is it migrated? `planq db upgrade`)")
    if isinstance(exc, BrokerError | ConnectionError):
        return Unavailable(f"broker: {one_line(exc)}")
    return None


def fail(error: CliError) -> typer.Exit:
    """Print the error's one line on stderr, redacted; return the Exit to raise."""
    message = redacted(" ".join(error.message.split()))  # one line, whatever it holds
    typer.echo(f"planq: {error.label}: {message}", err=True)
    return typer.Exit(error.code)


def boundary(fn: Callable[P, R]) -> Callable[P, R]:
    """Run a command; turn user errors into one stderr line and their exit code."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            error = classify(exc)
            if error is None:
                raise
            raise fail(error) from None

    return wrapper


@contextmanager
def _usage_errors_in_one_line() -> Iterator[None]:
    """Click's usage errors (a bad option value, a missing argument) as one stderr line."""
    try:
        yield
    except NoArgsIsHelpError:
        raise  # the help text itself
    except ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        message = redacted(" ".join(exc.format_message().split()))  # it quotes the input
        typer.echo(f"planq: error: {message}{hint}", err=True)
        raise typer.Exit(exc.exit_code) from None


class OneLineErrors(TyperGroup):
    """The root group: every usage error is one line and exit 2, like the commands' own."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: Any = None,
        **extra: Any,
    ) -> Any:
        with _usage_errors_in_one_line():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with _usage_errors_in_one_line():
            return super().invoke(ctx)


def warn(message: str) -> None:
    """A one-line warning on stderr (the command still succeeds)."""
    typer.echo(f"planq: warning: {message}", err=True)


# -- JSON ---------------------------------------------------------------------------------
def _default(value: object) -> object:
    if isinstance(value, datetime):  # JSON is UTC, whatever TZ says
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return aware.astimezone(UTC).isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def emit_json(document: object) -> None:
    """Write one JSON document on stdout (and nothing else)."""
    typer.echo(json.dumps(document, indent=2, default=_default))


# -- people -------------------------------------------------------------------------------
def console() -> Any:
    """A rich Console on the current stdout; wide enough for ULIDs when not a terminal."""
    from rich.console import Console

    out = Console(file=sys.stdout, highlight=False)
    if not out.is_terminal:
        out = Console(file=sys.stdout, highlight=False, width=PLAIN_WIDTH)
    return out


def display_zone() -> tzinfo | None:
    """The zone people read times in: TZ (e.g. Asia/Tokyo) if it names one, else the system's."""
    from zoneinfo import ZoneInfo

    name = os.environ.get("TZ", "").lstrip(":")
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError):  # unknown or malformed: ZoneInfoNotFoundError
        return None  # astimezone(None): the C library's reading of TZ (e.g. 'JST-9')


def local_time(moment: datetime) -> str:
    """A stored (UTC) moment in the reader's zone, to the second: '2026-01-02 18:04:05 JST'."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return aware.astimezone(display_zone()).strftime("%Y-%m-%d %H:%M:%S %Z")


def cell(value: object) -> str:
    """A table cell: '-' for nothing, times in the reader's zone, plain text otherwise."""
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, datetime):
        return local_time(value)
    if isinstance(value, str) and _ISO_TIMESTAMP.fullmatch(value):
        return local_time(datetime.fromisoformat(value))
    return str(value)


def percent(fraction: float | None) -> str:
    """0.42 -> '42%'."""
    return "-" if fraction is None else f"{fraction * 100:.0f}%"


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    empty: str = "nothing to show",
    footer: str | None = None,
) -> None:
    """A rich table of rows (each cell through cell()); a plain line when there are none.

    footer (e.g. 'showing 50 of 1234') is printed under the table, or after the empty line.
    """
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    materialised = [list(row) for row in rows]
    out = console()
    if not materialised:
        tail = f" ({escape(footer)})" if footer else ""
        out.print(f"{escape(title)}: {escape(empty)}{tail}")
        return
    table = Table()
    for name in columns:
        table.add_column(name, overflow="fold")
    for row in materialised:
        table.add_row(*(Text(cell(value)) for value in row))  # data is never markup
    out.print(f"[bold]{escape(title)}[/]")
    out.print(table)
    if footer:
        out.print(escape(footer))


def print_fields(title: str, fields: dict[str, object]) -> None:
    """A two-column key/value table for one object."""
    print_table(title, ("field", "value"), fields.items())


def status_style(status: str) -> str:
    """Rich markup colour for a job or run status."""
    return {
        "succeeded": "green",
        "Completed": "green",
        "failed": "red",
        "Failed": "red",
        "cancelled": "yellow",
        "CancelRequested": "yellow",
        "Paused": "yellow",
        "running": "cyan",
        "Running": "cyan",
    }.get(status, "white")
