"""PostgreSQL's time-partitioned plan_events (migration 0011, store/partitions.py `EVENTS`).

The upgrade adopts the old table as the partition of every event before today: no row is
copied and no index rebuilt (the table's storage is the same file before and after), and
a plan's timeline reads the same. TTL cleanup drops a day of events whose every event
passed the cutoff, the adopted partition included, and deletes the rest in batches,
counting both; a day holding a recent event stays. The downgrade keeps every row.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from planq.domain.pipeline import EventKind, PlanEvent
from planq.domain.plans import Plan
from planq.domain.ports import PlanStore
from planq.store import Database, sql_ledger
from planq.store.migrate import downgrade, upgrade
from planq.store.partitions import (
    EVENTS,
    create_partitions,
    list_partitions,
    ulid_prefix,
    ulid_prefix_sql,
)
from tests.support import (
    add_plan_at_any_revision,
    create_pg_database,
    drop_pg_database,
    wait_for,
)

pytestmark = pytest.mark.postgres

DAY = timedelta(days=1)
BEFORE = "0010_gate_index"
#: `n` events of one plan, one every `step` back from :newest, each id minted at its `at`.
FILL = """
INSERT INTO plan_events (event_id, plan_id, at, kind, phase, job_id, actor, note)
SELECT prefix || lpad(upper(to_hex(i)), 16, '0'), :plan_id, at,
       (ARRAY['queued', 'started', 'succeeded'])[1 + i % 3], 'execute', NULL,
       CASE WHEN i % 7 = 0 THEN 'ops' END, CASE WHEN i % 11 = 0 THEN 'note ' || i END
  FROM (SELECT i, :newest - i * :step AS at FROM generate_series(0, :n - 1) AS i) AS made,
       LATERAL (SELECT {prefix} AS prefix) AS p
