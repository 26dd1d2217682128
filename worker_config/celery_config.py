"""Celery configuration with the defaults worth keeping, and one queue per phase."""

from __future__ import annotations

from typing import Any

from kombu import Exchange, Queue

from planq.domain.plans import PlanPhase
from planq.worker_config.settings import PlanqSettings

PHASE_QUEUES = {phase: f"planq.{phase.value}" for phase in PlanPhase}
MAINTENANCE_QUEUE = "planq.maintenance"
RUNS_QUEUE = "planq.runs"  # recoverable runs: long scans, kept off the phase queues
ALL_QUEUES = [*PHASE_QUEUES.values(), MAINTENANCE_QUEUE, RUNS_QUEUE]


def celery_config(settings: PlanqSettings) -> dict[str, Any]:
    """The app's configuration; each line has a reason."""
    exchange = Exchange("planq", type="direct")
    return {
        "broker_url": settings.broker_url,
        # JSON only: pickle from a broker is code execution.
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "event_serializer": "json",
        # The ledger is the result store: AsyncResult reads the job's row, nothing is written.
        "result_backend": "planq.tasks.result_backend:LedgerBackend",
        "task_ignore_result": True,
        # A killed worker's job is redelivered; pickup's CAS stops a double run.
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        # Redis redelivers unacked messages after this: keep it above the longest job.
        "broker_transport_options": {"visibility_timeout": settings.visibility_timeout},
        "broker_connection_retry_on_startup": True,
        # Flower sees every job from its delivery on (received, started, ended). The
        # producer's task-sent event is off by default: the ledger already says "queued",
        # and the event is a second Redis publish on every delay() (~1 ms of its CPU).
        "worker_send_task_events": True,
        "task_send_sent_event": settings.task_sent_events,
        "task_track_started": True,
        # One queue per phase, so a fleet can dedicate workers to a phase.
        "task_default_queue": PHASE_QUEUES[PlanPhase.execute],
        "task_queues": [Queue(q, exchange, routing_key=q) for q in ALL_QUEUES],
        "task_default_exchange": "planq",
        "task_default_routing_key": PHASE_QUEUES[PlanPhase.execute],
        "task_routes": {
            **{
                f"planq.{p.value}_plan": {"queue": q, "routing_key": q}
                for p, q in PHASE_QUEUES.items()
            },
            "planq.maintenance.*": {"queue": MAINTENANCE_QUEUE, "routing_key": MAINTENANCE_QUEUE},
            "planq.runs.*": {"queue": RUNS_QUEUE, "routing_key": RUNS_QUEUE},
        },
        "worker_hijack_root_logger": False,
        "enable_utc": True,
        "timezone": "UTC",
        "beat_schedule": beat_schedule(settings),
    }


def beat_schedule(settings: PlanqSettings) -> dict[str, Any]:
    """Maintenance: each task is idempotent, so two beats running at once stay correct."""
    return {
        "planq-detect-stuck-jobs": {
            "task": "planq.maintenance.detect_stuck_jobs",
            "schedule": settings.stuck_check_interval,
        },
        "planq-cleanup-expired-jobs": {
            "task": "planq.maintenance.cleanup_expired_jobs",
            "schedule": settings.cleanup_interval,
        },
        # PostgreSQL's job partitions, a week ahead (a no-op on SQLite): hourly is ample.
        "planq-prepare-partitions": {
            "task": "planq.maintenance.prepare_partitions",
            "schedule": settings.cleanup_interval,
        },
        "planq-relay-dispatch": {
            "task": "planq.maintenance.relay_dispatch",
            "schedule": settings.relay_interval,
        },
        # The webhook outbox; without a signing secret nothing is ever written to it.
        **(
            {
                "planq-deliver-webhooks": {
                    "task": "planq.maintenance.deliver_webhooks",
                    "schedule": settings.webhook_interval,
                }
            }
            if settings.webhook_secret is not None
            else {}
        ),
    }
