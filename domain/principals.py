"""Who may act: named principals, their roles, and the tokens that stand for them.

A token is 32 random bytes behind a recognisable prefix (`planq_`), so secret scanners and
the redactor know one when they see it. The ledger keeps only its SHA-256: a fast hash is
right for a 256-bit random secret (nothing to brute-force), and a lookup by hash compares
nothing secret in the database; the one comparison of secrets left (the environment's
`PLANQ_API_TOKEN`) is constant-time (hmac.compare_digest).
"""

from __future__ import annotations

import getpass
import hashlib
import re
import secrets
import socket
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from planq.domain.clock import utcnow
from planq.domain.errors import PrincipalError

TOKEN_PREFIX = "planq_"
#: The principal PLANQ_API_TOKEN stands for: today's deployments keep working as admin.
DEFAULT_PRINCIPAL = "default"
#: No-token mode's principal: a process of this machine on loopback, trusted like the CLI.
LOCAL_PRINCIPAL = "local"
MAX_EXPIRY_DAYS = 3650
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class Role(StrEnum):
    """What a principal may do; every route names the one it needs (cli/api/access.py)."""

    read = "read"  #: every GET
    operate = "operate"  #: run, cancel, retry, trigger
    approve = "approve"  #: approve and reject at a gate
    admin = "admin"  #: purge, tokens, everything


def parse_roles(values: object) -> frozenset[Role]:
    """Roles named by a user; PrincipalError for none or an unknown one."""
    if isinstance(values, str):
        values = [v for v in values.replace(",", " ").split() if v]
    if not isinstance(values, list | tuple | set | frozenset) or not values:
        raise PrincipalError("a principal needs at least one role: read, operate, approve, admin")
    roles: set[Role] = set()
    for value in values:
        name = str(value).strip().lower()
        if name not in Role.__members__:
            names = ", ".join(r.value for r in Role)
            raise PrincipalError(f"unknown role {str(value)[:40]!r}: one of {names}")
        roles.add(Role(name))
    return frozenset(roles)


def check_name(name: object) -> str:
    """A principal's name: lower-case letters, digits, '.', '_' or '-', at most 64."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise PrincipalError(
            f"a principal's name is 1-64 of a-z 0-9 . _ - starting with a letter or digit, "
            f"got {str(name)[:70]!r}"
        )
    if name in (DEFAULT_PRINCIPAL, LOCAL_PRINCIPAL):
        raise PrincipalError(f"{name!r} is reserved (PLANQ_API_TOKEN's and no-token mode's)")
    return name


def new_token() -> str:
    """A fresh token: the prefix and 32 random bytes, URL-safe."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the ledger keeps of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def expiry(days: object, now: datetime | None = None) -> datetime | None:
    """When a token made now for `days` expires (None: never); PrincipalError if not 1..3650."""
    if days is None:
        return None
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_EXPIRY_DAYS:
        raise PrincipalError(f"--expires is a whole number of days, 1..{MAX_EXPIRY_DAYS}")
    return (now or utcnow()) + timedelta(days=days)


class Principal(BaseModel):
    """A named identity with roles; what the ledger lists (never its token)."""

    model_config = ConfigDict(frozen=True)

    name: str
    roles: frozenset[Role]
    created_at: datetime = Field(default_factory=utcnow)
    last_used_at: datetime | None = None
    expires_at: datetime | None = None
    revoked_at: datetime | None = None

    @property
    def actor(self) -> str:
        """How the audit trail names what this principal did over the API."""
        return f"api:{self.name}"

    def may(self, role: Role) -> bool:
        """Whether it holds role: admin holds every role, and every role may read."""
        return Role.admin in self.roles or role in self.roles or role is Role.read

    def active(self, now: datetime | None = None) -> bool:
        """Not revoked and not expired."""
        at = now or utcnow()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > at)

    def as_cli_dict(self) -> dict[str, object]:
        """A stable, JSON-ready view (no token: the ledger has none to show)."""
        return {
            "name": self.name,
            "roles": sorted(r.value for r in self.roles),
            "created_at": self.created_at.isoformat(),
            "last_used_at": self.last_used_at.isoformat() if self.last_used_at else None,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
        }


def cli_actor() -> str:
    """The audit trail's name for the CLI on the ledger: the OS user and host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name in a bare container
        user = "unknown"
    return f"cli:{user}@{socket.gethostname() or 'localhost'}"
