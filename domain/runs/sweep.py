"""What a boot recovery sweep returns: how many runs it paused, and which."""

from __future__ import annotations

from collections.abc import Iterable


class SweepResult(int):
    """The number of runs a sweep paused (the spec's count), with their ids in run_ids.

    An int, so `provider.boot_recovery_sweep() == 2` holds as in the spec; `run_ids`
    (sorted) is what planq logs and what the periodic sweep task returns.
    """

    run_ids: tuple[str, ...]

    def __new__(cls, run_ids: Iterable[str] = ()) -> SweepResult:
        ids = tuple(sorted(run_ids))
        result = super().__new__(cls, len(ids))
        result.run_ids = ids
        return result

    def __repr__(self) -> str:
        return f"SweepResult({int(self)}, run_ids={self.run_ids!r})"
