"""Bearer-token auth: PLANQ_API_TOKEN guards every write, and reads unless PLANQ_API_OPEN_READS.

With no token configured there is nothing to check: `planq api` then binds to loopback only
(see server.py), so only users of this machine reach it.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Request

from planq.cli.api.state import api_state


class Unauthorized(Exception):
    """The request needs the bearer token and did not carry the right one (401)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def configured_token(settings: Any) -> str | None:
    """The token from PLANQ_API_TOKEN, or None when unset or empty."""
    secret = getattr(settings, "api_token", None)
    value = secret.get_secret_value() if secret is not None else ""
    return value or None


def reads_need_token(settings: Any) -> bool:
    """Whether a read must carry the token (a token is set and reads are not open)."""
    return configured_token(settings) is not None and not bool(settings.api_open_reads)


def check_bearer(request: Request, token: str) -> None:
    """Unauthorized unless `Authorization: Bearer <token>` matches (constant-time compare)."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise Unauthorized("this route needs `Authorization: Bearer <PLANQ_API_TOKEN>`")
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise Unauthorized("the bearer token is not PLANQ_API_TOKEN")


def require_read(request: Request) -> None:
    """Dependency for routes that only read."""
    settings = api_state(request).settings
    token = configured_token(settings)
    if token is not None and not settings.api_open_reads:
        check_bearer(request, token)


def require_write(request: Request) -> None:
    """Dependency for routes that change the ledger or send a message."""
    token = configured_token(api_state(request).settings)
    if token is not None:
        check_bearer(request, token)
