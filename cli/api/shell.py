"""The dashboard's page shell: header, navigation, sections, the CSRF token, the UTC clock.

Every dashboard page is this shell around sections. A section names the fragment URL its
content comes from: when reads need no token, the content is rendered into the shell (the
page reads with JavaScript off); otherwise the page's script fetches it with the tab's token.
The script refreshes every section from its URL in place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from fastapi import Request
from fastapi.responses import HTMLResponse

from planq.cli.api import fragments
from planq.cli.api.assets import ASSETS
from planq.cli.api.auth import auth_on, reads_need_token
from planq.cli.api.csrf import CsrfTokens
from planq.cli.api.state import api_state
from planq.cli.api.templating import render
from planq.cli.context import Planq
from planq.cli.output import classify, one_line

NAV = (
    ("/dashboard", "Overview"),
    ("/dashboard/plans", "Plans"),
    ("/dashboard/jobs", "Jobs"),
    ("/dashboard/failed", "Failed jobs"),
    ("/dashboard/workers", "Workers"),
)


@dataclass(frozen=True)
class Section:
    """One titled box of a page: its fragment URL, how to render it here, its tools."""

    key: str
    title: str
    src: str  #: the fragment URL the script refreshes it from; "" for a static section
    render: Callable[[Planq], str] | None = None
    tools: str = ""  #: rendered HTML beside the title (a filter form), outside the refreshed part
    placeholder: str = "loading…"  #: the text shown until the content is there


def html(text: str, status_code: int = 200) -> HTMLResponse:
    """An HTML response no cache keeps (the ledger changes under it)."""
    return HTMLResponse(text, status_code=status_code, headers={"Cache-Control": "no-store"})


def inline(request: Request, content: Callable[[Planq], str]) -> str:
    """A section rendered into the shell; a failure is shown in place, never raised."""
    state = api_state(request)
    try:
        return content(state.ready())
    except Exception as exc:
        error = classify(exc)
        text = error.message if error is not None else f"internal error: {type(exc).__name__}"
        return fragments.error_box(state.redact(one_line(Exception(text))))


def csrf_cookie(request: Request) -> tuple[str, str] | None:
    """No-token mode: (cookie name, nonce) the page's CSRF token is bound to; else None.

    With a token configured the buttons send the bearer token, which no other site can attach.
    """
    if auth_on(api_state(request).settings):
        return None
    name = CsrfTokens.cookie_name(request.scope)
    return name, CsrfTokens.nonce(request.cookies.get(name))


def clock(now: datetime | None = None) -> str:
    """The header's clock: the server's time in UTC (the script keeps it current)."""
    return (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def content(request: Request, section: Section, locked: bool) -> str | None:
    """A section's content rendered inline when reads need no token; None: its placeholder."""
    return None if section.render is None or locked else inline(request, section.render)


def page(request: Request, title: str, sections: list[Section], active: str = "") -> HTMLResponse:
    """A whole dashboard page around sections."""
    settings = api_state(request).settings
    locked = reads_need_token(settings)
    csrf = csrf_cookie(request)
    response = html(
        render(
            "page.html",
            title=title,
            nav=NAV,
            active=active,
            flower=str(settings.flower_url or ""),
            locked=locked,
            csrf_token=api_state(request).csrf.token(csrf[1]) if csrf else "",
            clock=clock(),
            assets=ASSETS,
            sections=[(s, content(request, s, locked)) for s in sections],
        )
    )
    if csrf is not None:
        response.set_cookie(*csrf, httponly=True, samesite="strict", path="/")
    return response
