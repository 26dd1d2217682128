"""planq's Celery app: `celery -A worker_config worker|beat|flower` finds `app` here.

Producers: `from worker_config import execute_plan; execute_plan.delay(plan_id)`.

Importing this package reads no setting and opens nothing: the app is built from the
environment (PLANQ_*) the first time `app` or a phase task is asked for, so a bad value
is a ConfigurationError (one line naming the variable) at that point, never an exit at
import; a web app that imports planq keeps running and can report it.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from planq.domain.errors import ConfigurationError

if TYPE_CHECKING:
    from planq.worker_config.bootstrap import bootstrap
    from planq.worker_config.settings import PlanqSettings, load_settings

#: Exit status of `celery -A worker_config …` refused for an invalid setting (as the CLI's).
BAD_SETTING_EXIT = 2
_LAZY = {
    "bootstrap": "planq.worker_config.bootstrap",
    "PlanqSettings": "planq.worker_config.settings",
    "load_settings": "planq.worker_config.settings",
}
_TASKS = {
    "strategize_plan": "planq.strategize_plan",
    "execute_plan": "planq.execute_plan",
    "apply_plan": "planq.apply_plan",
    "run_plan": "planq.run_plan",
}
_lock = threading.Lock()
_built: dict[str, Any] = {}


def get_app() -> Any:
    """The process's default planq app, built from the environment on first use."""
    from planq.worker_config.bootstrap import bootstrap

    with _lock:
        if "app" not in _built:
            _built["app"] = bootstrap()
        return _built["app"]


def _celery_command_app() -> Any:
    """The app for `celery -A worker_config`: a bad setting is one line and exit 2.

    Only when Celery's own command line is loading it (its `find_app` is on the stack);
    anyone else gets the ConfigurationError, never a SystemExit.
    """
    try:
        return get_app()
    except ConfigurationError as exc:
        if not _loaded_by_celery_command():
            raise
        sys.stderr.write(f"planq: invalid setting: {exc}\n")
        sys.stderr.flush()
        raise SystemExit(BAD_SETTING_EXIT) from None


def _loaded_by_celery_command() -> bool:
    suffix = os.path.join("celery", "app", "utils.py")
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "find_app" and frame.f_code.co_filename.endswith(suffix):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def __getattr__(name: str) -> Any:
    """`app`, the phase tasks and `bootstrap`, imported or built lazily (PEP 562)."""
    if name == "app":
        return _celery_command_app()
    if name in _TASKS:
        return get_app().tasks[_TASKS[name]]
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'planq.worker_config' has no attribute {name!r}")


__all__ = [
    "PlanqSettings",
    "app",
    "apply_plan",
    "bootstrap",
    "execute_plan",
    "get_app",
    "load_settings",
    "run_plan",
    "strategize_plan",
]
