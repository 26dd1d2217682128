"""The engine's knobs, validated where they are built."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


def _positive(name: str, value: object, *, integer: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number greater than 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class AsyncWorkerConfig:
    """How jobs are run, watched and kept; every number is validated at construction."""

    enabled: bool = True
    max_workers: int = 4
    poll_interval: float = 1.0
    job_timeout: float = 300.0
    job_ttl: float = 7 * 24 * 3600.0
    heartbeat_interval: float = 5.0
    max_attempts: int = 1
    dispatch_grace: float = 60.0
    max_dispatches: int = 5

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise TypeError(f"enabled must be a bool, got {type(self.enabled).__name__}")
        _positive("max_workers", self.max_workers, integer=True)
        _positive("poll_interval", self.poll_interval)
        _positive("job_timeout", self.job_timeout)
        _positive("job_ttl", self.job_ttl)
        _positive("heartbeat_interval", self.heartbeat_interval)
        _positive("max_attempts", self.max_attempts, integer=True)
        _positive("dispatch_grace", self.dispatch_grace)
        _positive("max_dispatches", self.max_dispatches, integer=True)
        if self.heartbeat_interval >= self.job_timeout:
            raise ValueError(
                f"heartbeat_interval ({self.heartbeat_interval}) must be below "
                f"job_timeout ({self.job_timeout}), or every job looks stuck"
            )

    def as_dict(self) -> dict[str, Any]:
        """The values, for health reports."""
        return asdict(self)
