"""Redact what a Celery process logs: the filter goes on its handlers as Celery sets them up."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from celery.signals import after_setup_logger, after_setup_task_logger

from domain.log_redaction import install_redacting_filter
from domain.redaction import Redactor


def connect_log_redaction(app: Celery, redactor: Redactor) -> None:
    """On after_setup_logger/after_setup_task_logger (worker, beat), guard every handler.

    The root logger's handlers see every library's records (planq's, Celery's own
    "Task … raised" lines, redirected stdout); the task logger has handlers of its own.
    """

    def _guard(logger: Any = None, **_: Any) -> None:
        targets = [logger] if isinstance(logger, logging.Logger) else []
        targets.append(logging.getLogger())
        for target in targets:
            install_redacting_filter(target, redactor)

    after_setup_logger.connect(_guard, weak=False, dispatch_uid=f"planq-logs-{id(app)}")
    after_setup_task_logger.connect(_guard, weak=False, dispatch_uid=f"planq-tasklogs-{id(app)}")
