"""Job messages onto the broker: one producer, one connection, one pipeline per chunk.

Why: `app.send_task` pays per message for routing, a queue-declaration check, a retry
wrapper and, on Redis, a new client and a round trip (~1 ms), so a batch of 4,000 jobs
published one by one ran at ~670/s. Here the task's options are routed and its queue
declared once per task name, and every message of a chunk goes into kombu's
`Producer.batch()` (a Redis pipeline; transports without batches publish at once).

The messages are Celery's own: `amqp.create_task_message` and `amqp.send_task_message`
with the arguments `send_task` passes (task id = job id, ids-only kwargs, a redacted
kwargsrepr, the sender's reply_to, root and parent ids), so workers and Flower see what
they always saw. Inside a chunk, before/after_task_publish (and task_sent) fire as each
message joins the pipeline; the broker takes the chunk when it flushes. A chunk whose
flush fails is sent again one message at a time through `send_task` with Celery's publish
retry policy; if that fails too the error propagates and the rows, left unstamped, are
the dispatch relay's to send (a duplicate is dropped by the claim's compare-and-set).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from planq.domain.jobs import AsyncJob
from planq.domain.redaction import Redactor, describe_exception

logger = logging.getLogger("planq.publish")

#: Jobs per pipeline flush (two broker commands each at most: the message, its sent event).
CHUNK = 500


def task_name(job: AsyncJob) -> str:
    """The phase task that runs this job."""
    return f"planq.{job.phase.value}_plan"


class JobPublisher:
    """Publishes job messages for an app in chunks; yields what the broker took."""

    def __init__(self, app: Any, redactor: Redactor, chunk: int = CHUNK) -> None:
        self.app = app
        self.redactor = redactor
        self.chunk = chunk

    def send(self, jobs: Sequence[AsyncJob]) -> Iterator[list[str]]:
        """Publish every job's message; yield each chunk's job ids once the broker has it."""
        if not jobs:
            return
        with self.app.producer_or_acquire() as producer:
            batch = _Batch(self.app, producer)
            for start in range(0, len(jobs), self.chunk):
                chunk = jobs[start : start + self.chunk]
                try:
                    with producer.batch(max_size=2 * len(chunk)):
                        for job in chunk:
                            self._buffer(batch, job)
                except Exception as exc:  # delivery uncertain: again, one by one, with retries
                    logger.warning(
                        "pipelined publish of %d job(s) failed (%s); sending them one by one",
                        len(chunk),
                        describe_exception(exc, self.redactor),
                    )
                    for job in chunk:
                        self.send_one(job, producer)
                yield [job.job_id for job in chunk]

    def send_one(self, job: AsyncJob, producer: Any = None) -> None:
        """One message through `send_task` (Celery's publish retry policy applies)."""
        kwargs = self._kwargs(job)
        self.app.send_task(
            task_name(job),
            (),
            kwargs,
            task_id=job.job_id,
            argsrepr="()",
            kwargsrepr=self.redactor(repr(kwargs)),
            producer=producer,
            ignore_result=True,
        )

    @staticmethod
    def _kwargs(job: AsyncJob) -> dict[str, str]:
        """What a message carries: ids only (the row holds the rest)."""
        return {"job_id": job.job_id, "plan_id": job.plan_id}

    def _buffer(self, batch: _Batch, job: AsyncJob) -> None:
        """Build the job's message as send_task does and hand it to the producer's batch."""
        name = task_name(job)
        options = batch.options(name)
        kwargs = self._kwargs(job)
        kwargsrepr = self.redactor(repr(kwargs))
        message = batch.amqp.create_task_message(
            job.job_id,
            name,
            (),
            kwargs,
            reply_to=batch.reply_to,
            time_limit=options["time_limit"],
            soft_time_limit=options["soft_time_limit"],
            expires=options["expires"],
            create_sent_event=batch.sent_event,
            root_id=batch.root_id,
            parent_id=batch.parent_id,
            ignore_result=True,
            **options["route"],
            argsrepr="()",
            kwargsrepr=kwargsrepr,
        )
        batch.sender(
            batch.producer,
            name,
            message,
            **options["route"],
            argsrepr="()",
            kwargsrepr=kwargsrepr,
            declare=[],  # declared once, in _Batch.options
            retry=False,  # the pipeline flushes later; a failed flush is retried by send()
        )


class _Batch:
    """What send_task looks up per message, looked up once per `send()`."""

    def __init__(self, app: Any, producer: Any) -> None:
        self.app = app
        self.producer = producer
        self.amqp = app.amqp
        self.sender = self.amqp.send_task_message  # a new closure on every access: keep one
        self.reply_to = app.thread_oid
        self.sent_event = app.conf.task_send_sent_event
        parent = app.current_worker_task  # queued from inside a task: that task's ids
        self.root_id = self.parent_id = None
        if parent:
            self.root_id = parent.request.root_id or parent.request.id
            self.parent_id = parent.request.id
        self._routes: dict[str, dict[str, Any]] = {}

    def options(self, name: str) -> dict[str, Any]:
        """send_task's options for this task name (exec options, then the router), once."""
        known = self._routes.get(name)
        if known is not None:
            return known
        task = self.app.tasks[name]
        options = {k: v for k, v in task._get_exec_options().items() if v is not None}
        limits = {k: options.pop(k, None) for k in ("time_limit", "soft_time_limit", "expires")}
        options.pop("ignore_result", None)
        route = self.amqp.router.route(options, name, (), {}, task)
        queue = route.get("queue")
        if queue is not None and not isinstance(queue, str):
            self.producer.maybe_declare(queue)
        known = self._routes[name] = {"route": route, **limits}
        return known


__all__ = ["CHUNK", "JobPublisher", "task_name"]
