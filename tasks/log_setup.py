"""Redact what a Celery process logs: the filter goes on its handlers as Celery sets them up."""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import after_setup_logger, after_setup_task_logger

from planq.domain.log_redaction import install_redacting_filter
from planq.domain.redaction import Redactor


def connect_log_redaction(redactor: Redactor) -> None:
    """On after_setup_logger/after_setup_task_logger (worker, beat), guard every handler.

    The root logger's handlers see every library's records (planq's, Celery's own
    "Task … raised" lines, redirected stdout); the task logger has handlers of its own.
    """

    def _guard(logger: Any = None, **_: Any) -> None:
        targets = [logger] if isinstance(logger, logging.Logger) else []
        targets.append(logging.getLogger())
        for target in targets:
            install_redacting_filter(target, redactor)

    # No dispatch_uid: one built from id(app) would collide with a collected app's (this
    # receiver does not hold its app), and a second call only re-installs equal filters.
    after_setup_logger.connect(_guard, weak=False)
    after_setup_task_logger.connect(_guard, weak=False)
