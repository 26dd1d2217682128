"""The admin API's principals on SQL: a handful of rows, found by their token's hash."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError

from planq.domain.clock import utcnow
from planq.domain.errors import PrincipalError
from planq.domain.principals import Principal, parse_roles
from planq.store.database import OnDatabase
from planq.store.models import PrincipalModel as M


def _domain(row: M) -> Principal:
    return Principal(
        name=row.name,
        roles=parse_roles(row.roles),
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
    )


class SqlPrincipalStore(OnDatabase):
    """PrincipalStore on the ledger's Database.

    Each lookup reads the row, so a revoke or an expiry is seen by every API process at its
    next request (no cache to go stale).
    """

    def add(self, principal: Principal, token_hash: str) -> None:
        """Insert; a name (or, vanishingly, a hash) already there is a PrincipalError."""
        row = M(
            name=principal.name,
            token_hash=token_hash,
            roles=" ".join(sorted(r.value for r in principal.roles)),
            created_at=principal.created_at,
            expires_at=principal.expires_at,
        )
        with self.db.session() as s:
            try:
                with s.begin_nested():
                    s.add(row)
            except IntegrityError:
                raise PrincipalError(
                    f"a principal named {principal.name!r} exists (revoke it, or pick another name)"
                ) from None

    def find(self, token_hash: str) -> Principal | None:
        """One read by the unique hash index."""
        with self.db.session() as s:
            row = s.scalars(select(M).where(M.token_hash == token_hash)).first()
            return _domain(row) if row is not None else None

    def get(self, name: str) -> Principal | None:
        """One read by name."""
        with self.db.session() as s:
            row = s.get(M, name)
            return _domain(row) if row is not None else None

    def list(self, limit: int = 500) -> list[Principal]:
        """By name, bounded."""
        with self.db.session() as s:
            return [_domain(r) for r in s.scalars(select(M).order_by(M.name).limit(limit))]

    def revoke(self, name: str) -> bool:
        """Revoked from now on, for every process (each request reads the row)."""
        stmt = update(M).where(M.name == name, M.revoked_at.is_(None)).values(revoked_at=utcnow())
        with self.db.session() as s:
            return bool(s.execute(stmt).rowcount)  # type: ignore[attr-defined]

    def touch(self, name: str, at: datetime, every: float) -> None:
        """last_used_at, at most once per `every` seconds (a read-heavy API writes rarely)."""
        stale = at - timedelta(seconds=every)
        stmt = (
            update(M)
            .where(M.name == name, or_(M.last_used_at.is_(None), M.last_used_at < stale))
            .values(last_used_at=at)
        )
        with self.db.session() as s:
            s.execute(stmt)

    def rotate(self, name: str, token_hash: str) -> bool:
        """A new token for an active principal; the old one is refused from now on."""
        stmt = update(M).where(M.name == name, M.revoked_at.is_(None)).values(token_hash=token_hash)
        with self.db.session() as s:
            return bool(s.execute(stmt).rowcount)  # type: ignore[attr-defined]
