"""Argument checks and cut-offs shared by every run store, so backends cannot drift apart."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from domain.jobs import redact_error

MAX_JOB_NAME_LENGTH = 200
MAX_OWNER_LENGTH = 255
MAX_PARAM_KEY_LENGTH = 200
#: Error of a run paused by a sweep scoped to a worker (its owner) or to silence (stale_after).
SWEEP_ERROR = "worker restart mid-run"
#: Error of a run paused by the spec's sweep of every active run (no owner, no stale_after).
SERVER_RESTART_ERROR = "server restart mid-run"
MIN_RETENTION_DAYS = 1.0


def check_job_name(job_name: object) -> str:
    """A job name is a short non-empty string (it keys the one-active-run rule)."""
    if not isinstance(job_name, str) or not job_name.strip() or len(job_name) > MAX_JOB_NAME_LENGTH:
        raise ValueError(f"job_name must be a non-empty string of at most {MAX_JOB_NAME_LENGTH}")
    return job_name


def check_owner(owner: object) -> str | None:
    """An owner (worker node name) is optional, but never an empty string."""
    if owner is None:
        return None
    if not isinstance(owner, str) or not owner.strip() or len(owner) > MAX_OWNER_LENGTH:
        raise ValueError(f"owner must be a non-empty string of at most {MAX_OWNER_LENGTH}")
    return owner


def check_cursor(cursor: object) -> bytes:
    """Cursors are opaque bytes; anything else is a handler bug caught before the write."""
    if not isinstance(cursor, bytes):
        raise TypeError(f"cursor must be bytes, got {type(cursor).__name__}")
    return cursor


def check_delta(delta_count: object) -> int:
    """A checkpoint adds a non-negative number of scanned rows."""
    if isinstance(delta_count, bool) or not isinstance(delta_count, int) or delta_count < 0:
        raise ValueError(f"delta_count must be an int >= 0, got {delta_count!r}")
    return delta_count


def check_total(total: object) -> int | None:
    """A progress total is unknown (None) or a non-negative int."""
    if total is None:
        return None
    if isinstance(total, bool) or not isinstance(total, int) or total < 0:
        raise ValueError(f"total must be None or an int >= 0, got {total!r}")
    return total


def check_param(key: object, value: object = "") -> tuple[str, str]:
    """Run params are string to string, with a bounded non-empty key."""
    if not isinstance(key, str) or not key or len(key) > MAX_PARAM_KEY_LENGTH:
        raise ValueError(f"param key must be a non-empty string of at most {MAX_PARAM_KEY_LENGTH}")
    if not isinstance(value, str):
        raise TypeError(f"param value must be a str, got {type(value).__name__}")
    return key, value


def check_limit(limit: object, offset: object = 0) -> tuple[int, int]:
    """Page sizes are positive and offsets non-negative."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be an int >= 0, got {offset!r}")
    return limit, offset


def clean_error(message: object) -> str:
    """Redact and bound an error before it is stored on a run."""
    return redact_error(str(message)) or ""


def stale_cutoff(now: datetime, stale_after: float) -> datetime:
    """Runs whose last progress is before this are presumed orphaned by a dead worker."""
    if isinstance(stale_after, bool) or not isinstance(stale_after, int | float):
        raise TypeError(f"stale_after must be a number of seconds, got {stale_after!r}")
    if stale_after < 0:
        raise ValueError(f"stale_after must be >= 0, got {stale_after!r}")
    return now - timedelta(seconds=stale_after)


def purge_cutoff(now: datetime, retention_days: float) -> datetime:
    """Terminal runs completed before this may go; never less than one day of history."""
    if isinstance(retention_days, bool) or not isinstance(retention_days, int | float):
        raise TypeError(f"retention_days must be a number, got {retention_days!r}")
    return now - timedelta(days=max(MIN_RETENTION_DAYS, float(retention_days)))


def params_to_json(params: dict[str, str]) -> str:
    """Run params as stored: sorted JSON, so equal params are equal text."""
    return json.dumps(params, sort_keys=True)


def params_from_json(text: str | None) -> dict[str, str]:
    """Stored params back as a dict (empty for a missing or non-object value)."""
    value = json.loads(text) if text else {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
