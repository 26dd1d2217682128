"""Executors the tests load by reference ('tests.executors_for_tests:name').

Cross-process facts (how many times a job ran, how many ran at once) go to Redis, so the
same executors work in threads and in prefork children.
"""

from __future__ import annotations

import os
import signal
import time

import redis

from planq.tasks.executors import JobContext
from tests import resources  # noqa: F401  (this slot's Redis URLs, inherited or set here)

REDIS = redis.Redis.from_url(os.environ["PLANQ_TEST_REDIS_URL"], decode_responses=True)


def runs_key(job_id: str) -> str:
    """How many times job_id's executor started."""
    return f"planq-test:runs:{job_id}"


def tripped_key(job_id: str) -> str:
    """When (epoch seconds) job_id's token was seen tripped by its executor."""
    return f"planq-test:tripped:{job_id}"


def _enter(ctx: JobContext) -> None:
    REDIS.incr(runs_key(ctx.job.job_id))
    now = REDIS.incr("planq-test:concurrent")
    REDIS.set(
        "planq-test:max-concurrent", max(now, int(REDIS.get("planq-test:max-concurrent") or 0))
    )
    REDIS.sadd("planq-test:pids", os.getpid())


def _leave() -> None:
    REDIS.decr("planq-test:concurrent")


def counted(ctx: JobContext) -> None:
    """Run for PLANQ_TEST_SECONDS (default 0.3), checkpointing; stop early on cancel."""
    _enter(ctx)
    try:
        seconds = float(os.environ.get("PLANQ_TEST_SECONDS", "0.3"))
        steps = 10
        start = int(ctx.resume_state.get("step", 0))
        for step in range(start, steps):
            if ctx.token.wait(seconds / steps):
                return
            ctx.checkpoint({"step": step + 1}, progress=(step + 1) / steps)
    finally:
        _leave()


def slow(ctx: JobContext) -> None:
    """Checkpoint every 0.1 s for up to 60 s; return at the first safe point after a cancel."""
    _enter(ctx)
    try:
        deadline = time.monotonic() + 60
        step = int(ctx.resume_state.get("step", 0))
        while time.monotonic() < deadline:
            if ctx.token.wait(0.1):
                REDIS.set(tripped_key(ctx.job.job_id), repr(time.time()))
                return
            step += 1
            ctx.checkpoint({"step": step})
    finally:
        _leave()


def quiet(ctx: JobContext) -> None:
    """Wait up to 120 s for a cancel and write nothing meanwhile (ledger counts stay still)."""
    _enter(ctx)
    try:
        if ctx.token.wait(120):
            REDIS.set(tripped_key(ctx.job.job_id), repr(time.time()))
    finally:
        _leave()


def leak_secret(ctx: JobContext) -> None:
    """Fail with secrets in the message (they must never surface unredacted)."""
    raise PermissionError(
        "upstream said: Authorization: Bearer tok_live_SECRETVALUE123 "
        "and password=SECRETVALUE123 at https://svc:SECRETVALUE123@api.example"
    )


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("password=hunter2 leaked by __str__")


def unprintable_secret(ctx: JobContext) -> None:
    """Fail with an exception whose __str__ itself raises with a secret in it."""
    raise _Unprintable()


def by_plan_name(ctx: JobContext) -> None:
    """Do what the plan's name says: 'fail…' fails leaking secrets, 'slow…' runs until cancelled.

    Anything else succeeds at once: one worker can show every ledger outcome.
    """
    name = ctx.plan.name if ctx.plan is not None else ""
    if name.startswith("fail"):
        leak_secret(ctx)
    elif name.startswith("slow"):
        slow(ctx)


def ignores_cancel(ctx: JobContext) -> None:
    """Work for PLANQ_TEST_SECONDS (default 3) without ever looking at the token."""
    _enter(ctx)
    try:
        time.sleep(float(os.environ.get("PLANQ_TEST_SECONDS", "3")))
    finally:
        _leave()


#: Site-specific secrets only a custom PLANQ_REDACTION_PATTERNS (`tok_[A-Za-z0-9]+`) catches.
CUSTOM_TOKEN = "tok_CUSTOMx9Q4"
CHAINED_TOKEN = "tok_CHAINEDz7W2"
LOGGED_TOKEN = "tok_LOGGEDk3P8"


def custom_token_chain(ctx: JobContext) -> None:
    """Log and raise `RuntimeError(token) from KeyError(other token)`, as a client library would."""
    try:
        try:
            raise KeyError(f"credential {CHAINED_TOKEN} not accepted")
        except KeyError as cause:
            raise RuntimeError(f"upstream refused {CUSTOM_TOKEN}") from cause
    except RuntimeError:
        ctx.logger.exception("upstream call failed with %s", LOGGED_TOKEN)
        raise


#: In a user function's exception: one secret the built-in patterns catch, one only the
#: custom `tok_…` pattern does (issue 19, item 2: the user's traceback, kept and redacted).
TRACEBACK_PASSWORD = "hunter2TRACE"
TRACEBACK_TOKEN = "tok_TRACEBACKv5R1"
#: How deep `deep_user_bug` recurses (two alternating frames: Python cannot fold them).
DEEP = 300


def parse_user_row(row: str) -> int:
    """A user's own helper with a bug: the frame a stored traceback must show."""
    fields = row.split(",")
    if len(fields) < 3:
        raise ValueError(
            f"row {row!r} has {len(fields)} fields; "
            f"password={TRACEBACK_PASSWORD} token {TRACEBACK_TOKEN}"
        )
    return len(fields)


def user_bug(ctx: JobContext) -> None:
    """Call a user's helper that raises (with secrets in its message) two frames down."""
    parse_user_row("a,b")


def _descend(depth: int) -> None:
    if depth <= 0:
        parse_user_row("short")
    _ascend(depth - 1)


def _ascend(depth: int) -> None:
    _descend(depth - 1)


def deep_user_bug(ctx: JobContext) -> None:
    """Raise from DEEP alternating frames down: a traceback far over the stored bound."""
    _descend(DEEP)


def fails_first_attempt(ctx: JobContext) -> None:
    """Fail the job's first attempt (a phase that a `jobs retry` then gets through)."""
    if ctx.job.attempt == 1:
        raise RuntimeError("first attempt fails")


def waits_for_cancel(ctx: JobContext) -> None:
    """Run until cancelled (at most 60 s), checking the token every 50 ms."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not ctx.token.wait(0.05):
        pass


def dies_after_first_finish(ctx: JobContext) -> None:
    """Once per plan (its first strategize): kill -9 this process right after the finish commits.

    Arms the runtime's pipeline publish in this process: the finish's transaction (the job
    succeeded, the next phase queued) commits, then the process dies before publishing.
    """
    from celery import current_app

    from planq.tasks.runtime import runtime_for

    if ctx.job.phase.value != "strategize" or ctx.plan is None:
        return
    if not REDIS.set(f"planq-test:armed:{ctx.plan.plan_id}", os.getpid(), nx=True):
        return

    def die(_jobs: object) -> None:
        REDIS.set(f"planq-test:died:{ctx.job.job_id}", os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)

    runtime_for(current_app._get_current_object()).worker.ledger.enqueue = die
