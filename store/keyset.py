"""Keyset paging: the rows past a cursor row in a listing ordered by (key, id).

Why: an offset page reads and drops every row before it, so the 500th page of a large
listing costs 500 pages. A cursor (the last id of the page before) turns the next page into
one index range read, whatever its depth. The cursor's key is looked up inside the same
statement, so a page is still one statement; an id that names no row gives an empty page.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, literal, select, tuple_
from sqlalchemy.orm import aliased


def past_cursor(model: Any, key: str, ident: str, cursor: str, *, descending: bool) -> Any:
    """WHERE (key, id) comes after the cursor row's in the listing's order (desc or asc).

    Ids are ULIDs, stored upper-case: a cursor typed in lower case still finds its row.
    """
    cursor = cursor.upper()
    row = aliased(model)
    at = select(getattr(row, key)).where(getattr(row, ident) == cursor).scalar_subquery()
    mark = tuple_(at, literal(cursor, String()))
    pair = tuple_(getattr(model, key), getattr(model, ident))
    return pair < mark if descending else pair > mark


__all__ = ["past_cursor"]
