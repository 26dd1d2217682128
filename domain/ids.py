"""ULID helpers: job ids double as Celery task ids, so they must sort by time and be unique."""

from __future__ import annotations

import re
from uuid import UUID

from ulid import ULID

from planq.domain.errors import InvalidIdError


def new_id() -> str:
    """A fresh ULID string (time-ordered, so ledger listings sort by creation)."""
    return str(ULID())


#: What `ULID.from_str` accepts: Crockford base32 in either case, a timestamp within 48 bits
#: (first character 0-7). A regex, not a decode: ids are checked on every hot-path call.
_ULID_RE = re.compile("[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}")


def is_ulid(value: object) -> bool:
    """Whether value is a canonical 26-character ULID string."""
    return isinstance(value, str) and len(value) == 26 and _ULID_RE.fullmatch(value) is not None


def require_ulid(what: str, value: object) -> str:
    """Return value if it is a ULID, else raise InvalidIdError naming what it was meant to be."""
    if not is_ulid(value):
        raise InvalidIdError(what, value)
    assert isinstance(value, str)
    return value.upper()


def ulid_of_uuid(value: UUID) -> str:
    """The ULID with a UUID's 128 bits: the spec's Uuid ids name the same id this way."""
    return str(ULID.from_bytes(value.bytes))
