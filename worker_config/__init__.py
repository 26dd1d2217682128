"""planq's Celery app: `celery -A worker_config worker|beat|flower` finds `app` here.

Producers: `from worker_config import execute_plan; execute_plan.delay(plan_id)`.

Importing this package reads no setting and opens nothing: the app is built from the
environment (PLANQ_*) the first time `app` or a phase task is asked for, so a bad value
is a ConfigurationError (one line naming the variable) at that point, never an exit at
import; a web app that imports planq keeps running and can report it.
"""

from __future__ import annotations

import threading
from typing import Any

from worker_config.factory import create_app
from worker_config.settings import PlanqSettings, load_settings

_TASKS = {
    "strategize_plan": "planq.strategize_plan",
    "execute_plan": "planq.execute_plan",
    "apply_plan": "planq.apply_plan",
}
_lock = threading.Lock()
_built: dict[str, Any] = {}


def get_app() -> Any:
    """The process's default planq app, built from the environment on first use."""
    with _lock:
        if "app" not in _built:
            _built["app"] = create_app()
        return _built["app"]


def __getattr__(name: str) -> Any:
    """`app` and the phase tasks, built lazily (PEP 562)."""
    if name == "app":
        return get_app()
    if name in _TASKS:
        return get_app().tasks[_TASKS[name]]
    raise AttributeError(f"module 'worker_config' has no attribute {name!r}")


__all__ = [
    "PlanqSettings",
    "app",
    "apply_plan",
    "create_app",
    "execute_plan",
    "get_app",
    "load_settings",
    "strategize_plan",
]
