"""What a handler's run_resumable returns; the engine turns it into the run's final state."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True, slots=True)
class Completed:
    """The scan reached its end."""


@dataclass(frozen=True, slots=True)
class Paused:
    """The scan stopped at a safe point (cancel, shutdown); a resume starts from cursor."""

    cursor: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.cursor, bytes):
            raise TypeError(f"cursor must be bytes, got {type(self.cursor).__name__}")


@dataclass(frozen=True, slots=True)
class Failed:
    """The scan cannot go on; message is stored (redacted) on the run."""

    message: str


RunOutcome: TypeAlias = Completed | Paused | Failed
