"""Who is calling: the principal a request's credential stands for, and its role's check.

One app-wide dependency (`authorize`) reads the role the route needs from the access table
(access.py) and the caller's credential: `Authorization: Bearer <token>` (FastAPI's
HTTPBearer reads it and declares it in the OpenAPI document), or the
dashboard's session cookie (HttpOnly, SameSite=Strict: the token entered once in the
page). A token is PLANQ_API_TOKEN (the admin principal `default`, compared in constant
time) or a principal's from `planq tokens create`, found by its hash on every request, so
a revoke or an expiry refuses it at once in every API process. 401 for no, a wrong, a
revoked or an expired token; 403 for a principal without the role.

With neither PLANQ_API_TOKEN nor PLANQ_API_REQUIRE_TOKEN there is nothing to check:
`planq api` then binds to loopback only (server.py) and the same-origin guard stands in
front (same_origin.py); the caller is the principal `local`, trusted like the CLI.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from planq.cli.api.access import role_for
from planq.cli.api.state import api_state
from planq.domain.clock import utcnow
from planq.domain.principals import (
    DEFAULT_PRINCIPAL,
    LOCAL_PRINCIPAL,
    Principal,
    Role,
    token_hash,
)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: A principal's last use is written at most this often (seconds): reads stay reads.
TOUCH_EVERY = 60.0
DEFAULT = Principal(name=DEFAULT_PRINCIPAL, roles=frozenset({Role.admin}))
LOCAL = Principal(name=LOCAL_PRINCIPAL, roles=frozenset({Role.admin}))
ANONYMOUS = Principal(name="anonymous", roles=frozenset({Role.read}))
#: Reads `Authorization: Bearer <token>` and names the scheme in the OpenAPI document (so
#: /docs' "Authorize" sends it); auto_error off: a missing one may still be the cookie's.
BEARER = HTTPBearer(auto_error=False, description="PLANQ_API_TOKEN or a principal's token")
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]


class Unauthorized(Exception):
    """The request carries no credential, or one that stands for nobody now (401)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Forbidden(Exception):
    """A known principal may not do this (403), with the typed error's code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def configured_token(settings: Any) -> str | None:
    """The token from PLANQ_API_TOKEN, or None when unset or empty."""
    secret = getattr(settings, "api_token", None)
    value = secret.get_secret_value() if secret is not None else ""
    return value or None


def auth_on(settings: Any) -> bool:
    """Whether requests must carry a credential (PLANQ_API_TOKEN or PLANQ_API_REQUIRE_TOKEN)."""
    return configured_token(settings) is not None or bool(settings.api_require_token)


def reads_need_token(settings: Any) -> bool:
    """Whether a read must carry a credential (auth is on and reads are not open)."""
    return auth_on(settings) and not bool(settings.api_open_reads)


def session_cookie(scope: Any) -> str:
    """The dashboard session's cookie, named by the port (cookies ignore ports)."""
    server = scope.get("server")
    return f"planq_session_{server[1] if server else 0}"


def _credential(
    request: Request, bearer: HTTPAuthorizationCredentials | None
) -> tuple[str, str] | None:
    """("bearer" | "cookie", token) from the request, or None."""
    if bearer is not None and bearer.credentials.strip():
        return "bearer", bearer.credentials.strip()
    if request.headers.get("authorization", "").strip():  # another scheme, or no token
        raise Unauthorized("the Authorization header must be `Bearer <token>`")
    cookie = request.cookies.get(session_cookie(request.scope))
    return ("cookie", cookie) if cookie else None


def principal_for(request: Request, token: str) -> Principal:
    """The active principal token stands for; Unauthorized otherwise."""
    state = api_state(request)
    env = configured_token(state.settings)
    if env is not None and hmac.compare_digest(token.encode(), env.encode()):
        return DEFAULT
    store = state.ready().ledger.principals
    found: Principal | None = store.find(token_hash(token))
    if found is None:
        raise Unauthorized("the bearer token is not PLANQ_API_TOKEN nor any principal's")
    now = utcnow()
    if found.revoked_at is not None:
        raise Unauthorized(f"the token of {found.name!r} was revoked")
    if not found.active(now):
        raise Unauthorized(f"the token of {found.name!r} expired")
    store.touch(found.name, now, TOUCH_EVERY)
    return found


def _same_origin(request: Request) -> bool:
    """A cookie's write must come from this server's own page (the Origin it names)."""
    origin = request.headers.get("origin")
    here = f"{request.url.scheme}://{request.headers.get('host', '')}".lower()
    return origin is not None and origin.lower() == here


def authorize(request: Request, bearer: Bearer) -> None:
    """App dependency: the route's role, the caller's principal (request.state.principal)."""
    route = request.scope.get("route")
    role = role_for(request.method, getattr(route, "path", request.url.path))
    settings = api_state(request).settings
    if not auth_on(settings):
        request.state.principal = LOCAL
        return
    if role is None:
        return
    credential = _credential(request, bearer)
    if credential is None:
        if role is Role.read and settings.api_open_reads:
            request.state.principal = ANONYMOUS
            return
        raise Unauthorized(
            "this route needs `Authorization: Bearer <token>`: PLANQ_API_TOKEN or a "
            "principal's (`planq tokens create`)"
        )
    via, token = credential
    principal = principal_for(request, token)
    if via == "cookie" and request.method not in SAFE_METHODS and not _same_origin(request):
        raise Forbidden("cross_origin", "a write with the dashboard's session must come from it")
    if not principal.may(role):
        held = ", ".join(sorted(r.value for r in principal.roles))
        raise Forbidden(
            "forbidden", f"{principal.name} ({held}) may not do this: it needs role {role.value}"
        )
    request.state.principal = principal


def caller(request: Request) -> Principal:
    """Dependency: who this request acts as (set by authorize)."""
    principal: Principal = getattr(request.state, "principal", LOCAL)
    return principal
