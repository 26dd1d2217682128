"""PostgreSQL's time-partitioned async_jobs (migration 0007, store/partitions.py).

TTL cleanup drops a partition whose rows all ended before the cutoff and deletes the
old rows of the others in batches, counting both; a live job and a job that ended
after the cutoff are kept, whatever partition they are in. Partitions are created
ahead and take over the rows the DEFAULT partition held for their range. One retry per
job holds without a unique index, also across partitions and between two writers.
The migration round-trips a filled ledger (generate_series) with every row kept.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from bench.ledger_fill import recorded
from planq.domain.errors import DuplicateJobError
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import JobStore, PlanStore
from planq.store import Database, prepare_partitions, sql_ledger
from planq.store.migrate import downgrade, upgrade
from planq.store.partitions import (
    JOBS,
    create_partitions,
    list_partitions,
    ulid_prefix,
    ulid_prefix_sql,
)
from planq.tasks.runtime import reset_runtime
from planq.worker_config.celery_config import beat_schedule
from planq.worker_config.settings import PlanqSettings
from tests.celery_support import make_app
from tests.support import REDIS_TEST_URL, create_pg_database, drop_pg_database, wait_for

DAY = timedelta(days=1)
FILL = """
INSERT INTO async_jobs (job_id, plan_id, phase, status, schema_version, payload_json,
                        worker_id, created_at, started_at, finished_at, attempt, dispatch_count)
SELECT :prefix || lpad(upper(to_hex(i)), 26 - length(:prefix), '0'),
       '01000000000000000000000000', 'execute', 'succeeded', 1, '{}', 'w@h/1', :at, :at,
       :at + interval '5 s', 1, 1
  FROM generate_series(1, :n) AS i
"""


@pytest.fixture
def pg_url() -> Iterator[str]:
    made = create_pg_database()
    try:
        upgrade(made)
        yield made
    finally:
        drop_pg_database(made)


def _fill(db: Database, at: datetime, n: int, tag: str = "") -> str:
    """N succeeded jobs created at `at` (ids in its partition); the ids' common prefix."""
    prefix = ulid_prefix(at) + tag
    with db.engine.begin() as conn:
        conn.execute(text(FILL), {"prefix": prefix, "at": at, "n": n})
    return prefix


def _home(db: Database, job_id: str) -> str:
    with db.engine.connect() as conn:
        found = conn.execute(
            text("SELECT tableoid::regclass::text FROM async_jobs WHERE job_id = :id"),
            {"id": job_id},
        ).scalar()
    return str(found)


def _size(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) "
                    "FROM pg_partition_tree('async_jobs')"
                )
            ).scalar_one()
        )


