"""Findings: what a scan discovered, kept per run with a severity an operator can filter on."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from planq.domain.bounds import (
    MAX_DETAIL_BYTES,
    MAX_KIND_LENGTH,
    MAX_RESOURCE_ID_LENGTH,
    check_json_value,
    check_text,
    describe,
)
from planq.domain.errors import BoundsError, WrongTypeError
from planq.domain.redaction import Redactor


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
    """The Severity named; BoundsError for anything else, so a typo never reaches the store."""
    try:
        return Severity(severity)
    except (ValueError, TypeError):
        allowed = ", ".join(s.value for s in Severity)
        raise BoundsError("severity", f"must be one of {allowed}", describe(severity)) from None


def check_kind(kind: object) -> str:
    """A finding kind must be a short non-empty string (it fits run_findings.kind)."""
    return check_text("kind", kind, MAX_KIND_LENGTH)


def check_resource_id(resource_id: object) -> str | None:
    """A resource id is optional; a UUID is kept as its canonical text, a string as given.

    Strings are allowed because planq's own resources (jobs, plans) have ULIDs, not UUIDs.
    """
    if resource_id is None:
        return None
    if isinstance(resource_id, UUID):
        return str(resource_id)
    if not isinstance(resource_id, str):
        raise WrongTypeError("resource_id", "must be a UUID or a string", describe(resource_id))
    return check_text("resource_id", resource_id, MAX_RESOURCE_ID_LENGTH, allow_empty=True)


def detail_to_json(detail: object, redactor: Redactor) -> str:
    """Serialise a detail dict within MAX_DETAIL_BYTES and 64 levels, redacted, before any write."""
    if detail is None:
        return "{}"
    if not isinstance(detail, dict):
        raise WrongTypeError("detail", "must be a dict", describe(detail))
    text = check_json_value("detail", detail, MAX_DETAIL_BYTES)
    if redactor(text) == text:
        return text
    return check_json_value("detail", redactor.json_value(detail), MAX_DETAIL_BYTES)


def detail_from_json(text: str) -> dict[str, Any]:
    """The stored detail as a dict (what every backend hands back)."""
    value = json.loads(text)
    return value if isinstance(value, dict) else {}
