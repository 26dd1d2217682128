"""PostgreSQL's time partitions of async_jobs: created ahead, dropped whole once expired.

`async_jobs` is `PARTITION BY RANGE (job_id)`. A job id is a ULID whose first 10
characters encode its creation time in milliseconds and sort by it, so a range of ids
bounded by two encoded instants is the set of jobs created in that interval, and the
primary key stays `job_id` with no statement changed. One partition per INTERVAL (a
day, aligned to UTC midnight), AHEAD of them created in advance (by the beat task
`planq.maintenance.prepare_partitions` and at every `planq db upgrade`), and a DEFAULT
partition for ids outside every range (see docs/architecture.md, "Time partitions").
SQLite has no partitions: its TTL cleanup stays the batched delete.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from planq.store.database import as_outage, is_transient
from planq.store.models import FILLFACTOR, LIVE, TERMINAL, AsyncJobModel

PARENT = "async_jobs"
DEFAULT = "async_jobs_default"
PREFIX = "async_jobs_p"
INTERVAL = timedelta(days=1)
#: Partitions kept ready beyond the current one: a week of beat outages before a job id
#: lands in the DEFAULT partition.
AHEAD = 7
#: How long the detach waits for the parent's lock before giving the partition up until
#: the next cleanup (it waits behind running statements, and the queue waits behind it).
LOCK_TIMEOUT = "2s"
#: Serialises partition creation (released at commit); 23 namespaces planq's locks.
_ONE_AT_A_TIME = text("SELECT pg_advisory_xact_lock(23, 0)")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_BOUND = re.compile(r"FROM \('(\w+)'\) TO \('(\w+)'\)")
_COLUMNS = ", ".join(AsyncJobModel.__table__.columns.keys())
_IN_LIVE = ", ".join(f"'{s}'" for s in LIVE)
_IN_TERMINAL = ", ".join(f"'{s}'" for s in TERMINAL)


def ulid_prefix(moment: datetime) -> str:
    """The 10 characters that begin every ULID minted at this millisecond."""
    ms = (moment - _EPOCH) // timedelta(milliseconds=1)
    return "".join(_CROCKFORD[(ms >> (5 * i)) & 31] for i in reversed(range(10)))


def prefix_moment(prefix: str) -> datetime:
    """The instant a ULID's first 10 characters encode."""
    ms = 0
    for char in prefix[:10]:
        ms = ms * 32 + _CROCKFORD.index(char)
    return _EPOCH + timedelta(milliseconds=ms)


@dataclass(frozen=True)
class Partition:
    """One attached range partition: its table and its [low, high) job id bounds."""

    name: str
    low: str
    high: str

    @property
    def ends(self) -> datetime:
        """Jobs created from here on belong to a later partition."""
        return prefix_moment(self.high)


def is_partitioned(conn: Connection) -> bool:
    """Whether async_jobs is the partitioned table (PostgreSQL at 0007 or later)."""
    if conn.dialect.name != "postgresql":
        return False
    kind = conn.execute(
        text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:t)"), {"t": PARENT}
    )
    return kind.scalar() == "p"


def list_partitions(conn: Connection) -> list[Partition]:
    """The range partitions attached now, oldest first (the DEFAULT partition is not one)."""
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": PARENT},
    )
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound or "")
        if match:
            found.append(Partition(name, match.group(1), match.group(2)))
    return sorted(found, key=lambda p: p.low)


