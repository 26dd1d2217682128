"""How long the partitioning migrations hold their table (issue 23: an online 0007).

A throw-away PostgreSQL database at 0006 gets N job rows (the round-trip test's fill:
ten days of ids, a live set, failures, retries), then `upgrade` to 0007 is timed; at 0010
it gets 2N plan events and `upgrade` to 0011 is timed. Each upgrade runs in one
transaction per migration, holding its table's lock throughout: the time is how long
writes to that table wait.

    .venv/bin/python bench/migration_time.py --jobs 600000
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planq.store import Database  # noqa: E402
from planq.store.migrate import upgrade  # noqa: E402
from planq.store.partitions import ulid_prefix_sql  # noqa: E402
from tests.integration.test_partitioned_jobs import FILL_OLD_TABLE  # noqa: E402
from tests.support import create_pg_database, drop_pg_database  # noqa: E402

PLAN = "01000000000000000000000000"
FILL_PLAN = (
    "INSERT INTO plans (plan_id, name, phase, status, spec_json, created_at, updated_at, "
    "version) VALUES (:id, 'p', 'apply', 'complete', '{}', now(), now(), 1)"
)
FILL_EVENTS = f"""
INSERT INTO plan_events (event_id, plan_id, at, kind)
SELECT {ulid_prefix_sql("at")} || lpad(upper(to_hex(i)), 16, '0'), :id, at, 'queued'
  FROM (SELECT i, now() - i * interval '2 seconds' AS at FROM generate_series(1, :n) AS i) m
"""


def size(db: Database, table: str) -> str:
    """The table's size, indexes included, as PostgreSQL prints it."""
    with db.engine.connect() as conn:
        sql = f"SELECT pg_size_pretty(pg_total_relation_size('{table}'))"
        return str(conn.execute(text(sql)).scalar())


def timed_upgrade(url: str, revision: str) -> float:
    """Seconds `planq db upgrade` takes to reach revision."""
    start = time.monotonic()
    upgrade(url, revision)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=600_000)
    args = parser.parse_args()
    url = create_pg_database("planq_bench_migration")
    try:
        upgrade(url, "0006_error_traceback")
        db = Database(url)
        with db.engine.begin() as conn:
            conn.execute(text(FILL_OLD_TABLE), {"now": datetime.now(UTC), "n": args.jobs})
            conn.exec_driver_sql("CHECKPOINT")
        print(f"async_jobs: {args.jobs:,} rows, {size(db, 'async_jobs')}")
        print(f"  0006 -> 0007: {timed_upgrade(url, '0007_partitioned_jobs'):.2f} s")
        upgrade(url, "0010_gate_index")
        with db.engine.begin() as conn:
            conn.execute(text(FILL_PLAN), {"id": PLAN})
            conn.execute(text(FILL_EVENTS), {"id": PLAN, "n": 2 * args.jobs})
            conn.exec_driver_sql("CHECKPOINT")
        print(f"plan_events: {2 * args.jobs:,} rows, {size(db, 'plan_events')}")
        print(f"  0010 -> 0011: {timed_upgrade(url, '0011_partitioned_events'):.2f} s")
        db.close()
    finally:
        drop_pg_database(url)


if __name__ == "__main__":
    main()