def _count(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM async_jobs")).scalar_one())


def test_cleanup_drops_expired_partitions_and_keeps_live_and_recent_rows(pg_url: str) -> None:
    db = Database(pg_url)
    jobs, plans = sql_ledger(db)
    now = datetime.now(UTC)
    old = now - 12 * DAY
    with db.engine.begin() as conn:  # partitions for the last two weeks, as if beat ran then
        create_partitions(conn, old, behind=1, ahead=14)
    expired = [old - DAY, old, old + DAY]  # three days of ended jobs, all older than the TTL
    for day in expired:
        _fill(db, day, 2_000)
    # A job created in the third old day that is still running (it runs across partitions)
    # and one created in the second that ended only an hour ago: their partitions stay.
    plan = Plan.with_steps(["a"])
    plans.add(plan)
    running = AsyncJob(
        job_id=ulid_prefix(old + DAY) + "RNNNGJ0B00000001",
        plan_id=plan.plan_id,
        phase=PlanPhase.strategize,
        created_at=old + DAY,
    )
    assert jobs.queue([running], old + DAY)
    assert jobs.claim(running.job_id, "w@h/1", old + DAY) is not None
    recent = ulid_prefix(old) + "RECENTJ0B0000001"
    with db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO async_jobs (job_id, plan_id, phase, status, schema_version, "
                "payload_json, worker_id, created_at, started_at, finished_at, attempt, "
                "dispatch_count) VALUES (:id, '01000000000000000000000000', 'execute', "
                "'failed', 1, '{}', 'w@h/1', :old, :old, :end, 1, 1)"
            ),
            {"id": recent, "old": old, "end": now - timedelta(hours=1)},
        )
    _fill(db, datetime(2016, 7, 30, tzinfo=UTC), 10, tag="D")  # before every partition
    assert _home(db, ulid_prefix(datetime(2016, 7, 30, tzinfo=UTC)) + "D" + "1".rjust(15, "0"))
    with db.engine.begin() as conn:
        listed = list_partitions(conn)
    before = {p.name for p in listed}
    homes = [_home(db, ulid_prefix(day) + "1".rjust(16, "0")) for day in expired]
    assert homes[0] in before and _home(db, running.job_id) == homes[2]
    size, rows = _size(db), _count(db)

    deleted = jobs.delete_terminal_before(now - 7 * DAY, 500)

    assert deleted == 3 * 2_000 + 10  # every old ended row, dropped or deleted, counted once
    assert _count(db) == rows - deleted
    with db.engine.begin() as conn:
        after = {p.name for p in list_partitions(conn)}
    assert homes[0] not in after  # nothing left to keep: dropped (so are old empty ones)
    assert all(p.high <= ulid_prefix(now - 7 * DAY) for p in listed if p.name not in after)
    assert {homes[1], homes[2]} <= after  # the recent row's and the running job's
    kept = jobs.get(running.job_id)
    assert kept is not None and kept.status is AsyncJobStatus.running
    assert kept.worker_id == "w@h/1"
    assert _home(db, recent) == homes[1]  # ended after the cutoff: kept
    assert _size(db) < size  # the dropped partition's pages are gone, not just dead
    assert jobs.delete_terminal_before(now - 7 * DAY, 500) == 0  # idempotent
    db.close()


def test_partitions_are_made_ahead_and_take_their_rows_from_default(pg_url: str) -> None:
    db = Database(pg_url)
    now = datetime.now(UTC)
    with db.engine.connect() as conn:
        made = list_partitions(conn)
    assert made[0].low <= ulid_prefix(now - DAY) and made[-1].high >= ulid_prefix(now + 7 * DAY)
    assert prepare_partitions(db.engine) == []  # upgrade made them: nothing left to do
    future = now + 30 * DAY  # beat down for a month: the insert still lands, in DEFAULT
    prefix = _fill(db, future, 5)
    assert _home(db, prefix + "1".rjust(16, "0")) == JOBS.default
    created = prepare_partitions(db.engine, now=future)
    assert created and _home(db, prefix + "1".rjust(16, "0")) in created
    assert _count(db) == 5
    schedule = beat_schedule(PlanqSettings())
    assert schedule["planq-prepare-partitions"]["task"] == "planq.maintenance.prepare_partitions"
    db.close()


def _moved(jobs: JobStore, job: AsyncJob, at: datetime) -> tuple[bool, bool]:
    """Claim then finish `job` through the store: (claimed, finished)."""
    claimed = jobs.claim(job.job_id, "w@h/1", at, follow_plan=True)
    finished = jobs.finish(
        job.job_id, AsyncJobStatus.succeeded, at, worker_id="w@h/1", follow_plan=True
    )
    return claimed is not None, finished


def _updated(sent: list[tuple[str, Any]]) -> list[str]:
    """The job tables the recorded UPDATE statements name, in order."""
    named = (re.search(r"UPDATE (async_jobs\w*)", statement) for statement, _ in sent)
    return [found.group(1) for found in named if found]


def _queued(jobs: JobStore, plans: PlanStore, at: datetime, tag: str) -> AsyncJob:
    """A queued job whose id says it was created at `at`."""
    plan = Plan.with_steps(["a"])
    plans.add(plan)
    job = AsyncJob(
        job_id=ulid_prefix(at) + tag.rjust(16, "0"),
        plan_id=plan.plan_id,
        phase=PlanPhase.strategize,
    )
    assert jobs.queue([job], datetime.now(UTC))
    return job


