"""Hard limits at every library boundary, and the checks that enforce them.

One module so the code and the table in docs/reliability.md ("Bounds") share the numbers.
Lengths match the SQL column sizes (store/models.py), integers the column ranges (int32
for Integer, int64 for BigInteger). Every check raises BoundsError (a ValueError) or
WrongTypeError (also a TypeError) naming the field and the limit, before anything is
written. The messages never echo a long value back: only its type and size.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from planq.domain.errors import BoundsError, WrongTypeError

KIB = 1024
MIB = 1024 * KIB

INT32_MAX = 2**31 - 1  #: Integer columns (attempt, schema_version, dispatch_count, version)
INT64_MAX = 2**63 - 1  #: BigInteger columns (scanned_count, progress_total, lease_epoch)

ID_LENGTH = 26  #: job, plan, run and finding ids are ULIDs in String(26) columns
MAX_PLAN_NAME_LENGTH = 200  #: plans.name String(200)
MAX_WORKER_ID_LENGTH = 255  #: async_jobs.worker_id String(255)
MAX_ERROR_LENGTH = 4000  #: stored error messages are cut to this (redact_error)
#: A failed job's stored traceback (async_jobs.error_traceback), after redaction: the head
#: and the last frames are kept, the middle cut with a line saying so (domain/tracebacks.py).
MAX_TRACEBACK_LENGTH = 16 * KIB
MAX_JOB_NAME_LENGTH = 200  #: recoverable_runs.job_name String(200)
MAX_OWNER_LENGTH = 255  #: recoverable_runs.owner String(255)
MAX_KIND_LENGTH = 100  #: run_findings.kind String(100)
MAX_RESOURCE_ID_LENGTH = 500  #: run_findings.resource_id String(500)
MAX_PARAM_KEY_LENGTH = 200
MAX_PARAM_VALUE_BYTES = 64 * KIB
MAX_PARAMS_BYTES = 1 * MIB  #: all of a run's params, as stored JSON
MAX_CURSOR_BYTES = 64 * KIB
MAX_DETAIL_BYTES = 64 * KIB  #: a finding's detail, as stored JSON
MAX_CHECKPOINT_BYTES = 1 * MIB  #: a job's checkpoint JSON
MAX_PAYLOAD_BYTES = 64 * KIB  #: a job's payload JSON
MAX_SPEC_BYTES = 1 * MIB  #: a plan's spec JSON
MAX_JSON_DEPTH = 64  #: nesting of any JSON planq stores ({} is depth 1)
MAX_STEPS = 10_000
MAX_STEP_NAME_LENGTH = 200
MAX_STEP_SECONDS = 86_400.0  #: a step of the built-in walk_steps lasts at most a day
MIN_SCHEMA_VERSION = 1
MAX_SCHEMA_VERSION = 10_000  #: a payload claiming a newer version is refused on read (too new)
#: Kept history (`runs purge --older-than-days`, purge_terminal_runs): a hundred years of
#: days, a window subtracted once from now, well inside what datetime can subtract.
MAX_RETENTION_DAYS = 36_500.0
#: The one bound on a duration in seconds: every setting (domain/config.py), stale_after,
#: job_timeout, job_ttl, sweep intervals and graces. Ten years: added to and subtracted from
#: datetimes and waited on by threads, far inside what datetime, timedelta and
#: `threading.TIMEOUT_MAX` hold, and far above any useful value.
MAX_DURATION_SECONDS = 10 * 365 * 86_400.0
MAX_LIST_LIMIT = 1_000_000  #: one page of a listing
MAX_OFFSET = INT64_MAX
MAX_BATCH = 100_000  #: ids in one call (heartbeat, mark_dispatched, queue)

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def describe(value: object) -> str:
    """A short description of value for an error message (never the whole of a long value)."""
    if isinstance(value, str | bytes):
        unit = "chars" if isinstance(value, str) else "bytes"
        if len(value) <= 40:
            return repr(value)
        return f"a {type(value).__name__} of {len(value)} {unit}"
    if isinstance(value, bool | int | float) or value is None:
        text = repr(value)
        return text if len(text) <= 40 else f"an int of {len(str(value))} digits"
    return f"a {type(value).__name__}"


def check_text(field: str, value: object, max_length: int, *, allow_empty: bool = False) -> str:
    """A str of at most max_length chars, without NUL or lone surrogates."""
    if not isinstance(value, str):
        raise WrongTypeError(field, "must be a string", describe(value))
    if not allow_empty and not value.strip():
        raise BoundsError(field, "must be a non-empty string", describe(value))
    if len(value) > max_length:
        raise BoundsError(field, f"must be at most {max_length} characters", describe(value))
    if _UNSTORABLE.search(value):
        raise BoundsError(field, "must not contain NUL bytes or lone surrogates", describe(value))
    return value


def check_optional_text(
    field: str, value: object, max_length: int, *, allow_empty: bool = False
) -> str | None:
    """None, or check_text."""
    return None if value is None else check_text(field, value, max_length, allow_empty=allow_empty)


def check_size(field: str, text: str, max_bytes: int) -> str:
    """The UTF-8 encoding of text is at most max_bytes."""
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise BoundsError(field, f"must be at most {max_bytes} bytes", describe(text))
    return text


def check_int(field: str, value: object, low: int, high: int) -> int:
    """An int (not a bool) with low <= value <= high."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise WrongTypeError(field, "must be an integer", describe(value))
    if not low <= value <= high:
        raise BoundsError(field, f"must be between {low} and {high}", describe(value))
    return value


