"""Celery signal handlers: process setup, the revoke bridge, warm shutdown, token holds.

A phase delivery holds its cancellation token from task_prerun to task_postrun.

Ledger state transitions never happen here (Celery swallows a receiver's exception); they
happen in the task body. Handlers only set up the process and wake the tracker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from typing import Any

from celery import Celery
from celery.signals import (
    beat_init,
    task_postrun,
    task_prerun,
    task_revoked,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_shutting_down,
)

from planq.tasks import metrics
from planq.tasks.revoke_bridge import POKE_SIGNAL, install_revoke_bridge
from planq.tasks.runtime import runtime_for

logger = logging.getLogger("planq.signals")
#: Tells a prefork child "warm shutdown: trip your tokens". Not SIGHUP/SIGUSR1/SIGTERM:
#: billiard re-installs its own exit handler for those after worker_process_init runs.
#: SIGURG's default action is to ignore it, so a stray one is harmless.
SHUTDOWN_SIGNAL = signal.SIGURG


def connect_signals(app: Celery) -> None:
    """Connect planq's handlers for this app (idempotent)."""

    def for_app(sender: Any) -> bool:
        owner = getattr(sender, "app", None)
        return owner is None or owner is app

    def _on_worker_init(sender: Any = None, **_: Any) -> None:
        if not for_app(sender):
            return
        install_revoke_bridge()
        port = app.conf.planq_runtime.metrics_port
        if port:  # in the parent, before any child forks: children inherit the data dir
            metrics.serve_metrics(port)

    def _on_process_shutdown(pid: int | None = None, **_: Any) -> None:
        metrics.process_exited(pid or os.getpid())

    def _on_process_init(**_: Any) -> None:
        # A prefork child: rebuild the runtime (the parent's pool is dropped, not closed)
        # and let the parent wake the tracker with signals.
        tracker = runtime_for(app).worker.tracker
        signal.signal(POKE_SIGNAL, lambda *_: tracker.poke())
        signal.signal(SHUTDOWN_SIGNAL, lambda *_: tracker.poke_shutdown())

    def _on_shutting_down(sig: Any = None, how: Any = None, exitcode: Any = None, **_: Any) -> None:
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


def _pool_child_pids() -> list[int]:
    from celery.worker import state as worker_state

    return sorted(
        {
            req.worker_pid
            for req in list(worker_state.active_requests)
            if req.worker_pid and req.worker_pid != os.getpid()
        }
    )
