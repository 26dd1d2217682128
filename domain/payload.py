"""The versioned JSON payload each job carries: ids and small data, never objects."""

from __future__ import annotations

import json
from typing import Any

from planq.domain.bounds import (
    ID_LENGTH,
    MAX_JSON_DEPTH,
    MAX_PAYLOAD_BYTES,
    MAX_SCHEMA_VERSION,
    MIN_SCHEMA_VERSION,
    check_int,
    check_json_value,
    check_size,
    check_text,
    describe,
    json_depth_exceeds,
)
from planq.domain.errors import BoundsError, WrongTypeError

PAYLOAD_KEYS = ("schema_version", "plan_id", "phase")
_PHASE_LENGTH = 16


def check_schema_version(value: object, field: str = "payload schema_version") -> int:
    """A schema version this planq can read: an int from 1 to MAX_SCHEMA_VERSION."""
    return check_int(field, value, MIN_SCHEMA_VERSION, MAX_SCHEMA_VERSION)


def serialize_job_payload(
    plan_id: str,
    phase: str,
    schema_version: int = 1,
    extra: dict[str, Any] | None = None,
) -> str:
    """Encode a job's input so queued messages survive adding fields later."""
    check_text("payload plan_id", plan_id, ID_LENGTH)
    check_text("payload phase", phase, _PHASE_LENGTH)
    check_schema_version(schema_version)
    if extra is not None and not isinstance(extra, dict):
        raise WrongTypeError("payload extra", "must be a dict", describe(extra))
    data: dict[str, Any] = dict(extra or {})
    data.update(schema_version=schema_version, plan_id=plan_id, phase=phase)
    check_json_value("payload", data, MAX_PAYLOAD_BYTES)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def deserialize_job_payload(text: str) -> dict[str, Any]:
    """Decode a payload: a JSON object with a schema_version this planq can read.

    Refused (BoundsError, naming the field): not a JSON object, over MAX_PAYLOAD_BYTES or
    MAX_JSON_DEPTH, or a schema_version that is missing, not an int, below 1 or too new.
    """
    if not isinstance(text, str) or not text.strip():
        raise BoundsError("payload", "text is empty; expected a JSON object")
    check_size("payload", text, MAX_PAYLOAD_BYTES)
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise BoundsError("payload", f"must nest at most {MAX_JSON_DEPTH} levels deep") from None
    except ValueError as exc:
        raise BoundsError("payload", f"is not valid JSON (expected a JSON object): {exc}") from None
    if not isinstance(data, dict):
        raise BoundsError("payload", f"must be a JSON object, got {type(data).__name__}")
    if json_depth_exceeds(data, MAX_JSON_DEPTH):
        raise BoundsError("payload", f"must nest at most {MAX_JSON_DEPTH} levels deep")
    if "schema_version" not in data:
        raise BoundsError("payload schema_version", "is missing from the JSON object")
    check_schema_version(data["schema_version"])
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")
