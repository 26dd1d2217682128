"""planq's Celery app: `celery -A worker_config worker|beat|flower` finds `app` here.

Producers: `from worker_config import execute_plan; execute_plan.delay(plan_id)`.
"""

from __future__ import annotations

from domain.errors import ConfigurationError
from worker_config.app import create_app
from worker_config.settings import PlanqSettings, load_settings

try:
    app = create_app()
except ConfigurationError as exc:  # one clear line, not a traceback
    raise SystemExit(f"planq: invalid setting: {exc}") from None

strategize_plan = app.tasks["planq.strategize_plan"]
execute_plan = app.tasks["planq.execute_plan"]
apply_plan = app.tasks["planq.apply_plan"]

__all__ = [
    "PlanqSettings",
    "app",
    "apply_plan",
    "create_app",
    "execute_plan",
    "load_settings",
    "strategize_plan",
]
