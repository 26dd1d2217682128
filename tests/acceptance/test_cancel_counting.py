"""A cancel is written once and counted once, however many worker nodes get its broadcast.

Real `celery worker` processes, each with its own metrics port: which node "holds" a job is
Celery's per-process state (its reserved and active requests), so in-process nodes would
all share it and prove nothing. Ledger writes are counted by PostgreSQL itself: a
statement-level trigger on `async_jobs` and on each of its partitions (a statement fires
those of the table it names: the claim and the finish name the job's partition) counts
every INSERT/UPDATE/DELETE statement, a compare-and-set that matches no row included
(statement triggers fire for those too).
The executor (`quiet`) writes nothing while it waits and heartbeats are 30 s apart, so the
count moves only for the cancel. (The statistics views were tried first: a backend's
counts reach them only when it goes idle, so a window of seconds caught 2 to 8 of the
same 5 statements.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from celery import Celery

from planq.domain.plans import Plan
from planq.store import Database
from planq.tasks.runtime import Runtime
from tests.acceptance.conftest import EXEC, StartWorker
from tests.acceptance.test_metrics import samples
from tests.resources import free_port
from tests.support import wait_for

pytestmark = pytest.mark.processes

QUIET = {"default_executor": f"{EXEC}:quiet", "heartbeat_interval": 30.0, "job_timeout": 120.0}
#: Writes of one cancel of a running job: its compare-and-sets (queued: no match; running),
#: the holder's heartbeat (the poke makes it read the request) and the finish.
ONE_CANCEL = 4
COUNTER = """
CREATE TABLE planq_test_writes (n bigint NOT NULL);
INSERT INTO planq_test_writes VALUES (0);
CREATE FUNCTION planq_test_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN UPDATE planq_test_writes SET n = n + 1; RETURN NULL; END $$;
DO $$ DECLARE t regclass; BEGIN
  FOR t IN SELECT relid FROM pg_partition_tree('async_jobs') LOOP
    EXECUTE format('CREATE TRIGGER planq_test_count AFTER INSERT OR UPDATE OR DELETE ON %s '
                   'FOR EACH STATEMENT EXECUTE FUNCTION planq_test_count()', t);
  END LOOP;
END $$;
"""
UNCOUNTER = """
DROP FUNCTION planq_test_count() CASCADE;
DROP TABLE planq_test_writes;
"""


@pytest.fixture
def dsn(pg_database: Database, pg_url: str) -> Iterator[str]:
    """The test database (libpq URL) with the write counter installed for this test."""
    url = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(COUNTER)
    yield url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(UNCOUNTER)


def writes(dsn: str) -> int:
    """Write statements on async_jobs so far."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT n FROM planq_test_writes").fetchone()
    assert row is not None
    return int(row[0])


def settled_writes(dsn: str, quiet: float = 2.0) -> int:
    """The count once it has not moved for `quiet` seconds (late broadcasts included)."""
    seen = {"value": writes(dsn), "at": time.monotonic()}

    def settled() -> int | None:
        now = writes(dsn)
        if now != seen["value"]:
            seen.update(value=now, at=time.monotonic())
            return None
        return now if time.monotonic() - seen["at"] >= quiet else None

    value: int = wait_for(settled, timeout=60, interval=0.1, what="the write count to settle")
    return value


def status_of(dsn: str, job_id: str) -> str | None:
    """The job's status."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT status FROM async_jobs WHERE job_id = %s", (job_id,)).fetchone()
    return None if row is None else str(row[0])


def fleet_cancels(ports: list[int]) -> float:
    """planq_cancellations_total summed over every outcome and every node."""
    return sum(
        value
        for port in ports
        for (name, _), value in samples(port).items()
        if name == "planq_cancellations_total"
    )


def measure(dsn: str, producer: Celery, runtime: Runtime, cancel: Callable[[str], object]) -> int:
    """Writes on the job table that cancelling one running job cost, the fleet over."""
    plan = Plan.with_steps(["wait"])
    runtime.plans.add(plan)
    job_id = producer.tasks["planq.strategize_plan"].delay(plan.plan_id).id
    wait_for(lambda: status_of(dsn, job_id) == "running", timeout=60, what="the job running")
    before = settled_writes(dsn)
    cancel(job_id)
    wait_for(lambda: status_of(dsn, job_id) == "cancelled", timeout=30, what="the job cancelled")
    return settled_writes(dsn) - before


def test_a_cancel_is_written_and_counted_once_on_a_three_node_fleet(
    dsn: str, producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    ports = [free_port() for _ in range(3)]
    for name, port in zip(("w1", "w2", "w3"), ports, strict=True):
        start_worker(name, concurrency=1, metrics_port=port, **QUIET)
    planq_cancel = measure(dsn, producer, runtime, runtime.worker.cancel_job)
    # Flower's Revoke button: nobody recorded it, so the node that runs the job does
    flower_revoke = measure(dsn, producer, runtime, producer.control.revoke)
    counted = fleet_cancels(ports)  # read after the counts settled: seconds later
    print(f"per cancel on 3 nodes: {planq_cancel} writes (planq), {flower_revoke} (Flower);")
    print(f"the fleet counted {counted} cancels for 2")
    assert planq_cancel == ONE_CANCEL, "another node wrote the cancel again"
    assert flower_revoke == ONE_CANCEL + 2  # one no-op compare-and-set per other node
    assert counted == 2


def test_a_terminate_revoke_is_counted_as_a_cancelled_job(
    dsn: str, producer: Celery, runtime: Runtime, start_worker: StartWorker
) -> None:
    port = free_port()
    start_worker("w1", concurrency=1, metrics_port=port, **QUIET)
    plan = Plan.with_steps(["wait"])
    runtime.plans.add(plan)
    job_id = producer.tasks["planq.strategize_plan"].delay(plan.plan_id).id
    wait_for(lambda: status_of(dsn, job_id) == "running", timeout=60, what="the job running")
    producer.control.revoke(job_id, terminate=True, signal="SIGTERM")
    wait_for(lambda: status_of(dsn, job_id) == "cancelled", timeout=30, what="the job cancelled")
    ended = ("planq_jobs_total", (("phase", "strategize"), ("status", "cancelled")))
    latency = ("planq_cancel_latency_seconds_count", ())
    wait_for(
        lambda: samples(port).get(ended) == 1.0 and samples(port).get(latency) == 1.0,
        timeout=15,
        what="the terminated job counted as cancelled, with its cancel latency",
    )
    assert fleet_cancels([port]) == 1