def _start_of(moment: datetime, interval: timedelta) -> datetime:
    return _EPOCH + ((moment - _EPOCH) // interval) * interval


def _create(conn: Connection, start: datetime, end: datetime) -> str:
    """Create one partition, moving into it any row the DEFAULT partition holds for its range.

    Built standalone then attached, so rows already in DEFAULT for the range (ids from a
    time no partition covered) move with it instead of making the creation fail.
    """
    name = f"{PREFIX}{start:%Y%m%d_%H%M}"
    bounds = {"low": ulid_prefix(start), "high": ulid_prefix(end)}
    conn.execute(
        text(
            f"CREATE TABLE {name} (LIKE {PARENT} INCLUDING DEFAULTS INCLUDING CONSTRAINTS) "
            f"WITH (fillfactor = {FILLFACTOR})"
        )
    )
    if conn.execute(text("SELECT to_regclass(:t)"), {"t": DEFAULT}).scalar() is not None:
        conn.execute(
            text(
                f"WITH moved AS (DELETE FROM {DEFAULT} WHERE job_id >= :low AND job_id < :high "
                f"RETURNING {_COLUMNS}) INSERT INTO {name} ({_COLUMNS}) SELECT * FROM moved"
            ),
            bounds,
        )
    conn.execute(
        text(
            f"ALTER TABLE {PARENT} ATTACH PARTITION {name} "
            f"FOR VALUES FROM ('{bounds['low']}') TO ('{bounds['high']}')"
        )
    )
    return name


def create_partitions(
    conn: Connection,
    now: datetime,
    *,
    behind: int = 1,
    ahead: int = AHEAD,
    interval: timedelta = INTERVAL,
) -> list[str]:
    """Create the missing partitions from `behind` intervals before now to `ahead` after.

    An interval that overlaps an existing partition (made with another interval) is left
    to the DEFAULT partition rather than refused. Returns the names created.
    """
    existing = list_partitions(conn)
    current = _start_of(now, interval)
    created = []
    for k in range(-behind, ahead + 1):
        start = current + k * interval
        low, high = ulid_prefix(start), ulid_prefix(start + interval)
        if any(p.low < high and low < p.high for p in existing):
            continue
        created.append(_create(conn, start, start + interval))
    return created


@contextmanager
def _outage_is_typed() -> Iterator[None]:
    """A transient failure is the ledger's LedgerUnavailableError, as from every store call."""
    try:
        yield
    except DBAPIError as exc:
        if is_transient(exc):
            raise as_outage(exc) from exc
        raise


@_outage_is_typed()
def prepare_partitions(engine: Engine, now: datetime | None = None) -> list[str]:
    """The door for partitions ahead (beat, `planq db upgrade`): a no-op unless partitioned."""
    with engine.begin() as conn:
        if not is_partitioned(conn):
            return []
        conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        conn.execute(_ONE_AT_A_TIME)  # two beats, or beat and an upgrade: one creates
        return create_partitions(conn, now or datetime.now(UTC))


def _keeps_rows(conn: Connection, table: str, cutoff: datetime) -> bool:
    """Whether the table holds a live row or one that ended at or after cutoff (2 probes)."""
    return bool(
        conn.execute(
            text(
                f"SELECT EXISTS (SELECT 1 FROM {table} WHERE status IN ({_IN_LIVE})) "
                f"OR EXISTS (SELECT 1 FROM {table} WHERE status IN ({_IN_TERMINAL}) "
                "AND finished_at >= :cutoff)"
            ),
            {"cutoff": cutoff},
        ).scalar()
    )


def _detach(engine: Engine, partition: Partition, cutoff: datetime) -> bool:
    """Detach the partition if every row is still terminal and ended before cutoff.

    The parent's lock first (ONLY the parent: every statement on async_jobs takes it
    first, so none runs meanwhile and none deadlocks with us), then the re-check and the
    DETACH under it: milliseconds. Not CONCURRENTLY: PostgreSQL refuses that while a
    DEFAULT partition exists. A lock not granted within LOCK_TIMEOUT skips the partition.
    """
    try:
        with engine.begin() as conn:
            conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
            conn.execute(text(f"LOCK TABLE ONLY {PARENT} IN ACCESS EXCLUSIVE MODE"))
            if partition not in list_partitions(conn) or _keeps_rows(conn, partition.name, cutoff):
                return False
            conn.execute(text(f"ALTER TABLE {PARENT} DETACH PARTITION {partition.name}"))
            return True
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) in ("55P03", "40P01"):  # lock timeout, deadlock
            return False
        raise


def _drop_detached(engine: Engine) -> int:
    """Count and drop every detached partition (one left by a crash included); the rows."""
    dropped = 0
    with engine.connect() as conn:
        names = conn.execute(
            text(
                "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' AND c.relname LIKE :p "
                "AND c.relnamespace = current_schema()::regnamespace AND NOT c.relispartition"
            ),
            {"p": f"{PREFIX}%"},
        ).scalars()
        orphans = list(names)
    for name in orphans:
        try:
            with engine.begin() as conn:  # the lock: a second cleanup counts nothing twice
                conn.execute(text(f"LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE"))
                dropped += int(conn.execute(text(f"SELECT count(*) FROM {name}")).scalar() or 0)
                conn.execute(text(f"DROP TABLE {name}"))
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != "42P01":  # gone: the other cleanup's
                raise
    return dropped


@_outage_is_typed()
def drop_expired_partitions(engine: Engine, cutoff: datetime) -> int:
    """Drop every partition of jobs created before cutoff whose rows all ended before it.

    A partition with a live or a recent row stays (the batched delete that follows takes
    its old rows); so does the DEFAULT partition. Returns the rows dropped, counted on
    the detached tables: exactly the rows that left the ledger.
    """
    with engine.connect() as conn:
        candidates = [p for p in list_partitions(conn) if p.ends <= cutoff]
        candidates = [p for p in candidates if not _keeps_rows(conn, p.name, cutoff)]
    for partition in candidates:
        _detach(engine, partition, cutoff)
    return _drop_detached(engine)


def is_partition_table(name: str) -> bool:
    """A partition (or a detached one): not a table of the models."""
    return name == DEFAULT or name.startswith(PREFIX)


def compare_filters(dialect: str) -> dict[str, Any]:
    """Alembic's filters so the models compare equal to a migrated database of `dialect`.

    Partitions are the partitioned table's storage, not tables of their own; an index
    the models build on one dialect only (`ddl_if`) is not expected on the other.
    """

    def include_name(name: str | None, type_: str, _parents: Any) -> bool:
        return not (type_ == "table" and name is not None and is_partition_table(name))

    def include_object(obj: Any, _name: Any, _type: str, _reflected: bool, _to: Any) -> bool:
        only = getattr(obj, "_ddl_if", None)
        return only is None or only.dialect in (None, dialect)

    return {"include_name": include_name, "include_object": include_object}


def ulid_prefix_sql(moment: str) -> str:
    """`ulid_prefix` in SQL, of the timestamptz expression `moment` (fills: bench, tests)."""
    ms = f"floor(extract(epoch FROM {moment}) * 1000)::bigint"
    return (
        f"(SELECT string_agg(substr('{_CROCKFORD}', (({ms} >> (5 * (9 - k))) & 31)::int + 1, 1),"
        " '' ORDER BY k) FROM generate_series(0, 9) AS k)"
    )
