"""The API process's one Planq session (settings, app, runtime), shared by every request."""

from __future__ import annotations

import logging
import threading
from typing import Any

from fastapi import Request

from planq.cli.api.celery_view import CeleryAsker
from planq.cli.api.csrf import CsrfTokens
from planq.cli.context import Planq


class ApiState:
    """The session, the settings the routes read and the CSRF secret; the runtime built once.

    A Planq's parts are cached_property: built on first use. Requests run on a thread pool, so
    the first ones would race to build the runtime (two ledger pools); the lock prevents it,
    and a failed build (ledger down at start) is simply tried again by the next request.
    """

    def __init__(self, session: Planq) -> None:
        from planq.domain.log_redaction import install_redacting_filter

        self.session = session
        self.settings: Any = session.settings
        self._lock = threading.Lock()
        # The API process's log handlers (the root's: planq's and the libraries' records)
        # redact with the session's one redactor, as a worker's do.
        install_redacting_filter(logging.getLogger(), session.redactor)
        self.csrf = CsrfTokens()  # one secret per API process: its pages' tokens
        self.celery = CeleryAsker()  # the Workers section's bounded, shared broadcast

    def ready(self) -> Planq:
        """The session with its runtime built (raises what building it raised)."""
        if "runtime" not in self.session.__dict__:
            with self._lock:
                _ = self.session.runtime
        return self.session

    def redact(self, text: str) -> str:
        """Redact text as the ledger does: the session's one redactor (built-in + settings)."""
        redactor: Any = self.session.redactor
        return str(redactor(text))


def api_state(request: Request) -> ApiState:
    """The ApiState of the app serving this request."""
    state: ApiState = request.app.state.api
    return state


def session(request: Request) -> Planq:
    """Dependency: the ready Planq session."""
    return api_state(request).ready()