def test_claim_and_finish_find_a_job_wherever_its_row_is(pg_url: str) -> None:
    """A job's claim and finish name its day's partition, and find its row wherever it is.

    The DEFAULT partition and a partition made after the map was read go through the
    parent; a partition dropped under the map too, and a finish refused on the partition
    (another worker's job) is refused on the parent as well, with nothing written.
    """
    db = Database(pg_url)
    jobs, plans = sql_ledger(db)
    now = datetime.now(UTC)
    today = _queued(jobs, plans, now, "1")
    in_default = _queued(jobs, plans, now + 30 * DAY, "2")
    moved_later = _queued(jobs, plans, now + 31 * DAY, "3")
    partition = _home(db, today.job_id)
    assert partition.startswith(JOBS.prefix)
    assert _home(db, in_default.job_id) == _home(db, moved_later.job_id) == JOBS.default

    with recorded(db) as sent:
        assert jobs.claim(today.job_id, "w@h/1", now) is not None  # the map is read here
        assert not jobs.finish(today.job_id, AsyncJobStatus.succeeded, now, worker_id="w@h/2")
        assert jobs.finish(today.job_id, AsyncJobStatus.succeeded, now, worker_id="w@h/1")
        assert _moved(jobs, in_default, now) == (True, True)  # no range of the map: the parent
    assert _updated(sent) == [partition, partition, JOBS.parent, partition] + [JOBS.parent] * 2
    stored = jobs.get(today.job_id)
    assert stored is not None and stored.worker_id == "w@h/1"  # the refused finish wrote nothing

    created = prepare_partitions(db.engine, now=now + 31 * DAY)  # out of DEFAULT, after the map
    assert _home(db, moved_later.job_id) in created
    with recorded(db) as sent:
        assert _moved(jobs, moved_later, now) == (True, True)
    assert (
        _updated(sent) == [JOBS.parent] * 2
    )  # the map is stale for it: the parent, which is right

    with db.engine.begin() as conn:  # today's ended: its partition can go, under the map
        conn.execute(text(f"ALTER TABLE async_jobs DETACH PARTITION {partition}"))
        conn.execute(text(f"DROP TABLE {partition}"))
    with recorded(db) as sent:
        assert jobs.claim(today.job_id, "w@h/1", now) is None  # a late duplicate: no error
        assert jobs.claim(in_default.job_id, "w@h/1", now) is None  # ended: refused
    # Gone: the parent, and the map read again, which now covers the second's new home.
    assert _updated(sent) == [partition, JOBS.parent, _home(db, in_default.job_id), JOBS.parent]
    for job in (in_default, moved_later):
        ended = jobs.get(job.job_id)
        assert ended is not None and ended.status is AsyncJobStatus.succeeded
    assert jobs.get(today.job_id) is None
    db.close()


def _beat_and_progress(jobs: JobStore, job: AsyncJob, worker_id: str) -> tuple[set[str], bool]:
    """A running job's heartbeat (what must stop) and a progress write (whether it took)."""
    return (
        jobs.heartbeat([job.job_id], datetime.now(UTC), worker_id),
        jobs.save_progress(job.job_id, 0.5, None, worker_id),
    )


