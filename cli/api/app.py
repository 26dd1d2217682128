"""The app factory: one Planq session per process, the routers, the error rules, the dashboard."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI

from planq.cli.api import (
    dashboard,
    dashboard_pages,
    metrics_route,
    routes_ledger,
    routes_pipeline,
    routes_runs,
    sessions,
    workers,
)
from planq.cli.api.access import install_access
from planq.cli.api.assets import install_assets
from planq.cli.api.auth import authorize
from planq.cli.api.docs import install_docs
from planq.cli.api.errors import install_error_handlers
from planq.cli.api.same_origin import SameOriginGuard
from planq.cli.api.state import ApiState
from planq.cli.context import Planq

logger = logging.getLogger("planq.api")


def create_api(session: Planq | None = None, settings: Any = None) -> FastAPI:
    """The admin API on session (default: a Planq from the PLANQ_* environment).

    Nothing connects here: the ledger and broker are reached on first use, so a service that
    is down answers 503 on the routes that need it instead of stopping the process.
    """
    planq = session or Planq()
    if settings is not None:
        planq.settings = settings  # a cached_property: set before anything is built
    state = ApiState(planq)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            planq.close()

    app = FastAPI(
        title="planq admin API",
        summary="Recoverable runs, plans and their phase jobs; the dashboard at /.",
        version="1",
        lifespan=lifespan,
        docs_url=None,  # served by install_docs, without a CDN
        redoc_url=None,
        dependencies=[Depends(authorize)],  # every route's role: access.py's one table
    )
    app.state.api = state
    install_error_handlers(app)
    app.add_middleware(SameOriginGuard, state=state)  # no-token mode: cross-site, rebinding
    app.include_router(routes_runs.router)
    app.include_router(routes_pipeline.router)  # before the ledger's /plans/{id}/{phase}
    app.include_router(routes_ledger.router)
    app.include_router(dashboard_pages.router)  # before the overview's /fragments/{name}
    app.include_router(workers.router)  # likewise
    app.include_router(dashboard.router)
    app.include_router(metrics_route.router)
    app.include_router(sessions.router)
    install_assets(app)
    install_docs(app)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, bool]:
        """Liveness only (no ledger or broker call), for container healthchecks."""
        return {"ok": True}

    install_access(app)  # after the last route: a write the table does not name stops here
    return app