"""
#: Every column of every event.
FINGERPRINT = (
    "SELECT count(*), md5(string_agg(t::text, '|' ORDER BY event_id)) FROM plan_events AS t"
)


def _fill(db: Database, plan_id: str, newest: datetime, n: int, step: timedelta) -> None:
    sql = FILL.replace("{prefix}", ulid_prefix_sql("at"))
    with db.engine.begin() as conn:
        conn.execute(text(sql), {"plan_id": plan_id, "newest": newest, "n": n, "step": step})


def _one(db: Database, sql: str, **params: object) -> object:
    with db.engine.connect() as conn:
        return conn.execute(text(sql), params).scalar()


def _fingerprint(db: Database) -> tuple[object, ...]:
    with db.engine.connect() as conn:
        return tuple(conn.execute(text(FINGERPRINT)).one())


def _home(db: Database, event_id: str) -> str:
    sql = "SELECT tableoid::regclass::text FROM plan_events WHERE event_id = :id"
    return str(_one(db, sql, id=event_id))


def _ledger_with_a_plan(url: str, revision: str) -> tuple[Database, PlanStore, Plan]:
    """The database at revision, with one plan for the events to belong to."""
    upgrade(url, revision)
    db = Database(url)
    _, plans = sql_ledger(db)
    plan = Plan.with_steps(["a"])
    add_plan_at_any_revision(db, plan)
    return db, plans, plan


@pytest.fixture
def url() -> Iterator[str]:
    made = create_pg_database()
    try:
        yield made
    finally:
        drop_pg_database(made)


def test_the_upgrade_adopts_the_old_table_and_the_downgrade_keeps_every_event(url: str) -> None:
    db, plans, plan = _ledger_with_a_plan(url, BEFORE)
    now = datetime.now(UTC)
    _fill(db, plan.plan_id, now, 30_000, timedelta(seconds=60))  # ~21 days, today's too
    ahead = now + 3 * DAY  # a producer whose clock runs ahead: 5 ids of a later day
    _fill(db, plan.plan_id, ahead, 5, timedelta(seconds=1))
    before = _fingerprint(db)
    storage = _one(db, "SELECT pg_relation_filenode('plan_events')")
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC)
    tonight = ulid_prefix(midnight + DAY)

    upgrade(url)

    assert _one(db, "SELECT relkind FROM pg_class WHERE relname = 'plan_events'") == "p"
    assert _fingerprint(db) == before
    with db.engine.connect() as conn:
        parts = list_partitions(conn, EVENTS)
    adopted = parts[0]
    assert adopted.low == "" and adopted.high == tonight  # every id up to the end of today
    assert _one(db, f"SELECT pg_relation_filenode('{adopted.name}')") == storage  # not copied
    assert _one(db, f"SELECT count(*) FROM {adopted.name}") == 30_000
    assert _one(db, f"SELECT count(*) FROM {EVENTS.default}") == 0
    assert _home(db, ulid_prefix(ahead) + "0".rjust(16, "0")) == f"{EVENTS.prefix}" + (
        f"{datetime(ahead.year, ahead.month, ahead.day):%Y%m%d}_0000"
    )  # moved out, to its day's partition
    assert parts[1].low == tonight and len(parts) == 1 + 7  # made ahead, tomorrow on
    adopted_indexes = _one(
        db,
        "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE c.relname LIKE 'plan_events_adopted_%' AND c.relkind = 'i'",
    )
    assert adopted_indexes == 3  # its primary key and two indexes, now the parent's
    timeline = plans.list_events(plan.plan_id, limit=10_000)  # the oldest, in order
    oldest = "SELECT event_id FROM plan_events ORDER BY at, event_id LIMIT 10000"
    with db.engine.connect() as conn:
        assert [e.event_id for e in timeline] == list(conn.execute(text(oldest)).scalars())
    new = PlanEvent(plan_id=plan.plan_id, kind=EventKind.queued)
    plans.add_event(new)  # today's events go on landing in it
    assert _home(db, new.event_id) == adopted.name
    before = _fingerprint(db)

    downgrade(url, BEFORE)
    assert _one(db, "SELECT relkind FROM pg_class WHERE relname = 'plan_events'") == "r"
    assert _fingerprint(db) == before
    leftovers = "SELECT count(*) FROM pg_class WHERE relname LIKE 'plan_events_%' AND relkind = 'r'"
    assert _one(db, leftovers) == 0
    upgrade(url)
    assert _fingerprint(db) == before
    db.close()


def test_cleanup_drops_expired_days_of_events_and_keeps_a_day_with_a_recent_one(
    url: str,
) -> None:
    db, plans, plan = _ledger_with_a_plan(url, "head")
    now = datetime.now(UTC)
    old = now - 12 * DAY
    with db.engine.begin() as conn:  # partitions for the last two weeks, as if beat ran then
        create_partitions(conn, old, behind=1, ahead=14, table=EVENTS)
    for day in (old - DAY, old, old + DAY):  # three days of events, all past the TTL
        _fill(db, plan.plan_id, day, 1_000, timedelta(seconds=30))
    # An event minted in the second old day but stamped an hour ago: its day stays.
    recent_id = ulid_prefix(old) + "RECENTEVENT00001"
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO plan_events (event_id, plan_id, at, kind) "
                "VALUES (:id, :plan, :at, 'queued')"
            ),
            {"id": recent_id, "plan": plan.plan_id, "at": now - timedelta(hours=1)},
        )
    with db.engine.begin() as conn:  # an operator's table whose name only starts alike
        conn.execute(text(f"CREATE TABLE {EVENTS.prefix}rune_backup AS SELECT 1 AS kept"))
    homes = [_home(db, ulid_prefix(day) + "0".rjust(16, "0")) for day in (old - DAY, old)]
    size = _one(
        db, "SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('plan_events')"
    )
    total = _one(db, "SELECT count(*) FROM plan_events")

    removed = plans.delete_events_before(now - 7 * DAY, 500)

    assert removed == 3_000  # every old event, dropped or deleted, counted once
    assert _one(db, "SELECT count(*) FROM plan_events") == int(str(total)) - removed
    with db.engine.connect() as conn:
        attached = {p.name for p in list_partitions(conn, EVENTS)}
    assert homes[0] not in attached and homes[1] in attached  # dropped / kept for the recent
    assert _home(db, recent_id) == homes[1]
    after = _one(
        db, "SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('plan_events')"
    )
    assert int(str(after)) < int(str(size))  # the dropped days' pages are gone, not just dead
    assert plans.delete_events_before(now - 7 * DAY, 500) == 0  # idempotent
    assert _one(db, f"SELECT kept FROM {EVENTS.prefix}rune_backup") == 1  # not planq's: kept
    db.close()


def test_the_adopted_partition_goes_whole_once_the_cutoff_passes_its_end(url: str) -> None:
    db, plans, plan = _ledger_with_a_plan(url, BEFORE)
    now = datetime.now(UTC)
    _fill(db, plan.plan_id, now - 20 * DAY, 2_000, timedelta(seconds=60))  # long past
    _fill(db, plan.plan_id, now - 3 * DAY, 5, timedelta(seconds=60))  # within the TTL
    upgrade(url)
    with db.engine.connect() as conn:
        adopted = list_partitions(conn, EVENTS)[0]
    assert adopted.name.startswith(f"{EVENTS.prefix}_before_")

    # Its range runs to today: until the cutoff passes that, its old rows go by batches.
    assert plans.delete_events_before(now - 7 * DAY, 500) == 2_000
    with db.engine.connect() as conn:
        assert adopted in list_partitions(conn, EVENTS)
    # Seven days after the upgrade (a 7-day TTL), the cutoff passes its end: dropped whole.
    assert plans.delete_events_before(adopted.ends, 500) == 5

    with db.engine.connect() as conn:
        assert adopted not in list_partitions(conn, EVENTS)
    assert _one(db, "SELECT to_regclass(:t)", t=adopted.name) is None  # dropped, not detached
    assert _one(db, "SELECT count(*) FROM plan_events") == 0
    db.close()


def _waiting_for_plans(db: Database) -> bool:
    sql = (
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'relation' "
        "AND relation = to_regclass('plans')"
    )
    return bool(_one(db, sql))


def test_a_cleanup_waits_for_a_transition_instead_of_deadlocking_with_it(url: str) -> None:
    # A transition writes plans, then plan_events. A detach that locked plan_events first
    # and then plans (which the partition's foreign key needs) deadlocked with it: one of
    # the two was killed. Locking in the transition's order, the cleanup waits, then drops.
    db, plans, plan = _ledger_with_a_plan(url, "head")
    now = datetime.now(UTC)
    old = now - 12 * DAY
    with db.engine.begin() as conn:  # one expired day: the cleanup's one detach
        create_partitions(conn, old, behind=0, ahead=0, table=EVENTS)
    _fill(db, plan.plan_id, old, 100, timedelta(seconds=30))
    expired = _home(db, ulid_prefix(old) + "0".rjust(16, "0"))
    removed: list[int] = []
    with db.engine.connect() as transition:
        transition.execute(  # a transition's first write, its transaction left open
            text("UPDATE plans SET version = version + 1 WHERE plan_id = :id"),
            {"id": plan.plan_id},
        )
        cleanup = threading.Thread(
            target=lambda: removed.append(plans.delete_events_before(now - 7 * DAY, 500))
        )
        cleanup.start()
        wait_for(lambda: _waiting_for_plans(db), timeout=10, what="the cleanup to wait")
        event = PlanEvent(plan_id=plan.plan_id, kind=EventKind.queued)
        transition.execute(  # its second write: with the old lock order, a deadlock here
            text(
                "INSERT INTO plan_events (event_id, plan_id, at, kind) "
                "VALUES (:id, :plan, :at, 'queued')"
            ),
            {"id": event.event_id, "plan": plan.plan_id, "at": event.at},
        )
        transition.commit()
    cleanup.join(30)
    assert removed == [100]  # the day went whole, once the transition had committed
    with db.engine.connect() as conn:
        assert expired not in {p.name for p in list_partitions(conn, EVENTS)}
    assert _home(db, event.event_id) != expired
    db.close()
