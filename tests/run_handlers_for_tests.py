"""A recoverable job a worker process loads with `--include tests.run_handlers_for_tests`.

Its handler raises with a site-specific token, so the run ends Paused and the task's
result (Flower's `result`, from task-succeeded) carries the error: redacted, or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planq.domain.runs import RunStore
from planq.tasks.recoverable import register_recoverable_job
from planq.worker_config import get_app
from tests.executors_for_tests import CUSTOM_TOKEN

PANICS = "redaction_panics_in_worker"


class PanicsWithToken:
    """Raises with a custom-pattern token: the run ends Paused, the error in its result."""

    name = PANICS

    def run_resumable(
        self, store: RunStore, args: Mapping[str, Any], resume_cursor: bytes | None
    ) -> Any:
        raise RuntimeError(f"upstream refused {CUSTOM_TOKEN}")


register_recoverable_job(get_app(), PanicsWithToken())
