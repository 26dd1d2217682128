"""A recoverable run's status; only the engine and the sweep move a run between them."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is; Completed and Failed are terminal, the rest hold the job name's slot."""

    Running = "Running"
    Paused = "Paused"
    CancelRequested = "CancelRequested"  #: still non-terminal: a trigger now must not start a twin
    Completed = "Completed"
    Failed = "Failed"

    def as_str(self) -> str:
        """The stored spelling (what parse() reads back)."""
        return self.value

    @classmethod
    def parse(cls, text: str) -> RunStatus | None:
        """The status spelled text, or None for anything unknown (no exception on bad data)."""
        try:
            return cls(text)
        except ValueError:
            return None

    @property
    def is_non_terminal(self) -> bool:
        """Whether the run still holds its job name's one non-terminal slot."""
        return self in NON_TERMINAL_RUN_STATUSES

    @property
    def is_active(self) -> bool:
        """Whether a handler may be working on it now (Running or CancelRequested)."""
        return self in ACTIVE_RUN_STATUSES


NON_TERMINAL_RUN_STATUSES = frozenset(
    {RunStatus.Running, RunStatus.Paused, RunStatus.CancelRequested}
)
ACTIVE_RUN_STATUSES = frozenset({RunStatus.Running, RunStatus.CancelRequested})
TERMINAL_RUN_STATUSES = frozenset({RunStatus.Completed, RunStatus.Failed})
