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
from html import escape

from fastapi import Request
from fastapi.responses import HTMLResponse

from planq.cli.api import fragments
from planq.cli.api.auth import auth_on, reads_need_token
from planq.cli.api.csrf import CsrfTokens
from planq.cli.api.state import api_state
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
    tools: str = ""  #: HTML beside the title (a filter form), outside the refreshed part
    placeholder: str = '<p class="muted">loading…</p>'


def html(text: str, status_code: int = 200) -> HTMLResponse:
    """An HTML response no cache keeps (the ledger changes under it)."""
    return HTMLResponse(text, status_code=status_code, headers={"Cache-Control": "no-store"})


def inline(request: Request, render: Callable[[Planq], str]) -> str:
    """A section rendered into the shell; a failure is shown in place, never raised."""
    state = api_state(request)
    try:
        return render(state.ready())
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
    """The header's clock: the server's time in UTC, labelled (the script keeps it current)."""
    at = (now or datetime.now(UTC)).astimezone(UTC)
    return f'<span id="clock" class="muted">{at.strftime("%Y-%m-%d %H:%M:%S")} UTC</span>'


def render_section(request: Request, section: Section, locked: bool) -> str:
    """A section's box: title, tools and its content (inline when reads need no token)."""
    if section.render is None or locked:
        inner = section.placeholder
    else:
        inner = inline(request, section.render)
    src = f' data-src="{escape(section.src)}"' if section.src else ""
    return (
        f'<section><div class="section-head"><h2>{escape(section.title)}</h2>{section.tools}'
        f'</div><div id="{escape(section.key)}"{src}>{inner}</div></section>'
    )


def page(request: Request, title: str, sections: list[Section], active: str = "") -> HTMLResponse:
    """A whole dashboard page around sections."""
    settings = api_state(request).settings
    locked = reads_need_token(settings)
    flower = str(settings.flower_url or "")
    nav = "".join(
        f'<a href="{href}"{" aria-current=page" if href == active else ""}>{label}</a>'
        for href, label in NAV
    )
    flower_link = f'<a href="{escape(flower)}" rel="noopener">Flower</a>' if flower else ""
    body = "".join(render_section(request, s, locked) for s in sections)
    hidden = "" if locked else " hidden"
    csrf = csrf_cookie(request)
    token = api_state(request).csrf.token(csrf[1]) if csrf else ""
    meta = f'<meta name="planq-csrf" content="{token}">\n' if csrf else ""
    response = html(
        f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{meta}<title>{escape(title)}</title>
<link rel="stylesheet" href="/dashboard/assets/dashboard.css"></head>
<body data-refresh-ms="2000">
<header><h1><a href="/dashboard">planq</a></h1><nav>{nav}{flower_link}<a href="/docs">API</a></nav>
<span id="token-form"{hidden}><input id="token" type="password" placeholder="planq_… token"
 autocomplete="off"> <button type="button" class="act" id="save-token">sign in</button></span>
<span id="who" class="muted"></span> <button type="button" class="act" id="sign-out"
 hidden>sign out</button>
{clock()}<span id="updated" class="muted"></span><span id="notice" class="notice"
 role="status"></span></header>
<main><div id="auth-error"></div>{body}</main>
<script src="/dashboard/assets/dashboard.js"></script>
</body></html>"""
    )
    if csrf is not None:
        response.set_cookie(*csrf, httponly=True, samesite="strict", path="/")
    return response
