"""Who may call what: the one table of the role every route needs, and its check.

GETs read (`read`) unless listed as public (pages that carry no ledger data; the static
files under /dashboard/assets and /docs/assets are mounts, outside every route's check);
every other method must be listed: `install_access` refuses to build an app with a write
route this table does not name, so a new write can never fall through unguarded. The
OpenAPI document shows each operation's role (`x-planq-role`, and in its description),
and the dashboard greys a button whose route's role the signed-in principal lacks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from planq.domain.principals import Role

READ_METHODS = frozenset({"GET", "HEAD"})
#: (method, path) -> the role it needs; None: public (no ledger data, no write).
ROUTE_ROLES: dict[tuple[str, str], Role | None] = {
    # pages, assets and health: the shell fetches its sections with the caller's credential
    ("GET", "/"): None,
    ("GET", "/dashboard"): None,
    ("GET", "/dashboard/plans"): None,
    ("GET", "/dashboard/jobs"): None,
    ("GET", "/dashboard/failed"): None,
    ("GET", "/dashboard/workers"): None,
    ("GET", "/dashboard/plans/{plan_id}"): None,
    ("GET", "/dashboard/jobs/{job_id}"): None,
    ("GET", "/dashboard/runs/{run_id}"): None,
    ("GET", "/healthz"): None,
    ("GET", "/docs"): None,
    ("GET", "/api/whoami"): Role.read,
    # a dashboard session: the token in the body is the credential (checked there)
    ("POST", "/dashboard/session"): None,
    ("POST", "/dashboard/session/end"): None,
    # operate: run, queue, cancel, retry, trigger
    ("POST", "/api/ledger/plans"): Role.operate,
    ("POST", "/api/ledger/plans/{plan_id}/{phase}"): Role.operate,
    ("POST", "/api/ledger/plans/{plan_id}/run"): Role.operate,
    ("POST", "/api/ledger/plans/{plan_id}/cancel"): Role.operate,
    ("POST", "/api/ledger/jobs/{job_id}/cancel"): Role.operate,
    ("POST", "/api/ledger/jobs/{job_id}/retry"): Role.operate,
    ("POST", "/api/ledger/stuck"): Role.operate,
    ("POST", "/api/admin/jobs/{name}/trigger"): Role.operate,
    ("POST", "/api/admin/jobs/{name}/cancel"): Role.operate,
    # approve: decide at a gate
    ("POST", "/api/ledger/plans/{plan_id}/approve"): Role.approve,
    ("POST", "/api/ledger/plans/{plan_id}/reject"): Role.approve,
    # admin: what deletes
    ("POST", "/api/ledger/cleanup"): Role.admin,
    ("POST", "/api/admin/jobs/runs/purge"): Role.admin,
}


class UnlistedRouteError(RuntimeError):
    """A write route the access table does not name (a bug: it would be unguarded)."""


def role_for(method: str, path: str) -> Role | None:
    """The role (method, route path) needs; None if public. A GET not listed reads."""
    key = (method.upper(), path)
    if key in ROUTE_ROLES:
        return ROUTE_ROLES[key]
    if key[0] in READ_METHODS:
        head = ("GET", path)
        return ROUTE_ROLES.get(head, Role.read)
    raise UnlistedRouteError(f"{method} {path} is not in planq.cli.api.access.ROUTE_ROLES")


@cache
def _templates() -> list[tuple[re.Pattern[str], Role | None]]:
    """The write routes as patterns, literal segments first (run before {phase})."""
    writes = [(p, r) for (m, p), r in ROUTE_ROLES.items() if m not in READ_METHODS]
    writes.sort(key=lambda item: item[0].count("{"))
    return [(re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", p) + "$"), r) for p, r in writes]


def role_of_url(url: str) -> Role | None:
    """The role a POST to this concrete URL needs (the dashboard's buttons)."""
    path = url.split("?", 1)[0]
    for pattern, role in _templates():
        if pattern.match(path):
            return role
    return Role.admin  # unknown: only an admin's button stays lit


def _routes(app: FastAPI) -> Iterator[APIRoute]:
    def walk(routes: Any) -> Iterator[APIRoute]:
        for route in routes:
            if isinstance(route, APIRoute):
                yield route
            elif hasattr(route, "routes"):
                yield from walk(route.routes)

    yield from walk(app.routes)


def install_access(app: FastAPI) -> None:
    """Check every route against the table, and show each one's role in the OpenAPI doc."""
    for route in _routes(app):
        for method in route.methods or ():
            role_for(method, route.path)  # UnlistedRouteError: refuse to build the app
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = build()
        for path, operations in schema.get("paths", {}).items():
            for method, operation in operations.items():
                role = role_for(method, path)
                name = role.value if role is not None else "public"
                operation["x-planq-role"] = name
                if role is None:  # auth.py's HTTPBearer is app-wide: public needs none
                    operation.pop("security", None)
                operation["description"] = (
                    f"**Role: `{name}`.** {operation.get('description', '')}".strip()
                )
        schema["info"]["description"] = roles_table_markdown()
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def roles_table_markdown() -> str:
    """The roles and what each may do (the OpenAPI document's description shows it)."""
    lines = [
        "Every request carries `Authorization: Bearer <token>` (a principal's, from "
        "`planq tokens create`, or PLANQ_API_TOKEN, the admin principal `default`). "
        "401: no or a wrong, revoked or expired token; 403: a principal without the role.",
        "",
        "| role | may |",
        "|---|---|",
        "| `read` | every GET (every role includes it) |",
        "| `operate` | run a pipeline, queue a phase, cancel, retry, trigger, detect stuck |",
        "| `approve` | approve and reject at a gate (never the gate of a pipeline it ran) |",
        "| `admin` | everything, including cleanup and purge |",
    ]
    return "\n".join(lines)
