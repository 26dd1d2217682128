"""PostgreSQL's time partitions of the ledger's big tables: created ahead, dropped whole.

`async_jobs` is `PARTITION BY RANGE (job_id)` (migration 0007) and `plan_events` by
`event_id` (0011). Both ids are ULIDs whose first 10 characters encode their creation time
in milliseconds and sort by it, so a range of ids bounded by two encoded instants is the
set of rows created in that interval, and the primary key stays the id with no statement
changed. One partition per INTERVAL (a day, aligned to UTC midnight), AHEAD of them
created in advance (by the beat task `planq.maintenance.prepare_partitions` and at every
`planq db upgrade`), and a DEFAULT partition for ids outside every range (see
docs/architecture.md, "Time partitions"). Each table is one `PartitionedTable`: what
differs between them is only which rows a partition must keep. SQLite has no partitions:
its TTL cleanup stays the batched delete.
"""

from __future__ import annotations

import re
import time
from bisect import bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from planq.store.database import as_outage, is_transient
from planq.store.models import FILLFACTOR, LIVE, TERMINAL

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
_BOUND = re.compile(r"FROM \((MINVALUE|'\w+')\) TO \('(\w+)'\)")
_IN_LIVE = ", ".join(f"'{s}'" for s in LIVE)
_IN_TERMINAL = ", ".join(f"'{s}'" for s in TERMINAL)


@dataclass(frozen=True)
class PartitionedTable:
    """One range-partitioned table: its name, its ULID key, and which partitions must stay.

    `keeps` is an SQL condition over `{table}` and `:cutoff` that holds while the partition
    still has a row the TTL must not take (index probes, not scans).
    """

    parent: str
    key: str
    keeps: str
    fillfactor: int = 100
    #: Tables its partitions' foreign keys point at: a detach or a drop locks them too,
    #: first, in the order every transition takes them (plans, then plan_events).
    references: tuple[str, ...] = ()

    @property
    def default(self) -> str:
        """The partition for ids outside every range."""
        return f"{self.parent}_default"

    @property
    def prefix(self) -> str:
        """Every range partition's name starts with it (a detached one's too)."""
        return f"{self.parent}_p"


#: A partition of jobs stays while it holds a live job or one that ended at or after cutoff.
JOBS = PartitionedTable(
    "async_jobs",
    "job_id",
    f"EXISTS (SELECT 1 FROM {{table}} WHERE status IN ({_IN_LIVE})) "
    f"OR EXISTS (SELECT 1 FROM {{table}} WHERE status IN ({_IN_TERMINAL}) "
    "AND finished_at >= :cutoff)",
    fillfactor=FILLFACTOR,
)
#: Append-only (so no fillfactor): a partition of events stays while one is recent.
EVENTS = PartitionedTable(
    "plan_events",
    "event_id",
    "EXISTS (SELECT 1 FROM {table} WHERE at >= :cutoff)",
    references=("plans",),
)
TABLES = (JOBS, EVENTS)


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
    """One attached range partition: its table and its [low, high) id bounds ("" = MINVALUE)."""

    name: str
    low: str
    high: str

    @property
    def ends(self) -> datetime:
        """Rows created from here on belong to a later partition."""
        return prefix_moment(self.high)


def is_partitioned(conn: Connection, table: PartitionedTable = JOBS) -> bool:
    """Whether the table is the partitioned one (PostgreSQL, at its migration or later)."""
    if conn.dialect.name != "postgresql":
        return False
    kind = conn.execute(
        text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:t)"), {"t": table.parent}
    )
    return kind.scalar() == "p"


def list_partitions(conn: Connection, table: PartitionedTable = JOBS) -> list[Partition]:
    """The range partitions attached now, oldest first (the DEFAULT partition is not one)."""
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:t)"
        ),
        {"t": table.parent},
    )
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound or "")
        if match:
            low = "" if match.group(1) == "MINVALUE" else match.group(1).strip("'")
            found.append(Partition(name, low, match.group(2)))
    return sorted(found, key=lambda p: p.low)