def test_heartbeats_and_progress_name_the_jobs_partition(pg_url: str) -> None:
    """A running job's heartbeat and progress go to its partition, like its claim.

    A batch beats each partition once, then the parent for jobs no partition of the map
    holds. A heartbeat or a progress write refused on the partition (another worker's job)
    is refused on the parent too, and writes nothing; a cancel request found on the
    partition stops the job with no second statement.
    """
    db = Database(pg_url)
    jobs, plans = sql_ledger(db)
    now = datetime.now(UTC)
    today, other = (_queued(jobs, plans, now, tag) for tag in ("5", "6"))
    in_default = _queued(jobs, plans, now + 30 * DAY, "7")
    tomorrow = _queued(jobs, plans, now + DAY, "8")
    partition, next_day = _home(db, today.job_id), _home(db, tomorrow.job_id)
    assert _home(db, other.job_id) == partition and _home(db, in_default.job_id) == JOBS.default
    assert next_day.startswith(JOBS.prefix) and next_day != partition
    batch = [today, in_default, other, tomorrow]
    for job in batch:
        assert jobs.claim(job.job_id, "w@h/1", now) is not None

    with recorded(db) as sent:
        assert _beat_and_progress(jobs, today, "w@h/1") == (set(), True)
        assert _beat_and_progress(jobs, in_default, "w@h/1") == (set(), True)
        assert jobs.heartbeat([job.job_id for job in batch], now, "w@h/1") == set()
    assert _updated(sent) == [partition] * 2 + [JOBS.parent] * 2 + [
        partition,
        next_day,
        JOBS.parent,
    ]
    for job in batch:
        stamped = jobs.get(job.job_id)
        assert stamped is not None and stamped.last_heartbeat == now
        assert stamped.progress == (0.5 if job in (today, in_default) else None)

    before = jobs.get(today.job_id)
    with recorded(db) as sent:
        assert _beat_and_progress(jobs, today, "w@h/2") == ({today.job_id}, False)
    assert _updated(sent) == [partition, JOBS.parent] * 2
    assert jobs.get(today.job_id) == before  # neither wrote: the job is w@h/1's

    jobs.cancel(today.job_id, now)
    with recorded(db) as sent:
        assert jobs.heartbeat([today.job_id], now, "w@h/1") == {today.job_id}
    assert _updated(sent) == [partition]
    db.close()


def test_a_naive_moment_is_utc_whatever_the_sessions_time_zone(pg_url: str) -> None:
    """The job path's statements hand `now` to the driver: the store makes it aware UTC first.

    PostgreSQL reads a naive timestamp in the session's time zone; the store's boundary
    takes a naive moment as UTC (as the ORM's column type does), so a heartbeat, a claim
    and a finish store the same instant on a server that is not on UTC.
    """
    db = Database(f"{pg_url}?options=-c%20TimeZone%3DAsia/Tokyo")
    jobs, plans = sql_ledger(db)
    naive = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    job = _queued(jobs, plans, datetime.now(UTC), "9")
    with db.connection("probe") as conn:
        assert conn.exec_driver_sql("SHOW TimeZone").scalar_one() == "Asia/Tokyo"
    assert jobs.claim(job.job_id, "w@h/1", naive) is not None
    assert jobs.heartbeat([job.job_id], naive, "w@h/1") == set()
    assert jobs.finish(job.job_id, AsyncJobStatus.succeeded, naive, worker_id="w@h/1")
    stored = jobs.get(job.job_id)
    assert stored is not None
    aware = naive.replace(tzinfo=UTC)
    assert (stored.started_at, stored.last_heartbeat, stored.finished_at) == (aware,) * 3
    db.close()


