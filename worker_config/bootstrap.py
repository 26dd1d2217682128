"""The composition root: `bootstrap(settings)` -> a planq app (Cosmic Python's bootstrap).

Every entry point starts here, once per process: `celery -A planq.worker_config`
(`worker_config.get_app`), the CLI and its HTTP API (`cli/context.py`), the Python client,
the embedded demo, pytest-celery's app. What it builds is the app with its service holder
(`app.planq`, `tasks/runtime.py`): each process's `Runtime` — the doors `ledger` (every job
write), `lifecycle` (plans), `runs`, `publish`, `redactor` — comes from it, and again after
a fork, in one place.
"""

from __future__ import annotations

from celery import Celery
from sqlalchemy.engine import make_url

from planq.tasks.maintenance import register_maintenance_tasks
from planq.tasks.phase_tasks import register_phase_tasks
from planq.tasks.recoverable import install_recoverable_runs
from planq.tasks.runtime import RuntimeConfig, attach_runtime
from planq.tasks.signals import connect_signals
from planq.worker_config.celery_config import celery_config
from planq.worker_config.preflight import preflight
from planq.worker_config.settings import PlanqSettings, load_settings
from planq.worker_config.telemetry import configure_tracing


def runtime_config(settings: PlanqSettings) -> RuntimeConfig:
    """What each process needs to reach the ledger; SQLite ledgers migrate themselves."""
    return RuntimeConfig(
        database_url=settings.database_url,
        worker=settings.worker_config(),
        executors=dict(settings.executors),
        default_executor=settings.default_executor,
        redactor=settings.redactor(),
        auto_migrate=make_url(settings.database_url).get_backend_name() == "sqlite",
        metrics_port=settings.metrics_port,
        stuck_check_interval=settings.stuck_check_interval,
        run_stale_after=settings.run_stale_after,
        webhooks=settings.webhooks(),
        approval_self=settings.approval_self,
    )


def bootstrap(
    settings: PlanqSettings | None = None, *, app: Celery | None = None, main: str = "planq"
) -> Celery:
    """A planq app: configured, with planq's tasks, its signals and its service holder.

    No connection is opened here. Pass `app` to make an existing app a planq app (a test
    framework's app, an app of one's own); otherwise a new one named `main` is built.
    Settings default to the environment (`PLANQ_*`).
    """
    settings = settings or load_settings()
    configure_tracing()  # the OTel SDK, once per process, if OTEL_* asks (a no-op otherwise)
    app = app if app is not None else Celery(main, set_as_current=False)
    app.conf.update(celery_config(settings))
    config = runtime_config(settings)
    attach_runtime(app, config)  # each process builds its Runtime from it on first use
    register_phase_tasks(app)
    register_maintenance_tasks(app)
    install_recoverable_runs(
        app, ledger_consistency_interval=settings.ledger_consistency_interval or None
    )
    # Worker start and stop, in one place; `celery worker` refuses to start without a ledger.
    connect_signals(app, preflight=lambda: preflight(config))
    return app
