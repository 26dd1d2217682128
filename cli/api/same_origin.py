"""No-token mode's guard against other web pages: one ASGI middleware in front of every route.

Without PLANQ_API_TOKEN, `planq api` listens on loopback only, but the browser of anyone on
this machine is on loopback too, so any web page could drive it: a cross-site form post
(`text/plain`, no preflight) reaches a write, and a DNS-rebinding page (its own name made to
resolve to 127.0.0.1) reads the whole ledger. In that mode, therefore:

* every request's Host must name this server: 127.0.0.1, localhost or [::1] with the port
  it listens on. A rebinding page's requests carry the page's own name;
* a write from a browser (it carries Origin, Referer, a cookie, Sec-Fetch-* or a browser
  User-Agent, and a page cannot take those away) must be same-origin (Origin, else Referer,
  equal to http://<Host>) and carry the dashboard's CSRF token. A client with none of those
  marks (curl, a script) is a process of this machine, which no-token mode trusts like the
  CLI.

With a token configured the guard steps aside: writes need `Authorization: Bearer`, which a
page of another site cannot attach (auth.py).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from planq.cli.api.auth import auth_on
from planq.cli.api.csrf import CSRF_HEADER, CsrfTokens
from planq.cli.api.errors import error_body
from planq.cli.api.state import ApiState
from planq.cli.output import cut

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def server_port(scope: Scope) -> int | None:
    """The port this server listens on (from the socket, not from anything the client sent)."""
    server = scope.get("server")
    return int(server[1]) if server and server[1] is not None else None


def allowed_hosts(port: int | None) -> set[str]:
    """The Host values that name this server; the bare names too on port 80."""
    hosts = {f"{name}:{port}" for name in LOOPBACK_NAMES}
    return hosts | set(LOOPBACK_NAMES) if port == 80 else hosts


def from_browser(headers: Headers) -> bool:
    """Whether a browser sent this: it adds these headers itself, and a page cannot drop them."""
    if any(name in headers for name in ("origin", "referer", "cookie")):
        return True
    if any(name.startswith("sec-fetch-") for name in headers):
        return True
    return headers.get("user-agent", "").startswith("Mozilla/")


def origin_of(headers: Headers) -> str | None:
    """The origin the request came from: Origin, else Referer's scheme://host:port."""
    origin = headers.get("origin")
    if origin is not None:
        return origin.lower()
    referer = headers.get("referer")
    if referer is None:
        return None
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}".lower()


def refusal(scope: Scope, tokens: CsrfTokens) -> tuple[str, str] | None:
    """(error code, message) when no-token mode must refuse the request, else None."""
    connection = HTTPConnection(scope)
    headers = connection.headers
    port = server_port(scope)
    host = headers.get("host", "").lower()
    if host not in allowed_hosts(port):
        names = ", ".join(f"{name}:{port}" for name in LOOPBACK_NAMES)
        return "foreign_host", cut(
            f"Host {host!r} is not this server: without PLANQ_API_TOKEN only {names} are "
            "served (a page of another site, e.g. DNS rebinding, is refused)"
        )
    if scope.get("method", "GET") in SAFE_METHODS:
        return None
    here = f"{scope.get('scheme', 'http')}://{host}"
    came_from = origin_of(headers)
    if came_from is not None and came_from != here:
        return "cross_origin", cut(
            f"cross-site write refused: it comes from {came_from!r}, not {here} "
            "(set PLANQ_API_TOKEN and send it as a bearer token to write from elsewhere)"
        )
    if not from_browser(headers):
        return None
    nonce = connection.cookies.get(CsrfTokens.cookie_name(scope))
    if not tokens.valid(nonce, headers.get(CSRF_HEADER)):
        return "csrf", (
            f"a write from a browser needs the dashboard's CSRF token ({CSRF_HEADER} header "
            "and its cookie): reload the dashboard"
        )
    return None


class SameOriginGuard:
    """ASGI middleware: in no-token mode, refuse what refusal() names with a 403 JSON error."""

    def __init__(self, app: ASGIApp, state: ApiState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not auth_on(self.state.settings):
            refused = refusal(scope, self.state.csrf)
            if refused is not None:
                code, message = refused
                response = JSONResponse(error_body(code, message), status_code=403)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
