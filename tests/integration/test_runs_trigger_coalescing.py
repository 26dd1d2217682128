"""Triggers sent while no worker is up are coalesced: five `planq runs trigger`, one scan.

The real CLI (in process), the test Redis as broker, a SQLite ledger, and then a real
in-process Celery worker; the behaviour is the broker slot and the worker's release of it,
not anything per process, so a thread-pool worker is enough.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner, Result

from planq.cli.main import app as cli
from planq.domain.runs import RunStatus
from planq.store.migrate import upgrade
from planq.tasks.trigger_slot import slot_key
from planq.worker_config.settings import load_settings
from tests.api_support import ApiServer
from tests.celery_support import embedded_runtime, make_app
from tests.runs_support import JOB
from tests.support import wait_for


def planq(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def test_five_triggers_with_no_worker_run_one_scan(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger_url = f"sqlite:///{tmp_path / 'coalesce.db'}"
    upgrade(ledger_url)
    monkeypatch.setenv("PLANQ_DATABASE_URL", ledger_url)
    monkeypatch.setenv("PLANQ_BROKER_URL", redis_url)
    broker = redis.Redis.from_url(redis_url)

    first = planq("runs", "trigger", JOB, "--json")
    assert first.exit_code == 0, first.output
    queued_id = json.loads(first.stdout)["task_id"]
    for _ in range(4):
        again = planq("runs", "trigger", JOB)
        assert again.exit_code == 1, again.output
        assert f"queued already (task id {queued_id})" in again.stderr, again.stderr
    api = ApiServer(load_settings(broker_url=redis_url, database_url=ledger_url))
    try:  # the admin API's trigger (the dashboard's button) is coalesced the same way
        skipped = api.post(f"/api/admin/jobs/{JOB}/trigger", token=None)
    finally:
        api.close()
    assert skipped.status_code == 409, skipped.text
    assert skipped.json()["skipped"] == "already_queued"
    assert skipped.json()["task_id"] == queued_id
    assert broker.llen("planq.runs") == 1  # one message, not six

    with embedded_runtime(make_app(redis_url, ledger_url)) as runtime:

        def drained() -> bool:
            runs = runtime.runs.list_runs(JOB, limit=10)
            idle = broker.llen("planq.runs") == 0 and not any(r.status.is_active for r in runs)
            return idle and bool(runs)

        wait_for(drained, timeout=60, what="the queued trigger's scan to end")
        runs = runtime.runs.list_runs(JOB, limit=10)
        assert [r.status for r in runs] == [RunStatus.Completed]  # one scan, not five
        assert broker.get(slot_key(JOB)) is None  # the worker took the trigger: slot free

        later = planq("runs", "trigger", JOB, "--json")  # a new trigger queues again
        assert later.exit_code == 0 and json.loads(later.stdout)["decision"] == "fresh"
        wait_for(
            lambda: len(runtime.runs.list_runs(JOB, limit=10)) == 2 and drained(),
            timeout=60,
            what="the second scan to end",
        )
