"""The publish door: job messages onto the broker, then their `dispatched_at` stamps.

Messages go out on one producer, one connection, one pipeline per chunk; each chunk the
broker took is stamped in the ledger in batch (`DispatchStamps`, below), so the dispatch
relay knows it was sent. The runtime's `publish` is `JobPublisher.publish`.

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
the dispatch relay's to send (a duplicate is dropped by the claim's compare-and-set). A
single job (a `delay()`) skips the pipeline: one publish with that retry policy, as
`send_task` would do it, at a third less CPU than a pipeline of one.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from planq.domain.errors import LedgerUnavailableError
from planq.domain.jobs import AsyncJob
from planq.domain.outage import DEFAULT_OUTAGE_BUDGET, PROCESS_OUTAGES, OutageMonitor
from planq.domain.periodic import PeriodicBatch
from planq.domain.redaction import BUILTIN, Redactor, describe_exception
from planq.tasks.tracing import message_headers

logger = logging.getLogger("planq.publish")
stamp_logger = logging.getLogger("planq.dispatch")

#: Jobs per pipeline flush (two broker commands each at most: the message, its sent event).
CHUNK = 500


def task_name(job: AsyncJob) -> str:
    """The phase task that runs this job."""
    return f"planq.{job.phase.value}_plan"


class JobPublisher:
    """Publishes job messages for an app in chunks, and stamps each chunk the broker took."""

    def __init__(
        self,
        app: Any,
        redactor: Redactor,
        stamp: Callable[[list[str]], object],
        chunk: int = CHUNK,
    ) -> None:
        self.app = app
        self.redactor = redactor
        #: send_task's options per task name, routed once (Celery's router is built once
        #: from the app's configuration too).
        self.routes: dict[str, dict[str, Any]] = {}
        self.chunk = chunk
        #: `dispatched_at` for what was sent, in one statement per ~100 ms (`stamp`: the
        #: ledger's `mark_dispatched`).
        self.stamps = DispatchStamps(stamp, redactor=redactor)

    def publish(self, jobs: Sequence[AsyncJob]) -> None:
        """Send the jobs' messages, pipelined by chunk; stamp each chunk the broker took.

        The one publish path: task id = job id, the kwargs carry ids only, and Flower's
        kwargsrepr is redacted. Producers reach it only through the lifecycle (a committed
        row), never with kwargs of their own. A chunk the broker did not take stays
        unstamped: the dispatch relay sends it.
        """
        for sent in self.send(jobs):
            self.stamps.add(sent)

    def close(self) -> None:
        """Stamp what is pending and stop the stamps' thread."""
        self.stamps.close()

    def send(self, jobs: Sequence[AsyncJob]) -> Iterator[list[str]]:
        """Publish every job's message; yield each chunk's job ids once the broker has it."""
        if not jobs:
            return
        with self.app.producer_or_acquire() as producer:
            batch = _Batch(self.app, producer, self.routes)
            if len(jobs) == 1:  # one message (a delay()): no pipeline, Celery's own retries
                self._buffer(batch, jobs[0], retry=None)
                yield [jobs[0].job_id]
                return
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
            headers=message_headers(job.plan_id),
        )

    @staticmethod
    def _kwargs(job: AsyncJob) -> dict[str, str]:
        """What a message carries: ids only (the row holds the rest)."""
        return {"job_id": job.job_id, "plan_id": job.plan_id}

    def _buffer(self, batch: _Batch, job: AsyncJob, retry: bool | None = False) -> None:
        """Build the job's message as send_task does and hand it to the producer (its batch).

        retry False inside a batch (a failed flush is sent again by `send`); None outside
        one: Celery's publish retry policy, as `send_task` applies it.
        """
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
            retry=retry,
            headers=message_headers(job.plan_id),  # the W3C trace context, if any
        )


