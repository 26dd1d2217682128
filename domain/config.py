"""The engine's knobs, validated where they are built."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from planq.domain.bounds import MAX_DURATION_SECONDS
from planq.domain.errors import ConfigurationError

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
#: Seconds between stuck-job sweeps (beat's schedule; their allowed gap derives from it).
DEFAULT_STUCK_CHECK_INTERVAL = 30.0
#: Group commit's window in milliseconds (tasks/group_commit.py): claims and finishes
#: arriving within it go to the ledger in one statement per kind; 0 = off.
DEFAULT_GROUP_COMMIT_MS = 2.0
#: Its bound: a job's claim or finish waits at most this long for its batch.
MAX_GROUP_COMMIT_MS = 50.0
#: A derived heartbeat interval leaves this many beats inside one job_timeout.
HEARTBEATS_PER_TIMEOUT = 3

#: Upper bounds. A duration's is the library's one (domain/bounds.py): ten years.
MAX_DURATION = MAX_DURATION_SECONDS
MAX_WORKERS = 1024  #: threads or processes one worker runs jobs on
MAX_ATTEMPTS = 100  #: tries of one phase, the first included
MAX_DISPATCHES = 1000  #: publishes of one unclaimed row before it fails "never picked up"


def shown(value: object) -> str:
    """repr(value), except an integer too long to print usefully (10**400) is summarised."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)


def plain(number: float) -> str:
    """A bound as people write it: 315360000, not 3.1536e+08."""
    return str(int(number)) if float(number).is_integer() else str(number)


def _bounded(name: str, value: object, upper: float, *, integer: bool = False) -> None:
    """A number in (0, upper]; NaN, infinities and huge integers are refused."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{name} must be a number, got {value!r}")
    if integer and not isinstance(value, int):
        raise ConfigurationError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigurationError(f"{name} must be a finite number, got {value!r}")
    if not 0 < value <= upper:  # int vs float compares exactly: no OverflowError
        raise ConfigurationError(
            f"{name} must be greater than 0 and at most {plain(upper)}, got {shown(value)}"
        )


def check_group_commit_ms(value: object) -> float:
    """A group commit window: a finite number of milliseconds from 0 (off) to the bound."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"group_commit_ms must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigurationError(f"group_commit_ms must be a finite number, got {value!r}")
    if not 0 <= value <= MAX_GROUP_COMMIT_MS:
        raise ConfigurationError(
            f"group_commit_ms must be from 0 (off) to {plain(MAX_GROUP_COMMIT_MS)}, "
            f"got {shown(value)}"
        )
    return float(value)


def derive_heartbeat_interval(job_timeout: float) -> float:
    """The heartbeat interval for a job_timeout: the default, or a third of a short timeout."""
    return min(DEFAULT_HEARTBEAT_INTERVAL, job_timeout / HEARTBEATS_PER_TIMEOUT)


@dataclass(frozen=True, slots=True, init=False)
class AsyncWorkerConfig:
    """How jobs are run, watched and kept; every number is validated at construction.

    Every number is in (0, its bound]: durations up to MAX_DURATION seconds, counts up to
    MAX_WORKERS, MAX_ATTEMPTS, MAX_DISPATCHES, so no value starts fine and then makes
    every sweep raise OverflowError.

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
    #: Group commit's window, ms (0: off); for pools that hold many jobs per process.
    group_commit_ms: float

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
        group_commit_ms: float = DEFAULT_GROUP_COMMIT_MS,
    ) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
        _bounded("max_workers", max_workers, MAX_WORKERS, integer=True)
        _bounded("poll_interval", poll_interval, MAX_DURATION)
        _bounded("job_timeout", job_timeout, MAX_DURATION)
        _bounded("job_ttl", job_ttl, MAX_DURATION)
        if heartbeat_interval is None:
            heartbeat_interval = derive_heartbeat_interval(job_timeout)
        else:
            _bounded("heartbeat_interval", heartbeat_interval, MAX_DURATION)
            if heartbeat_interval >= job_timeout:
                raise ConfigurationError(
                    f"heartbeat_interval ({heartbeat_interval}) must be below "
                    f"job_timeout ({job_timeout}), or every job looks stuck"
                )
        _bounded("max_attempts", max_attempts, MAX_ATTEMPTS, integer=True)
        _bounded("dispatch_grace", dispatch_grace, MAX_DURATION)
        _bounded("max_dispatches", max_dispatches, MAX_DISPATCHES, integer=True)
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
            "group_commit_ms": check_group_commit_ms(group_commit_ms),
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def as_dict(self) -> dict[str, Any]:
        """The values, for health reports."""
        return asdict(self)