def test_a_role_granted_on_the_parent_only_is_served_through_it(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    role = f"planq_t_{uuid.uuid4().hex[:8]}"
    owner = Database(pg_url)
    try:
        with owner.engine.begin() as conn:
            conn.execute(text(f"CREATE ROLE {role} LOGIN"))
            conn.execute(text(f"GRANT SELECT, INSERT, UPDATE ON async_jobs, plans TO {role}"))
        db = Database(pg_url.replace("://postgres@", f"://{role}@"))
        jobs, plans = sql_ledger(Database(pg_url))  # the plan written by the owner
        mine, _ = sql_ledger(db)
        job = _queued(jobs, plans, datetime.now(UTC), "4")
        with recorded(db) as sent, caplog.at_level(logging.WARNING, "planq.store"):
            assert _moved(mine, job, datetime.now(UTC)) == (True, True)
        named = _updated(sent)
        assert named[0].startswith(JOBS.prefix) and named[1:] == [JOBS.parent] * 2
        assert [r.message for r in caplog.records if "directly" in r.message] != []
        db.close()
    finally:
        with owner.engine.begin() as conn:
            conn.execute(text(f"DROP OWNED BY {role}"))
            conn.execute(text(f"DROP ROLE {role}"))
        owner.close()


def test_the_beat_task_recreates_a_missing_partition(pg_url: str, tmp_path: Path) -> None:
    app = make_app(REDIS_TEST_URL, pg_url)
    task = app.tasks["planq.maintenance.prepare_partitions"]  # what beat sends
    db = Database(pg_url)
    try:
        with db.engine.begin() as conn:
            last = list_partitions(conn)[-1].name
            conn.execute(text(f"DROP TABLE {last}"))  # as if beat had been down a day
        assert task() == [last]
        assert task() == []  # idempotent
        sqlite_app = make_app(REDIS_TEST_URL, f"sqlite:///{tmp_path / 'ledger.db'}")
        assert sqlite_app.tasks["planq.maintenance.prepare_partitions"]() == []  # no partitions
        reset_runtime(sqlite_app)
    finally:
        reset_runtime(app)
        db.close()


def _retry(original: AsyncJob, at: datetime) -> AsyncJob:
    return AsyncJob(
        job_id=ulid_prefix(at) + "RETRY" + original.job_id[-11:],
        plan_id=original.plan_id,
        phase=original.phase,
        attempt=2,
        retry_of=original.job_id,
        created_at=at,
    )


def test_one_retry_per_job_across_partitions_and_writers(pg_url: str) -> None:
    db, other = Database(pg_url), Database(pg_url)
    jobs, _ = sql_ledger(db)
    jobs_b, _ = sql_ledger(other)
    now = datetime.now(UTC)
    plan_id = Plan.with_steps(["a"]).plan_id  # no plan row needed: add() writes the job only
    first = AsyncJob(plan_id=plan_id, phase=PlanPhase.execute)
    jobs.add(first)
    jobs.add(_retry(first, now))
    with pytest.raises(DuplicateJobError):  # another day, another partition: still refused
        jobs.add(_retry(first, now + 2 * DAY))

    second = AsyncJob(plan_id=plan_id, phase=PlanPhase.execute)
    jobs.add(second)
    holding, release = threading.Event(), threading.Event()
    outcome: dict[str, str] = {}

    def writer_a() -> None:
        with jobs.transaction():
            jobs.add(_retry(second, now))
            holding.set()
            release.wait(30)

    def writer_b() -> None:
        try:
            jobs_b.add(_retry(second, now + 3 * DAY))
            outcome["b"] = "added"
        except DuplicateJobError:
            outcome["b"] = "refused"

    a = threading.Thread(target=writer_a)
    a.start()
    assert holding.wait(30)
    b = threading.Thread(target=writer_b)
    b.start()
    wait_for(lambda: _waiting_on_advisory_lock(db), timeout=10, what="b waiting on a's lock")
    release.set()
    a.join(30)
    b.join(30)
    assert outcome == {"b": "refused"}
    with db.engine.connect() as conn:
        retries = conn.execute(
            text("SELECT count(*) FROM async_jobs WHERE retry_of = :id"), {"id": second.job_id}
        ).scalar()
    assert retries == 1
    db.close()
    other.close()


def _waiting_on_advisory_lock(db: Database) -> bool:
    with db.engine.connect() as conn:
        return bool(
            conn.execute(
                text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            ).scalar()
        )


FILLED = 120_000
FILL_OLD_TABLE = f"""
INSERT INTO async_jobs (job_id, plan_id, phase, status, schema_version, payload_json,
                        worker_id, created_at, started_at, finished_at, attempt, retry_of,
                        dispatch_count, error_traceback)
SELECT {ulid_prefix_sql("at")} || lpad(upper(to_hex(i)), 16, '0'), '01000000000000000000000000',
       'execute', status, 1, '{{}}', CASE WHEN status = 'queued' THEN NULL ELSE 'w@h/1' END,
       at, at, CASE WHEN status IN ('queued', 'running') THEN NULL ELSE at END,
       CASE WHEN i % 97 = 0 THEN 2 ELSE 1 END,
       CASE WHEN i % 97 = 0 THEN 'R' || lpad(i::text, 25, '0') END, 1,
       CASE WHEN status = 'failed' THEN 'Traceback' END
  FROM (SELECT i, :now - i * interval '7 seconds' AS at,
               CASE WHEN i < 300 THEN 'queued' WHEN i < 400 THEN 'running'
                    WHEN i % 50 = 0 THEN 'failed' ELSE 'succeeded' END AS status
          FROM generate_series(1, :n) AS i) AS made
"""
#: Every column of every row (the column order is the same on both sides of 0007).
FINGERPRINT = "SELECT count(*), md5(string_agg(t::text, '|' ORDER BY job_id)) FROM async_jobs AS t"


def _scalar(db: Database, sql: str) -> object:
    with db.engine.connect() as conn:
        return conn.execute(text(sql)).scalar()


def _kind(db: Database) -> str:
    with db.engine.connect() as conn:
        return str(
            conn.execute(text("SELECT relkind FROM pg_class WHERE relname = 'async_jobs'")).scalar()
        )


def test_migration_round_trips_a_filled_ledger() -> None:
    url = create_pg_database()
    try:
        upgrade(url, "0006_error_traceback")
        db = Database(url)
        with db.engine.begin() as conn:
            conn.execute(text(FILL_OLD_TABLE), {"now": datetime.now(UTC), "n": FILLED})
        with db.engine.connect() as conn:
            before = tuple(conn.execute(text(FINGERPRINT)).one())
        assert before[0] == FILLED and _kind(db) == "r"

        storage = _scalar(db, "SELECT pg_relation_filenode('async_jobs')")
        upgrade(url)
        assert _kind(db) == "p"
        with db.engine.connect() as conn:
            assert tuple(conn.execute(text(FINGERPRINT)).one()) == before
            in_default = conn.execute(text(f"SELECT count(*) FROM {JOBS.default}")).scalar()
            parts = list_partitions(conn)
        # Adopted in place (the same storage), every row: ten days of ids up to now.
        adopted = parts[0]
        assert adopted.low == "" and adopted.ends > datetime.now(UTC)
        assert _scalar(db, f"SELECT pg_relation_filenode('{adopted.name}')") == storage
        assert _scalar(db, f"SELECT count(*) FROM {adopted.name}") == FILLED
        assert in_default == 0 and len(parts) == 1 + 7  # then a partition a day ahead
        attached = _scalar(  # its primary key and 0005's five indexes, now the parent's
            db,
            "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE c.relname LIKE 'async_jobs_adopted_%' AND c.relkind = 'i'",
        )
        assert attached == 6

        downgrade(url, "0006_error_traceback")
        assert _kind(db) == "r"
        with db.engine.connect() as conn:
            assert tuple(conn.execute(text(FINGERPRINT)).one()) == before
            leftovers = conn.execute(
                text(
                    "SELECT count(*) FROM pg_class WHERE relname LIKE 'async_jobs_%' "
                    "AND relkind IN ('r', 'p')"
                )
            ).scalar()
        assert leftovers == 0

        upgrade(url)
        with db.engine.connect() as conn:
            assert tuple(conn.execute(text(FINGERPRINT)).one()) == before
        db.close()
    finally:
        drop_pg_database(url)


def test_the_partitioned_table_keeps_the_models_constraint_names(pg_url: str) -> None:
    # The check names are what a refused write reports (`ck_async_jobs_terminal_finished`).
    from sqlalchemy import CheckConstraint

    from planq.store.models import AsyncJobModel

    expected = {
        str(c.name) for c in AsyncJobModel.__table__.constraints if isinstance(c, CheckConstraint)
    }
    db = Database(pg_url)
    try:
        with db.engine.connect() as conn:
            found = set(
                conn.execute(
                    text(
                        "SELECT conname FROM pg_constraint "
                        "WHERE conrelid = 'async_jobs'::regclass AND contype = 'c'"
                    )
                ).scalars()
            )
    finally:
        db.close()
    assert found == expected