def check_number(field: str, value: object, low: float, high: float) -> float:
    """A finite int or float (not a bool) with low <= value <= high."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WrongTypeError(field, "must be a number", describe(value))
    try:
        number = float(value)
    except OverflowError:
        raise BoundsError(field, f"must be between {low:g} and {high:g}", describe(value)) from None
    if not math.isfinite(number):
        raise BoundsError(field, "must be a finite number", describe(value))
    if not low <= number <= high:
        raise BoundsError(field, f"must be between {low:g} and {high:g}", describe(value))
    return number


def check_job_name(job_name: object) -> str:
    """A recoverable job's name: a short non-empty string (it keys the one-active-run rule)."""
    return check_text("job_name", job_name, MAX_JOB_NAME_LENGTH)


def json_depth_exceeds(value: object, max_depth: int) -> bool:
    """Whether lists/dicts nest deeper than max_depth (iterative: no RecursionError, no cycles)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            depth += 1
            if depth > max_depth:
                return True
            children: Iterable[object] = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth) for child in children)
    return False


def _depth_error(field: str, max_depth: int) -> BoundsError:
    return BoundsError(field, f"must nest at most {max_depth} levels deep")


def check_json_value(
    field: str, value: object, max_bytes: int, max_depth: int = MAX_JSON_DEPTH
) -> str:
    """The value as compact, sorted, strict JSON text within max_bytes and max_depth."""
    if json_depth_exceeds(value, max_depth):
        raise _depth_error(field, max_depth)
    try:
        text = json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise WrongTypeError(field, f"must be JSON-serialisable ({exc})") from None
    return check_size(field, text, max_bytes)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def check_json_text(
    field: str, text: object, max_bytes: int, max_depth: int = MAX_JSON_DEPTH
) -> Any:
    """Parse text as strict JSON (no NaN/Infinity) within max_bytes and max_depth."""
    if not isinstance(text, str):
        raise WrongTypeError(field, "must be a JSON string", describe(text))
    check_size(field, text, max_bytes)
    if _UNSTORABLE.search(text):
        raise BoundsError(field, "must not contain NUL bytes or lone surrogates", describe(text))
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise _depth_error(field, max_depth) from None
    except ValueError as exc:
        raise BoundsError(field, f"must be valid JSON ({exc})") from None
    if json_depth_exceeds(value, max_depth):
        raise _depth_error(field, max_depth)
    return value
