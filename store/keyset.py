"""The listings' keyset cursor: rows strictly older than a given row, newest first.

Jobs and plans are both listed by (created_at, id) descending from an index on that pair;
`after=<id>` pages by key, so a page costs the same however deep it is and rows inserted
meanwhile never shift it. One statement: the cursor row's created_at is looked up inside it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, literal, select, tuple_
from sqlalchemy.orm import aliased
from sqlalchemy.sql.elements import ColumnElement


def older_than(model: Any, id_name: str, after: str) -> ColumnElement[bool]:
    """WHERE (created_at, <id>) < (that row's created_at, after); none if it is gone."""
    cursor = aliased(model)
    wanted = after.upper()
    at = select(cursor.created_at).where(getattr(cursor, id_name) == wanted)
    key = tuple_(at.scalar_subquery(), literal(wanted, String()))
    return tuple_(model.created_at, getattr(model, id_name)) < key
