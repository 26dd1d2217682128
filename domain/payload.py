"""The versioned JSON payload each job carries: ids and small data, never objects."""

from __future__ import annotations

import json
from typing import Any

PAYLOAD_KEYS = ("schema_version", "plan_id", "phase")


def serialize_job_payload(
    plan_id: str,
    phase: str,
    schema_version: int = 1,
    extra: dict[str, Any] | None = None,
) -> str:
    """Encode a job's input so queued messages survive adding fields later."""
    if not isinstance(plan_id, str) or not plan_id.strip():
        raise ValueError("payload plan_id must be a non-empty string")
    if not isinstance(phase, str) or not phase.strip():
        raise ValueError("payload phase must be a non-empty string")
    if isinstance(schema_version, bool) or not isinstance(schema_version, int):
        raise ValueError("payload schema_version must be an integer")
    if schema_version < 1:
        raise ValueError(f"payload schema_version must be at least 1, got {schema_version}")
    data: dict[str, Any] = dict(extra or {})
    data.update(schema_version=schema_version, plan_id=plan_id, phase=phase)
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def deserialize_job_payload(text: str) -> dict[str, Any]:
    """Decode a payload, refusing anything that is not a JSON object."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("payload text is empty; expected a JSON object")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"payload is not valid JSON (expected a JSON object): {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"payload must be a JSON object, got {type(data).__name__}")
    return data