class _Batch:
    """What send_task looks up per message, looked up once per `send()` (routes: once)."""

    def __init__(self, app: Any, producer: Any, routes: dict[str, dict[str, Any]]) -> None:
        self.app = app
        self.producer = producer
        self.routes = routes
        self.amqp = app.amqp
        self.sender = self.amqp.send_task_message  # a new closure on every access: keep one
        self.reply_to = app.thread_oid
        self.sent_event = app.conf.task_send_sent_event
        parent = app.current_worker_task  # queued from inside a task: that task's ids
        self.root_id = self.parent_id = None
        if parent:
            self.root_id = parent.request.root_id or parent.request.id
            self.parent_id = parent.request.id
        self._declared: set[str] = set()

    def options(self, name: str) -> dict[str, Any]:
        """send_task's options for this task name, its queue declared on this connection."""
        known = self.routes.get(name)
        if known is None:
            task = self.app.tasks[name]
            options = {k: v for k, v in task._get_exec_options().items() if v is not None}
            limits = {k: options.pop(k, None) for k in ("time_limit", "soft_time_limit", "expires")}
            options.pop("ignore_result", None)
            route = self.amqp.router.route(options, name, (), {}, task)
            known = self.routes[name] = {"route": route, **limits}
        if name not in self._declared:
            self._declare(known["route"].get("queue"))
            self._declared.add(name)
        return known

    def _declare(self, queue: Any) -> None:
        """maybe_declare, after kombu's own per-connection check (it copies the queue first)."""
        if queue is None or isinstance(queue, str):
            return
        connection = getattr(self.producer.channel, "connection", None)
        declared = getattr(getattr(connection, "client", None), "declared_entities", ())
        if queue.can_cache_declaration and hash(queue) in declared:
            return
        self.producer.maybe_declare(queue)


#: Seconds between flushes: far inside the relay's grace (600 s by default).
FLUSH_INTERVAL = 0.1


class DispatchStamps:
    """Collects published job ids and stamps them in one statement per interval.

    The stamp tells the relay a row's message was sent. It is only a hint with a generous
    grace (the relay waits `dispatch_grace` before re-publishing an unstamped row), so it
    can trail the publish by a fraction of a second, and a stamp lost with its process
    costs at most one duplicate message, which the claim's compare-and-set drops. `delay()`
    therefore makes one round trip to the database, and a burst shares one statement.

    The thread is a `PeriodicBatch`. Through a ledger outage the ids are kept and retried
    (the outage is the monitor's to log, once) until the outage has lasted `outage_budget`
    seconds; then they are left to the relay, with one warning. Any other failure drops the
    batch with one redacted line: a stamp is a hint only.
    """

    def __init__(
        self,
        stamp: Callable[[list[str]], object],
        interval: float = FLUSH_INTERVAL,
        outage_budget: float = DEFAULT_OUTAGE_BUDGET,
        outages: OutageMonitor | None = None,
        redactor: Redactor = BUILTIN,
    ):
        self._stamp = stamp
        self.outages = PROCESS_OUTAGES if outages is None else outages
        self._pending: list[str] = []
        self._lock = threading.Lock()
        #: The flush thread: started by add(), ends when nothing is pending.
        self.loop = PeriodicBatch(
            self._stamp_pending,
            interval,
            what="dispatch stamps",
            idle=lambda: not self.pending,
            name="planq-dispatch-stamps",
            outages=self.outages,
            redactor=redactor,
            log=stamp_logger,
            outage_budget=outage_budget,
            on_budget_spent=self._leave_to_the_relay,
        )
        atexit.register(self.flush)

    @property
    def interval(self) -> float:
        """Seconds between flushes (a test may stretch it to flush by hand)."""
        return self.loop.interval

    @interval.setter
    def interval(self, seconds: float) -> None:
        self.loop.interval = seconds

    @property
    def outage_budget(self) -> float:
        """Seconds of outage the ids are kept through before they are left to the relay."""
        return self.loop.outage_budget or 0.0

    @property
    def pending(self) -> int:
        """How many ids wait for their stamp (held through an outage, or not yet flushed)."""
        with self._lock:
            return len(self._pending)

    def add(self, job_ids: Iterable[str]) -> None:
        """Remember ids whose message was just published; the thread stamps them soon."""
        with self._lock:
            self._pending.extend(job_ids)
        self.loop.start()

    def flush(self) -> int:
        """Stamp everything pending now; how many ids were stamped (0 if that failed)."""
        return self.loop.run_once()

    def _stamp_pending(self) -> int:
        """The loop's tick: one statement for every pending id; an outage puts them back."""
        with self._lock:
            ids, self._pending = self._pending, []
        if not ids:
            return 0
        try:
            self._stamp(ids)
        except LedgerUnavailableError:  # kept for the next try; the loop counts the budget
            with self._lock:
                self._pending[:0] = ids
            raise
        return len(ids)

    def _leave_to_the_relay(self) -> None:
        """The outage outlasted the budget: drop the held ids (the relay re-publishes them)."""
        with self._lock:
            ids, self._pending = self._pending, []
        if ids:
            stamp_logger.warning("dropping %d stamp(s) after %.0fs", len(ids), self.outage_budget)

    def close(self) -> None:
        """Stamp what is pending and stop the thread."""
        self.loop.stop()
        self.flush()
        self.loop.close()
        atexit.unregister(self.flush)


__all__ = ["CHUNK", "FLUSH_INTERVAL", "DispatchStamps", "JobPublisher", "task_name"]
