"""Who is signed in: the dashboard's session cookie, and `whoami` for any client.

A token entered once in the dashboard becomes an HttpOnly, SameSite=Strict cookie: the
page's script never holds it again, and another site can neither read it nor make the
browser send it. Signing in checks the token as a bearer would be checked (auth.py) and
that the request comes from this server's own page (Origin), so no other site can sign a
browser in with a token of its own choosing.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, Field

from planq.cli.api.auth import (
    Forbidden,
    Unauthorized,
    auth_on,
    caller,
    principal_for,
    session_cookie,
)
from planq.cli.api.state import api_state
from planq.domain.principals import Principal

router = APIRouter(tags=["identity"])


class SignIn(BaseModel):
    """The token to keep in this browser's session cookie."""

    token: str = Field(min_length=1, max_length=200)


class WhoAmI(BaseModel):
    """The principal a request acts as, and what it may do."""

    name: str
    actor: str
    roles: list[str]
    auth: bool = Field(description="Whether this API asks for tokens (false: no-token mode).")


def _who(request: Request, principal: Principal) -> WhoAmI:
    return WhoAmI(
        name=principal.name,
        actor=principal.actor,
        roles=sorted(r.value for r in principal.roles),
        auth=auth_on(api_state(request).settings),
    )


def _from_this_page(request: Request) -> None:
    origin = request.headers.get("origin")
    here = f"{request.url.scheme}://{request.headers.get('host', '')}".lower()
    if origin is None or origin.lower() != here:
        raise Forbidden("cross_origin", "sign in from this server's own dashboard page")


@router.get("/api/whoami")
def whoami(request: Request, principal: Annotated[Principal, Depends(caller)]) -> WhoAmI:
    """Who this request acts as (its credential's principal) and its roles."""
    return _who(request, principal)


@router.post("/dashboard/session")
def sign_in(request: Request, response: Response, body: SignIn) -> WhoAmI:
    """Check the token and keep it in this browser's HttpOnly session cookie."""
    _from_this_page(request)
    if not auth_on(api_state(request).settings):
        raise Unauthorized("this API asks for no token (no-token mode): nothing to sign in to")
    principal = principal_for(request, body.token.strip())
    response.set_cookie(
        session_cookie(request.scope),
        body.token.strip(),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return _who(request, principal)


@router.post("/dashboard/session/end", status_code=204)
def sign_out(request: Request, response: Response) -> None:
    """Forget this browser's session cookie."""
    _from_this_page(request)
    response.delete_cookie(session_cookie(request.scope), path="/")
