"""Executors for benchmarks: a long job that records when its token tripped."""

from __future__ import annotations

import os
import time

import redis

from planq.tasks.executors import JobContext

REDIS = redis.Redis.from_url(
    os.environ.get("PLANQ_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"), decode_responses=True
)


def tripped_key(job_id: str) -> str:
    """Where the executor writes the epoch time it saw its token trip."""
    return f"planq-bench:tripped:{job_id}"


def started_key(job_id: str) -> str:
    """Where the executor writes that it is running."""
    return f"planq-bench:started:{job_id}"


def cancellable(ctx: JobContext) -> None:
    """Wait up to 120 s on the token (waking at once when it trips), then record the time."""
    REDIS.set(started_key(ctx.job.job_id), "1")
    if ctx.token.wait(120):
        REDIS.set(tripped_key(ctx.job.job_id), repr(time.time()))
