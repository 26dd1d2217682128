"""The dashboard's CSRF tokens, minted by the page and checked by the no-token guard."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from typing import Any

CSRF_HEADER = "X-Planq-CSRF"
_NONCE = re.compile(r"^[A-Za-z0-9_-]{32}$")


class CsrfTokens:
    """The dashboard's CSRF tokens: HMAC(a secret of this process, the tab's cookie nonce).

    A signed double-submit cookie: the page embeds the token for the nonce its cookie holds
    (SameSite=Strict, HttpOnly), and a write must bring both. Another site can neither read
    the token nor, with SameSite=Strict, make the browser send the cookie; a restarted API has
    a new secret, so its old pages must be reloaded.
    """

    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)

    @staticmethod
    def cookie_name(scope: Mapping[str, Any]) -> str:
        """The cookie of the server serving scope, named by its port.

        Cookies ignore ports: two APIs on one host must not overwrite each other's.
        """
        server = scope.get("server")
        return f"planq_csrf_{server[1] if server else 0}"

    @staticmethod
    def nonce(existing: str | None) -> str:
        """The tab's nonce: the cookie's if it has one, so other open tabs keep working."""
        if existing is not None and _NONCE.match(existing):
            return existing
        return secrets.token_urlsafe(24)

    def token(self, nonce: str) -> str:
        """The token the page embeds for nonce."""
        return hmac.new(self._secret, nonce.encode(), hashlib.sha256).hexdigest()

    def valid(self, nonce: str | None, token: str | None) -> bool:
        """Whether token was made here for nonce (constant-time compare)."""
        if not nonce or not token or not _NONCE.match(nonce):
            return False
        return hmac.compare_digest(self.token(nonce).encode(), token.encode())
