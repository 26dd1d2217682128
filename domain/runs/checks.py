"""Argument checks and cut-offs shared by every run store, so backends cannot drift apart."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from planq.domain.bounds import (
    ID_LENGTH,
    INT64_MAX,
    MAX_BATCH,
    MAX_CURSOR_BYTES,
    MAX_DURATION_SECONDS,
    MAX_LIST_LIMIT,
    MAX_OFFSET,
    MAX_OWNER_LENGTH,
    MAX_PARAM_KEY_LENGTH,
    MAX_PARAM_VALUE_BYTES,
    MAX_PARAMS_BYTES,
    MAX_RETENTION_DAYS,
    check_int,
    check_number,
    check_optional_text,
    check_size,
    check_text,
    describe,
)
from planq.domain.errors import BoundsError, WrongTypeError
from planq.domain.ids import ulid_of_uuid
from planq.domain.jobs import redact_error
from planq.domain.redaction import Redactor
from planq.domain.runs.progress import ProgressKind

#: Error of a run paused by a sweep scoped to a worker (its owner) or to silence (stale_after).
SWEEP_ERROR = "worker restart mid-run"
#: Error of a run paused by the spec's sweep of every active run (no owner, no stale_after).
SERVER_RESTART_ERROR = "server restart mid-run"
MIN_RETENTION_DAYS = 1.0
#: A UUID's canonical text (`str(uuid.UUID(...))`, either case): the spec's run ids.
_UUID_TEXT = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")

__all__ = [
    "MAX_OWNER_LENGTH",
    "MAX_PARAM_KEY_LENGTH",
    "MIN_RETENTION_DAYS",
    "SERVER_RESTART_ERROR",
    "SWEEP_ERROR",
    "check_args",
    "check_cursor",
    "check_delta",
    "check_epoch",
    "check_leases",
    "check_limit",
    "check_owner",
    "check_param",
    "check_params_size",
    "check_progress_kind",
    "check_run_id",
    "check_scanned_total",
    "check_total",
    "clean_error",
    "params_from_json",
    "params_to_json",
    "purge_cutoff",
    "stale_cutoff",
]


def check_owner(owner: object) -> str | None:
    """An owner (worker node name) is optional, but never an empty string."""
    return check_optional_text("owner", owner, MAX_OWNER_LENGTH)


def check_run_id(run_id: object) -> str:
    """A run id argument, as the stores look it up: a ULID string, or the spec's Uuid.

    A string is a non-empty one that fits the String(26) id column, no NUL. A `uuid.UUID`,
    or its canonical text, is the same 128 bits as a ULID and becomes that ULID's string:
    the run whose ULID has those bytes is found, an unknown UUID finds nothing.
    """
    if isinstance(run_id, UUID):
        return ulid_of_uuid(run_id)
    if isinstance(run_id, str) and _UUID_TEXT.fullmatch(run_id):
        return ulid_of_uuid(UUID(run_id))
    return check_text("run_id", run_id, ID_LENGTH)


def check_epoch(epoch: object) -> int:
    """A lease epoch: an int that fits the BigInteger column."""
    return check_int("lease_epoch", epoch, 0, INT64_MAX)


def check_cursor(cursor: object) -> bytes:
    """Cursors are opaque bytes of at most MAX_CURSOR_BYTES (a handler bug caught first)."""
    if not isinstance(cursor, bytes):
        raise WrongTypeError("cursor", "must be bytes", describe(cursor))
    if len(cursor) > MAX_CURSOR_BYTES:
        raise BoundsError("cursor", f"must be at most {MAX_CURSOR_BYTES} bytes", describe(cursor))
    return cursor


def check_delta(delta_count: object) -> int:
    """A checkpoint adds a non-negative number of scanned rows that fits the int64 count."""
    return check_int("delta_count", delta_count, 0, INT64_MAX)


def check_total(total: object) -> int | None:
    """A progress total is unknown (None) or a non-negative int64."""
    return None if total is None else check_int("total", total, 0, INT64_MAX)


def check_param(key: object, value: object = "") -> tuple[str, str]:
    """Run params are string to string: a bounded non-empty key, a value of at most 64 KiB."""
    check_text("param key", key, MAX_PARAM_KEY_LENGTH)
    if not isinstance(value, str):
        raise WrongTypeError("param value", "must be a str", describe(value))
    check_text("param value", value, MAX_PARAM_VALUE_BYTES, allow_empty=True)
    check_size("param value", value, MAX_PARAM_VALUE_BYTES)
    assert isinstance(key, str)
    return key, value


def check_params_size(params_json: str) -> str:
    """All of a run's params, as stored, within MAX_PARAMS_BYTES."""
    return check_size("params", params_json, MAX_PARAMS_BYTES)


