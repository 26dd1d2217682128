"""The engine's knobs, validated where they are built."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from domain.errors import ConfigurationError

#: The engine's defaults: the one home of each (PLANQ_* settings read them from here).
DEFAULT_MAX_WORKERS = 4
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_JOB_TIMEOUT = 300.0
DEFAULT_JOB_TTL = 7 * 24 * 3600.0
DEFAULT_MAX_ATTEMPTS = 1
#: A queued row unsent, or sent and unclaimed, this long is re-published by the relay.
#: Generous: phases run for minutes, so a message may wait in a busy queue that long.
DEFAULT_DISPATCH_GRACE = 600.0
#: Publishes after which a still-unclaimed row fails "never picked up".
DEFAULT_MAX_DISPATCHES = 10
#: The heartbeat interval when neither it nor a short job_timeout says otherwise.
DEFAULT_HEARTBEAT_INTERVAL = 5.0
#: A derived heartbeat interval leaves this many beats inside one job_timeout.
HEARTBEATS_PER_TIMEOUT = 3


def _positive(name: str, value: object, *, integer: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ConfigurationError(f"{name} must be an integer, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name} must be a finite number greater than 0, got {value!r}")


def derive_heartbeat_interval(job_timeout: float) -> float:
    """The heartbeat interval for a job_timeout: the default, or a third of a short timeout."""
    return min(DEFAULT_HEARTBEAT_INTERVAL, job_timeout / HEARTBEATS_PER_TIMEOUT)


@dataclass(frozen=True, slots=True, init=False)
class AsyncWorkerConfig:
    """How jobs are run, watched and kept; every number is validated at construction.

    heartbeat_interval, when not given (or None), is derived from job_timeout
    (`derive_heartbeat_interval`), so a default never contradicts a valid job_timeout;
    an explicit pair with heartbeat_interval >= job_timeout is a ConfigurationError.
    Every invalid value raises ConfigurationError (a ValueError); a non-bool enabled,
    TypeError.
    """

    enabled: bool
    max_workers: int
    poll_interval: float
    job_timeout: float
    job_ttl: float
    heartbeat_interval: float
    max_attempts: int
    dispatch_grace: float
    max_dispatches: int

    def __init__(
        self,
        enabled: bool = True,
        max_workers: int = DEFAULT_MAX_WORKERS,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        job_timeout: float = DEFAULT_JOB_TIMEOUT,
        job_ttl: float = DEFAULT_JOB_TTL,
        heartbeat_interval: float | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        dispatch_grace: float = DEFAULT_DISPATCH_GRACE,
        max_dispatches: int = DEFAULT_MAX_DISPATCHES,
    ) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
        _positive("max_workers", max_workers, integer=True)
        _positive("poll_interval", poll_interval)
        _positive("job_timeout", job_timeout)
        _positive("job_ttl", job_ttl)
        if heartbeat_interval is None:
            heartbeat_interval = derive_heartbeat_interval(job_timeout)
        else:
            _positive("heartbeat_interval", heartbeat_interval)
            if heartbeat_interval >= job_timeout:
                raise ConfigurationError(
                    f"heartbeat_interval ({heartbeat_interval}) must be below "
                    f"job_timeout ({job_timeout}), or every job looks stuck"
                )
        _positive("max_attempts", max_attempts, integer=True)
        _positive("dispatch_grace", dispatch_grace)
        _positive("max_dispatches", max_dispatches, integer=True)
        values = {
            "enabled": enabled,
            "max_workers": max_workers,
            "poll_interval": poll_interval,
            "job_timeout": job_timeout,
            "job_ttl": job_ttl,
            "heartbeat_interval": heartbeat_interval,
            "max_attempts": max_attempts,
            "dispatch_grace": dispatch_grace,
            "max_dispatches": max_dispatches,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def as_dict(self) -> dict[str, Any]:
        """The values, for health reports."""
        return asdict(self)
