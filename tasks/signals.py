"""Every Celery signal planq listens to, in one place: a worker's start, its processes, its stop.

| signal | what planq does |
|---|---|
| celeryd_init | preflight: `celery worker` refuses to start without a usable ledger |
| after_setup_logger, after_setup_task_logger | the redacting filter on every handler |
| worker_init | name the node; the revoke bridge; the metrics endpoint; the runs' boot sweep |
| worker_process_init | a prefork child: its Runtime, and the tracker's wake-up signals |
| worker_process_shutdown | the child's metrics file; its spans flushed |
| worker_shutting_down | warm shutdown: trip the tokens, signal the children, pause runs |
| beat_init | beat sends no task events for its sweeps |
| task_prerun, task_postrun | a phase delivery holds its cancellation token |
| task_revoked | one log line |

No job's state moves here (Celery swallows a receiver's exception): that happens in the task
body. Two handlers write recoverable-run rows: the boot sweep on worker_init and the
shutdown pause on worker_shutting_down; the rest set up the process and wake the tracker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.concurrency import ALIASES
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    beat_init,
    celeryd_init,
    task_postrun,
    task_prerun,
    task_revoked,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_shutting_down,
)

from planq.domain.log_redaction import install_redacting_filter
from planq.tasks import metrics, tracing
from planq.tasks.recoverable import pause_at_shutdown, sweep_at_boot
from planq.tasks.revoke_bridge import POKE_SIGNAL, install_revoke_bridge
from planq.tasks.runtime import holder_of, run_owner_name, runtime_for

logger = logging.getLogger("planq.signals")
#: Tells a prefork child "warm shutdown: trip your tokens". Not SIGHUP/SIGUSR1/SIGTERM:
#: billiard re-installs its own exit handler for those after worker_process_init runs.
#: SIGURG's default action is to ignore it, so a stray one is harmless.
SHUTDOWN_SIGNAL = signal.SIGURG


def connect_signals(app: Celery, preflight: Callable[[], None] | None = None) -> None:
    """Connect planq's handlers for this app (idempotent); preflight runs on celeryd_init."""
    holder = holder_of(app)
    config = holder.config

    def for_app(sender: Any) -> bool:
        owner = getattr(sender, "app", None)
        return owner is None or owner is app

    def _on_setup_logger(logger: Any = None, **_: Any) -> None:
        # The root logger's handlers see every library's records (planq's, Celery's own
        # "Task … raised" lines, redirected stdout); the task logger has handlers of its own.
        targets = [logger] if isinstance(logger, logging.Logger) else []
        for target in [*targets, logging.getLogger()]:
            install_redacting_filter(target, config.redactor)

    def _on_celeryd_init(sender: Any = None, instance: Any = None, **_: Any) -> None:
        # The `celery worker` program's parent, before the banner and before any fork.
        if preflight is not None and getattr(instance, "app", None) is app:
            preflight()

    def _on_worker_init(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        node = getattr(sender, "hostname", None)
        if isinstance(node, str) and node:  # every process of the node claims as `<node>/<pid>`
            holder.name_node(node)
        concurrency = getattr(sender, "concurrency", None)  # group commit: threads/gevent only
        slots = concurrency if isinstance(concurrency, int) and concurrency > 0 else None
        holder.hold_many(pool_holds_many(sender), slots)
        install_revoke_bridge()
        if config.metrics_port:  # in the parent, before any child forks: they inherit it
            metrics.serve_metrics(config.metrics_port, gate=_gate_summary)
        owner = holder.run_owner or run_owner_name(None)
        sweep_at_boot(app, owner, config.run_stale_after)

    def _gate_summary(at_most: int) -> Any:
        return runtime_for(app).plans.gate_summary(at_most)

    def _on_process_shutdown(pid: int | None = None, **_: Any) -> None:
        metrics.process_exited(pid or os.getpid())
        try:  # billiard ends the child with os._exit: export its spans first
            tracing.flush()
        except Exception:
            logger.exception("could not flush this process's spans")

    def _on_process_init(**_: Any) -> None:
        # A prefork child: rebuild the runtime (the parent's pool is dropped, not closed)
        # and let the parent wake the tracker with signals.
        tracker = runtime_for(app).worker.tracker
        signal.signal(POKE_SIGNAL, lambda *_: tracker.poke())
        signal.signal(SHUTDOWN_SIGNAL, lambda *_: tracker.poke_shutdown())

    def _on_shutting_down(
        sender: Any = None, sig: Any = None, how: Any = None, exitcode: Any = None, **_: Any
    ) -> None:
        # Warm shutdown: in-flight jobs stop at their next safe point, checkpoints kept.
        runtime = runtime_for(app)
        tripped = runtime.worker.tracker.cancel_all()
        children = _pool_child_pids()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, SHUTDOWN_SIGNAL)
        logger.info(
            "shutdown (%s): tripped %d local tokens, signalled %d children",
            how,
            len(tripped),
            len(children),
        )
        if how == "Warm":  # sent inside the CLI worker's signal handler: a thread writes
            owner = holder.run_owner or run_owner_name(sender if isinstance(sender, str) else None)
            pause_at_shutdown(app, owner)

    def _on_beat_init(sender: Any = None, **_: Any) -> None:
        # Beat publishes maintenance sweeps every few seconds: no task-sent events for
        # them (producers of phase jobs keep theirs), so Flower lists the work, not sweeps.
        if for_app(sender):
            app.conf.update(task_send_sent_event=False)

    def is_phase_task(task: Any) -> bool:
        return getattr(task, "app", None) is app and hasattr(task, "phase")

    def _on_prerun(task_id: Any = None, task: Any = None, **_: Any) -> None:
        # Where the task runs (the child, under prefork): hold the token from now, so a
        # revoke or a warm shutdown before the claim still reaches the job. The heartbeat
        # starts at the claim (the engine), the one statement per interval stays.
        if is_phase_task(task) and isinstance(task_id, str):
            try:
                runtime_for(app).worker.tracker.hold(task_id.upper())
            except Exception:  # Celery would only log it quietly
                logger.exception("task_prerun %s: could not hold its token", task_id)

    def _on_postrun(task_id: Any = None, task: Any = None, **_: Any) -> None:
        if is_phase_task(task) and isinstance(task_id, str):
            try:
                runtime_for(app).worker.tracker.release(task_id.upper())
            except Exception:
                logger.exception("task_postrun %s: could not release its token", task_id)

    def _on_revoked(request: Any = None, terminated: bool = False, **_: Any) -> None:
        logger.info("celery revoked %s (terminated=%s)", getattr(request, "id", "?"), terminated)

    for setup in (after_setup_logger, after_setup_task_logger):  # worker's and beat's logs
        setup.connect(_on_setup_logger, weak=False, dispatch_uid=f"planq-logs-{id(app)}")
    celeryd_init.connect(_on_celeryd_init, weak=False, dispatch_uid=f"planq-preflight-{id(app)}")
    worker_init.connect(_on_worker_init, weak=False, dispatch_uid=f"planq-init-{id(app)}")
    worker_process_shutdown.connect(
        _on_process_shutdown, weak=False, dispatch_uid=f"planq-procend-{id(app)}"
    )
    worker_process_init.connect(_on_process_init, weak=False, dispatch_uid=f"planq-proc-{id(app)}")
    worker_shutting_down.connect(
        _on_shutting_down, weak=False, dispatch_uid=f"planq-stop-{id(app)}"
    )
    beat_init.connect(_on_beat_init, weak=False, dispatch_uid=f"planq-beat-{id(app)}")
    task_revoked.connect(_on_revoked, weak=False, dispatch_uid=f"planq-revoked-{id(app)}")
    task_prerun.connect(_on_prerun, weak=False, dispatch_uid=f"planq-prerun-{id(app)}")
    task_postrun.connect(_on_postrun, weak=False, dispatch_uid=f"planq-postrun-{id(app)}")


#: The pools whose one process runs many jobs at once (celery.concurrency's modules).
_SHARED_POOLS = frozenset(f"celery.concurrency.{name}" for name in ("thread", "gevent", "eventlet"))


def pool_holds_many(controller: Any) -> bool:
    """Whether this worker's one process runs many jobs at once: where group commit pays.

    A threads, gevent or eventlet pool of concurrency above 1. Prefork children hold one
    job each and solo one in all: they keep the single statements. The WorkController
    names its pool by alias or class (worker_init comes before Celery resolves it).
    """
    pool = getattr(controller, "pool_cls", None)
    if isinstance(pool, str):
        pool = ALIASES.get(pool, pool).partition(":")[0]
    else:
        pool = getattr(pool, "__module__", "")
    concurrency = getattr(controller, "concurrency", 0)
    return pool in _SHARED_POOLS and isinstance(concurrency, int) and concurrency > 1


def _pool_child_pids() -> list[int]:
    from celery.worker import state as worker_state

    return sorted(
        {
            req.worker_pid
            for req in list(worker_state.active_requests)
            if req.worker_pid and req.worker_pid != os.getpid()
        }
    )