def check_limit(limit: object, offset: object = 0) -> tuple[int, int]:
    """Page sizes are from 1 to MAX_LIST_LIMIT and offsets from 0 to int64."""
    return check_int("limit", limit, 1, MAX_LIST_LIMIT), check_int("offset", offset, 0, MAX_OFFSET)


def clean_error(message: object, redactor: Redactor) -> str:
    """Redact and bound an error before it is stored on a run."""
    return redact_error(str(message), redactor) or ""


def stale_cutoff(now: datetime, stale_after: float) -> datetime:
    """Runs whose last progress is before this are presumed orphaned by a dead worker.

    stale_after is a finite number of seconds from 0 to MAX_DURATION_SECONDS (100 years).
    """
    seconds = check_number("stale_after", stale_after, 0.0, MAX_DURATION_SECONDS)
    return now - timedelta(seconds=seconds)


def purge_cutoff(now: datetime, retention_days: float) -> datetime:
    """Terminal runs completed before this may go; never less than one day of history.

    retention_days is finite and at most MAX_RETENTION_DAYS (below 1 counts as 1).
    """
    days = check_number("retention_days", retention_days, -MAX_RETENTION_DAYS, MAX_RETENTION_DAYS)
    return now - timedelta(days=max(MIN_RETENTION_DAYS, days))


def params_to_json(params: dict[str, str]) -> str:
    """Run params as stored: sorted JSON, so equal params are equal text."""
    return json.dumps(params, sort_keys=True)


def params_from_json(text: str | None) -> dict[str, str]:
    """Stored params back as a dict (empty for a missing or non-object value)."""
    value = json.loads(text) if text else {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def check_progress_kind(kind: object) -> str:
    """A progress kind: count or approximate (its stored spelling)."""
    try:
        return ProgressKind(kind).value
    except ValueError:
        raise BoundsError("progress kind", "must be count or approximate", describe(kind)) from None


def check_leases(leases: object) -> dict[str, int]:
    """A heartbeat's leases: a mapping of at most MAX_BATCH run ids to int64 epochs."""
    if not isinstance(leases, Mapping):
        raise WrongTypeError(
            "leases", "must be a mapping of run id to lease epoch", describe(leases)
        )
    if len(leases) > MAX_BATCH:
        raise BoundsError("leases", f"must hold at most {MAX_BATCH} runs", str(len(leases)))
    return {check_run_id(run_id): check_epoch(epoch) for run_id, epoch in leases.items()}


def check_scanned_total(current: int, delta_count: int) -> None:
    """scanned_count + delta_count must still fit the int64 column."""
    if current + delta_count > INT64_MAX:
        raise BoundsError(
            "delta_count",
            f"would take scanned_count past {INT64_MAX}",
            f"{delta_count} on top of {current}",
        )


def check_args(args: object) -> dict[str, Any]:
    """A trigger's args: None or a mapping with string keys (copied)."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise WrongTypeError("args", "must be a mapping", describe(args))
    for key in args:
        if not isinstance(key, str):
            raise WrongTypeError("args", "keys must be strings", describe(key))
    return dict(args)
