"""Progress of a run, derived from its scanned count and the total counted at start."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ProgressKind(Enum):
    """Whether the total is an exact count or an estimate (which a run may overshoot).

    A plain Enum, not a StrEnum: a member named count would shadow str.count.
    """

    count = "count"
    approximate = "approximate"

    def as_str(self) -> str:
        """The stored spelling (what parse() reads back)."""
        return self.value

    @classmethod
    def parse(cls, text: str) -> ProgressKind | None:
        """The kind spelled text, or None for anything unknown."""
        try:
            return cls(text)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class RunProgress:
    """How far a run has got; fraction is scanned / total and may exceed 1.0 when approximate."""

    fraction: float
    kind: ProgressKind
    scanned: int
    total: int

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready view."""
        return {
            "fraction": self.fraction,
            "kind": self.kind.value,
            "scanned": self.scanned,
            "total": self.total,
        }


def derive_progress(
    scanned: int, total: int | None, kind: ProgressKind | None = None
) -> RunProgress | None:
    """Progress, or None when the total is unknown or zero; not clamped, so overshoot shows.

    An unknown kind (None, as for a run seeded before kinds were stored) is count.
    """
    if total is None or total <= 0:
        return None
    kind = ProgressKind.count if kind is None else ProgressKind(kind)
    return RunProgress(fraction=scanned / total, kind=kind, scanned=scanned, total=total)