def _start_of(moment: datetime, interval: timedelta) -> datetime:
    return _EPOCH + ((moment - _EPOCH) // interval) * interval


def _create(conn: Connection, table: PartitionedTable, start: datetime, end: datetime) -> str:
    """Create one partition, moving into it any row the DEFAULT partition holds for its range.

    Built standalone then attached, so rows already in DEFAULT for the range (ids from a
    time no partition covered) move with it instead of making the creation fail.
    """
    name = f"{table.prefix}{start:%Y%m%d_%H%M}"
    bounds = {"low": ulid_prefix(start), "high": ulid_prefix(end)}
    conn.execute(
        text(
            f"CREATE TABLE {name} (LIKE {table.parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            + (f" WITH (fillfactor = {table.fillfactor})" if table.fillfactor < 100 else "")
        )
    )
    if conn.execute(text("SELECT to_regclass(:t)"), {"t": table.default}).scalar() is not None:
        _move(
            conn, table, table.default, name, f"{table.key} >= :low AND {table.key} < :high", bounds
        )
    conn.execute(
        text(
            f"ALTER TABLE {table.parent} ATTACH PARTITION {name} "
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
    table: PartitionedTable = JOBS,
) -> list[str]:
    """Create the table's missing partitions from `behind` intervals before now to `ahead` after.

    An interval that overlaps an existing partition (made with another interval) is left
    to the DEFAULT partition rather than refused. Returns the names created.
    """
    existing = list_partitions(conn, table)
    current = _start_of(now, interval)
    created = []
    for k in range(-behind, ahead + 1):
        start = current + k * interval
        low, high = ulid_prefix(start), ulid_prefix(start + interval)
        if any(p.low < high and low < p.high for p in existing):
            continue
        created.append(_create(conn, table, start, start + interval))
    return created


def _move(
    conn: Connection, table: PartitionedTable, source: str, target: str, where: str, bounds: Any
) -> None:
    """Move the rows of source where holds into target, every column the table has now.

    The columns are read from the catalogue, not the models: a migration runs against the
    schema of its own revision, and a later one may have added columns the models name.
    """
    names = conn.execute(
        text(
            "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute "
            "WHERE attrelid = to_regclass(:t) AND attnum > 0 AND NOT attisdropped"
        ),
        {"t": table.parent},
    ).scalar_one()
    conn.execute(
        text(
            f"WITH moved AS (DELETE FROM {source} WHERE {where} RETURNING {names}) "
            f"INSERT INTO {target} ({names}) SELECT * FROM moved"
        ),
        bounds,
    )


def set_aside(conn: Connection, table: PartitionedTable, indexes: list[str]) -> str | None:
    """A migration's first step: rename the unpartitioned table out of the parent's way.

    An empty table (a new ledger) is dropped: there is nothing to keep. Otherwise its
    indexes (and primary key) are renamed `<parent>_adopted_<name>` so the new parent can
    take the names, and its new name is returned for `partition_from`.
    """
    old = f"{table.parent}_unpartitioned"
    conn.execute(text(f"ALTER TABLE {table.parent} RENAME TO {old}"))
    if not conn.execute(text(f"SELECT EXISTS (SELECT 1 FROM {old})")).scalar():
        conn.execute(text(f"DROP TABLE {old}"))
        return None
    for name in indexes:
        conn.execute(text(f"ALTER INDEX IF EXISTS {name} RENAME TO {table.parent}_adopted_{name}"))
    return old


def partition_from(
    conn: Connection, table: PartitionedTable, old: str | None, now: datetime
) -> None:
    """A migration's last step, once the partitioned parent exists: its partitions.

    The DEFAULT partition; then the table set aside, if any, adopted in place as the
    partition of every id up to tonight (no row copied, no index rebuilt) and day
    partitions from tomorrow on; or, for a new ledger, day partitions from yesterday on.
    """
    conn.execute(text(f"CREATE TABLE {table.default} PARTITION OF {table.parent} DEFAULT"))
    if table.fillfactor < 100:
        conn.execute(text(f"ALTER TABLE {table.default} SET (fillfactor = {table.fillfactor})"))
    if old is not None:
        _adopt(conn, table, old, now)
    create_partitions(conn, now, behind=0 if old else 1, table=table)
    conn.execute(text(f"ANALYZE {table.parent}"))


def _adopt(conn: Connection, table: PartitionedTable, old: str, now: datetime) -> str:
    """Make `old` (the unpartitioned table, set aside) the partition of every id up to tonight.

    No row is copied and no index built: its range runs from MINVALUE to the end of today,
    so today's writes go on landing in it and nothing moves but the odd id of a later day
    (a client's clock ahead), which goes to the DEFAULT partition (the partitions created
    after take their rows from it). ATTACH reads the table once, under the migration's
    lock, to check every id is in range, and attaches its indexes, primary key and
    foreign key as the parent's matching ones (an index the parent has and it lacks is
    built). It is dropped whole once the TTL has passed its end.
    """
    end = _start_of(now, INTERVAL) + INTERVAL
    bound = ulid_prefix(end)
    _move(conn, table, old, table.parent, f"{table.key} >= :bound", {"bound": bound})
    name = f"{table.prefix}_before_{end:%Y%m%d}"
    conn.execute(text(f"ALTER TABLE {old} RENAME TO {name}"))
    conn.execute(
        text(
            f"ALTER TABLE {table.parent} ATTACH PARTITION {name} "
            f"FOR VALUES FROM (MINVALUE) TO ('{bound}')"
        )
    )
    return name


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
    """The door for partitions ahead (beat, `planq db upgrade`), of every partitioned table."""
    created: list[str] = []
    if engine.dialect.name != "postgresql":
        return created
    with engine.begin() as conn:
        conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
        conn.execute(_ONE_AT_A_TIME)  # two beats, or beat and an upgrade: one creates
        for table in TABLES:
            if is_partitioned(conn, table):
                created += create_partitions(conn, now or datetime.now(UTC), table=table)
    return created


def _keeps_rows(conn: Connection, table: PartitionedTable, name: str, cutoff: datetime) -> bool:
    """Whether the partition `name` holds a row the TTL must not take yet (index probes)."""
    return bool(
        conn.execute(text(f"SELECT {table.keeps.format(table=name)}"), {"cutoff": cutoff}).scalar()
    )


def _lock_in_order(
    conn: Connection, table: PartitionedTable, target: str, referenced_mode: str
) -> None:
    """Lock what a detach or a drop needs, in the ledger's own order, or give up in 2 s.

    A partition's foreign key makes its detach take SHARE ROW EXCLUSIVE on the table it
    references, and its drop ACCESS EXCLUSIVE; a transition writes `plans` before
    `plan_events`. Taking the referenced table first, then `target` (the parent, ONLY: every
    statement through the parent takes it first; or the detached table), keeps that order.
    The job path's writes (claim, finish, heartbeat, progress) name a partition directly
    (`PartitionMap`) and lock only it (and `plans`); a detach waits for them on the
    partition, and takes only partitions without a live job, which none of them changes.
    """
    conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
    for referenced in table.references:
        conn.execute(text(f"LOCK TABLE {referenced} IN {referenced_mode} MODE"))
    conn.execute(text(f"LOCK TABLE {target} IN ACCESS EXCLUSIVE MODE"))


def _detach(
    engine: Engine, table: PartitionedTable, partition: Partition, cutoff: datetime
) -> bool:
    """Detach the partition if it still holds no row the TTL must keep.

    The locks first, in the order the ledger's transactions take them (`_lock_in_order`),
    so none deadlocks with us; then the re-check and the DETACH under them: milliseconds.
    Not CONCURRENTLY: PostgreSQL refuses that while a DEFAULT partition exists. A lock not
    granted within LOCK_TIMEOUT skips the partition until the next cleanup.
    """
    try:
        with engine.begin() as conn:
            _lock_in_order(conn, table, f"ONLY {table.parent}", "SHARE ROW EXCLUSIVE")
            attached = list_partitions(conn, table)
            if partition not in attached or _keeps_rows(conn, table, partition.name, cutoff):
                return False
            conn.execute(text(f"ALTER TABLE {table.parent} DETACH PARTITION {partition.name}"))
            return True
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) in ("55P03", "40P01"):  # lock timeout, deadlock
            return False
        raise


def _drop_detached(engine: Engine, table: PartitionedTable) -> int:
    """Count and drop every detached partition (one left by a crash included); the rows.

    Only tables named as planq names partitions; one whose locks are not granted in time
    waits for the next cleanup.
    """
    dropped = 0
    with engine.connect() as conn:
        names = conn.execute(
            text(
                "SELECT c.relname FROM pg_class c WHERE c.relkind = 'r' AND c.relname ~ :p "
                "AND c.relnamespace = current_schema()::regnamespace AND NOT c.relispartition"
            ),
            {"p": f"^{table.prefix}(\\d{{8}}_\\d{{4}}|_before_\\d{{8}})$"},
        ).scalars()
        orphans = list(names)
    for name in orphans:
        try:
            with engine.begin() as conn:  # the lock: a second cleanup counts nothing twice
                _lock_in_order(conn, table, name, "ACCESS EXCLUSIVE")
                dropped += int(conn.execute(text(f"SELECT count(*) FROM {name}")).scalar() or 0)
                conn.execute(text(f"DROP TABLE {name}"))
        except DBAPIError as exc:
            # gone (the other cleanup's), or its locks not granted in time: the next cleanup
            if getattr(exc.orig, "sqlstate", None) not in ("42P01", "55P03", "40P01"):
                raise
    return dropped


@_outage_is_typed()
def drop_expired_partitions(
    engine: Engine, cutoff: datetime, table: PartitionedTable = JOBS
) -> int:
    """Drop every partition of rows created before cutoff that holds none the TTL keeps.

    A partition with a row to keep (for jobs: a live or a recent one) stays, the batched
    delete that follows takes its old rows; so does the DEFAULT partition. Returns the
    rows dropped, counted on the detached tables: exactly the rows that left the ledger
    (0 where the table is not partitioned: SQLite, or PostgreSQL before its migration).
    """
    if engine.dialect.name != "postgresql":
        return 0
    with engine.connect() as conn:
        if not is_partitioned(conn, table):
            return 0
        candidates = [p for p in list_partitions(conn, table) if p.ends <= cutoff]
        candidates = [p for p in candidates if not _keeps_rows(conn, table, p.name, cutoff)]
    for partition in candidates:
        _detach(engine, table, partition, cutoff)
    return _drop_detached(engine, table)


class PartitionMap:
    """Which attached partition of a table holds a key: one-id statements go straight there.

    A statement naming the partitioned parent is planned at every execution (PostgreSQL
    prunes a custom plan to the key's partition while planning; a generic plan would lock
    every partition at each run), while one naming the partition is a plain table's,
    prepared and planned once. Measured on the claim at 38 partitions: 0.35 ms of server
    CPU through the parent, 0.15 ms straight to the partition (docs/benchmarks.md).

    The map is read from the catalogue (one statement) when first asked and again once it
    is `max_age` seconds old. A key it does not cover (the DEFAULT partition, a newer
    range) goes to the parent, which is always right. A partition is never re-bounded, and
    one is detached and dropped only once it holds no live row, so a stale map can only
    name a table that is gone or holds nothing for a live key: the caller asks the parent
    then (`forget` after an error).
    """

    def __init__(self, table: PartitionedTable = JOBS, max_age: float = 600.0) -> None:
        self.table = table
        self.max_age = max_age
        self._map: tuple[list[str], list[Partition]] = ([], [])
        self._read_at: float | None = None
        self._off = False

    def home(self, conn: Connection, key: str) -> str:
        """The table to name for `key`: its partition if the map knows it, else the parent."""
        if self._off:
            return self.table.parent
        read_at = self._read_at  # once: another thread may forget() meanwhile
        if read_at is None or time.monotonic() - read_at > self.max_age:
            ranges = list_partitions(conn, self.table)
            self._map, self._read_at = ([p.low for p in ranges], ranges), time.monotonic()
        lows, ranges = self._map
        at = bisect_right(lows, key) - 1
        if at >= 0 and key < ranges[at].high:
            return ranges[at].name
        return self.table.parent

    def forget(self) -> None:
        """Read the catalogue again at the next key (a statement found a partition gone)."""
        self._read_at = None

    def give_up(self) -> None:
        """Name the parent from now on (this role may not write the partitions directly)."""
        self._off = True

    @property
    def given_up(self) -> bool:
        """Whether `give_up` was called: every key's table is the parent now."""
        return self._off


def partitioned_parent(name: str) -> str | None:
    """The table whose partition (or detached one) `name` is; None for a table of the models."""
    for table in TABLES:
        if name == table.default or name.startswith(table.prefix):
            return table.parent
    return None


def compare_filters(dialect: str) -> dict[str, Any]:
    """Alembic's filters so the models compare equal to a migrated database of `dialect`.

    Partitions are the partitioned table's storage, not tables of their own; an index
    the models build on one dialect only (`ddl_if`) is not expected on the other.
    """

    def include_name(name: str | None, type_: str, _parents: Any) -> bool:
        return not (type_ == "table" and name is not None and partitioned_parent(name))

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
