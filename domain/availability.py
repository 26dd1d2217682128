"""Lease expiry that is fair to the holder: how long has the ledger been reachable?

A job's (or a run's) heartbeat that is older than its timeout proves nothing while the
ledger could not be reached: its holder could not renew. So a sweep declares a lease
expired only when the holder had a full timeout of *ledger availability* to renew it.

The evidence lives in the ledger, not in a process (the sweep runs on whichever worker
takes the beat task): one row per sweep kind with `last_seen_at` (the last time a sweep
reached the ledger, on the ledger's clock) and `available_since` (the start of the current
unbroken stretch of sightings). Each sweep reads and updates its row in one transaction
(`next_availability`), under a row lock, so two concurrent sweepers see each other.

`available_since` moves to the newest of:
- now, when the gap since the previous sighting is longer than the sweep's schedule allows
  (`allowed_gap`): nothing vouches for the ledger in between (an outage, a failed sweep, a
  sweep that ran late because the workers were busy: all hold off alike);
- the ledger server's start time (a restart, however quick);
- the moment the sweeping process last saw the ledger come back from an outage (its own
  heartbeats or an earlier sweep failed: `domain.outage.OutageMonitor.recovered_ago`).
With no sighting on record yet, nothing is known against the ledger: it counts as available.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from planq.domain.bounds import MAX_DURATION_SECONDS, check_number

#: Sweep kinds, each with its own row (its own schedule judges its own gaps).
JOB_SWEEP = "jobs"
RUN_SWEEP = "runs"
SWEEPS = (JOB_SWEEP, RUN_SWEEP)

#: A sweep may run this much of its interval late and still count as on schedule.
LATE_FRACTION = 0.5
#: ...and at least this many seconds late (beat's own tick and a queue hop).
MIN_LATENESS = 1.0
#: The shortest sweep interval accepted (a BoundsError below it, nothing written).
MIN_INTERVAL = 0.001


def check_sweep(sweep: object) -> str:
    """One of the known sweep kinds (each has its own row)."""
    if not isinstance(sweep, str) or sweep not in SWEEPS:
        raise ValueError(f"sweep must be one of {', '.join(SWEEPS)}, got {sweep!r}")
    return sweep


def allowed_gap(sweep_interval: float) -> float:
    """The longest gap between two sightings that still vouches for the ledger in between.

    interval + max(interval / 2, 1 s). Longer means the sweep did not run on schedule:
    whatever happened meanwhile is unknown, so the sweep holds off for a full timeout.
    """
    seconds = check_number("sweep_interval", sweep_interval, MIN_INTERVAL, MAX_DURATION_SECONDS)
    return seconds + max(seconds * LATE_FRACTION, MIN_LATENESS)


#: The longest allowed gap of any sweep schedule (a sighting's max_gap is at most this).
MAX_GAP = MAX_DURATION_SECONDS * (1 + LATE_FRACTION)

#: The stale-run sweep runs every stale_after / 2 (tasks/recoverable.py's beat entry).
STALE_SWEEPS_PER_WINDOW = 2


def stale_sweep_gap(stale_after: float) -> float:
    """The allowed gap between the stale-run sweep's sightings (0.75 x stale_after for >= 4 s).

    With the run heartbeat at stale_after / 6 at most, a run outage unseen by the sweep
    (shorter than this gap) still leaves its holder time to renew: 0.75 + 1/6 < 1.
    """
    return allowed_gap(max(stale_after / STALE_SWEEPS_PER_WINDOW, MIN_INTERVAL))


@dataclass(frozen=True)
class Availability:
    """What a sweep knows after its sighting: the ledger's now, and since when it is up."""

    now: datetime
    #: None: no gap, restart or outage on record (the ledger counts as always available).
    available_since: datetime | None

    def available_for(self, seconds: float) -> bool:
        """Whether the ledger has been reachable for at least `seconds` up to now."""
        if self.available_since is None:
            return True
        return self.available_since <= self.now - timedelta(seconds=seconds)

    def waits(self, seconds: float) -> float:
        """Seconds until available_for(seconds) holds (0 if it holds now)."""
        if self.available_since is None:
            return 0.0
        due = self.available_since + timedelta(seconds=seconds)
        return max(0.0, (due - self.now).total_seconds())


def next_availability(
    last_seen_at: datetime | None,
    available_since: datetime | None,
    now: datetime,
    max_gap: float,
    restarted_at: datetime | None = None,
    recovered_ago: float | None = None,
) -> Availability:
    """The row's new available_since after a sighting at `now` (see the module doc).

    A clock that went backwards (now before last_seen_at) is a gap too: hold off.
    """
    since = available_since
    if last_seen_at is not None:
        gap = (now - last_seen_at).total_seconds()
        if gap > max_gap or gap < 0:
            since = now
    for evidence in (
        restarted_at,
        None if recovered_ago is None else now - timedelta(seconds=max(0.0, recovered_ago)),
    ):
        if evidence is not None and (since is None or evidence > since):
            since = min(evidence, now)
    return Availability(now=now, available_since=since)
