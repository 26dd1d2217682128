"""Findings: what a scan discovered, kept per run with a severity an operator can filter on."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

MAX_KIND_LENGTH = 100
MAX_RESOURCE_ID_LENGTH = 500


class Severity(StrEnum):
    """How bad a finding is, worst first."""

    data_loss = "data_loss"
    inconsistent = "inconsistent"
    anomaly = "anomaly"


@dataclass(frozen=True, slots=True)
class Finding:
    """One finding of one run."""

    id: str
    run_id: str
    kind: str
    severity: Severity
    resource_id: str | None  #: a UUID recorded as such is kept as its canonical text
    detail: dict[str, Any]
    created_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view for the CLI."""
        return {
            "id": self.id,
            "run_id": self.run_id,
            "kind": self.kind,
            "severity": self.severity.value,
            "resource_id": self.resource_id,
            "detail": self.detail,
            "created_at": self.created_at.isoformat(),
        }


def present_severity_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """Only the severities a run has findings of (as the spec's GROUP BY), worst first."""
    order = {s.value: i for i, s in enumerate(Severity)}
    present = {str(k): int(v) for k, v in counts.items() if v}
    return dict(sorted(present.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def check_severity(severity: Severity | str) -> Severity:
    """The Severity named; ValueError for anything else, so a typo never reaches the store."""
    try:
        return Severity(severity)
    except ValueError:
        allowed = ", ".join(s.value for s in Severity)
        raise ValueError(f"severity must be one of {allowed}, got {severity!r}") from None


def check_kind(kind: object) -> str:
    """A finding kind must be a short non-empty string."""
    if not isinstance(kind, str) or not kind.strip() or len(kind) > MAX_KIND_LENGTH:
        raise ValueError(f"kind must be a non-empty string of at most {MAX_KIND_LENGTH} chars")
    return kind


def check_resource_id(resource_id: object) -> str | None:
    """A resource id is optional; a UUID is kept as its canonical text, a string as given.

    Strings are allowed because planq's own resources (jobs, plans) have ULIDs, not UUIDs.
    """
    if resource_id is None:
        return None
    if isinstance(resource_id, UUID):
        return str(resource_id)
    if not isinstance(resource_id, str) or len(resource_id) > MAX_RESOURCE_ID_LENGTH:
        raise ValueError(
            f"resource_id must be a UUID or a string of at most {MAX_RESOURCE_ID_LENGTH} chars, "
            f"got {type(resource_id).__name__}"
        )
    return resource_id


def detail_to_json(detail: object) -> str:
    """Serialise a detail dict; a non-dict or non-JSON value fails here, before any write."""
    if detail is None:
        return "{}"
    if not isinstance(detail, dict):
        raise TypeError(f"detail must be a dict, got {type(detail).__name__}")
    try:
        return json.dumps(detail, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"detail must be JSON-serialisable: {exc}") from exc


def detail_from_json(text: str) -> dict[str, Any]:
    """The stored detail as a dict (what every backend hands back)."""
    value = json.loads(text)
    return value if isinstance(value, dict) else {}
