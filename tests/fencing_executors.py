"""Executors for the job-fencing and hard-boundary tests ('tests.fencing_executors:name').

`stepped` records every step it walks in Redis (pid, job, time), so a test can tell which
process did what, and in which order, across worker processes.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from planq.tasks.executors import JobContext
from tests.executors_for_tests import REDIS, _Unprintable

#: How long `stepped` keeps running after its token tripped when the plan is named
#: "linger…": a slow cooperative stop, so a premature terminal write would show.
LINGER = 1.5


def events_key(plan_id: str) -> str:
    """The Redis list of what every execution of plan_id's jobs did."""
    return f"planq-test:fence:{plan_id}"


def _record(ctx: JobContext, event: str, **extra: Any) -> None:
    entry = {"event": event, "job": ctx.job.job_id, "pid": os.getpid(), "t": time.time()}
    REDIS.rpush(events_key(ctx.job.plan_id), json.dumps({**entry, **extra}))


def events(plan_id: str) -> list[dict[str, Any]]:
    """Everything recorded for plan_id's jobs, in order."""
    return [json.loads(raw) for raw in REDIS.lrange(events_key(plan_id), 0, -1)]


def stepped(ctx: JobContext) -> None:
    """Walk the plan's steps (each `seconds` long), checkpointing {"step", "by"} after each.

    On a tripped token it records "tripped", lingers if the plan says so, records
    "stopped" and returns; a full walk records "done".
    """
    steps = ctx.plan.steps if ctx.plan is not None else []
    start = int(ctx.resume_state.get("step", 0))
    _record(ctx, "start", step=start)
    for index in range(start, len(steps)):
        if ctx.token.wait(float(steps[index].get("seconds", 0.25))):
            _record(ctx, "tripped", step=index, reason=ctx.token.reason)
            if ctx.plan is not None and ctx.plan.name.startswith("linger"):
                time.sleep(LINGER)  # the executor's own slow clean-up, not a test wait
            _record(ctx, "stopped", step=index)
            return
        _record(ctx, "step", step=index + 1)
        ctx.checkpoint({"step": index + 1, "by": ctx.job.job_id}, progress=(index + 1) / len(steps))
    _record(ctx, "done", step=len(steps))


def hard_errors(ctx: JobContext) -> None:
    """Fail as the plan's name says; anything else succeeds.

    'nul…': a NUL byte and a secret in the message; 'unprintable…': an exception whose
    __str__ raises (with a secret in it).
    """
    name = ctx.plan.name if ctx.plan is not None else ""
    _record(ctx, "start")
    if name.startswith("nul"):
        raise ValueError("bad\x00byte password=hunter2 from the executor")
    if name.startswith("unprintable"):
        raise _Unprintable()
    ctx.report_progress(1.0)
