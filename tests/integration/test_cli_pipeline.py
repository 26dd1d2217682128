"""`planq plans run|approve|reject|cancel` and the trail in `plans show`, on SQLite and PostgreSQL.

The phase jobs are run by an engine on the same ledger (the worker's claim and finish, no
broker consumer): the CLI is what is tested, its exit codes and its JSON.
"""

from __future__ import annotations

import socket

import pytest

from planq.domain.config import AsyncWorkerConfig
from planq.domain.jobs import AsyncJobStatus
from planq.tasks.engine import AsyncWorker
from tests.integration import test_cli as cli_tests

# The CLI tests' fixtures: the ledger (PostgreSQL emptied, or a fresh SQLite) and PLANQ_*.
ledger = cli_tests.ledger
env = cli_tests.env
Ledger = cli_tests.Ledger


def run_queued(led: Ledger, plan_id: str) -> None:
    """Run every queued job of the plan as a worker would (claim, executor, finish)."""
    worker = AsyncWorker(AsyncWorkerConfig(), led.jobs, "noop", led.plans)
    for job in led.jobs.list_by_plan(plan_id):
        if job.status is AsyncJobStatus.queued:
            assert worker.run_job(job.job_id).value == "succeeded"


def as_user(monkeypatch: pytest.MonkeyPatch, name: str) -> str:
    """Run the next CLI calls as OS user `name` (getpass reads LOGNAME first); its actor."""
    monkeypatch.setenv("LOGNAME", name)
    return f"cli:{name}@{socket.gethostname()}"


def test_the_cli_runs_a_pipeline_to_its_gate_and_approves_it_once(
    ledger: Ledger, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner (ann) may not approve (four-eyes), bob does; actors are OS users, not --by."""
    ann = as_user(monkeypatch, "ann")
    plan_id = cli_tests.ok_json("plans", "create", "--steps", "a")["plan_id"]
    started = cli_tests.ok_json(
        "plans",
        "run",
        plan_id,
        "--through",
        "execute",
        "--approve-before",
        "execute",
        "--by",
        "mallory",
    )
    assert started["job"]["phase"] == "strategize"
    assert started["plan"]["pipeline"]["state"] == "running"
    run_queued(ledger, plan_id)
    shown = cli_tests.ok_json("plans", "show", plan_id)
    assert shown["pipeline"]["state"] == "awaiting_approval"
    assert shown["state"] == "Strategize/COMPLETE"

    line = cli_tests.fails(1, "plans", "approve", plan_id, "--by", "bob")
    assert "forbidden" in line and "four-eyes" in line
    bob = as_user(monkeypatch, "bob")
    approved = cli_tests.ok_json("plans", "approve", plan_id, "--by", "bob", "--note", "go")
    assert approved["job"]["phase"] == "execute"
    line = cli_tests.fails(1, "plans", "approve", plan_id, "--by", "carl")
    assert "not awaiting approval" in line
    run_queued(ledger, plan_id)
    shown = cli_tests.ok_json("plans", "show", plan_id)
    assert shown["pipeline"]["state"] == "done" and shown["state"] == "Execute/COMPLETE"
    decided = [e for e in shown["events"] if e["kind"] == "approved"]
    assert [(e["actor"], e["note"]) for e in decided] == [(bob, "by: bob; go")]
    assert shown["events"][0]["actor"] == ann
    refused = [e for e in shown["events"] if e["kind"] == "approval_refused"]
    assert [e["actor"] for e in refused] == [ann]


def test_bad_phases_exit_2_and_reject_and_cancel_end_the_pipeline(
    ledger: Ledger, env: dict[str, str]
) -> None:
    plan_id = cli_tests.ok_json("plans", "create", "--steps", "a")["plan_id"]
    assert "through must be one of" in cli_tests.fails(2, "plans", "run", plan_id, "--through", "x")
    cli_tests.fails(2, "plans", "run", plan_id, "--through", "execute", "--approve-before", "apply")
    cli_tests.fails(1, "plans", "reject", plan_id)
    line = cli_tests.fails(2, "plans", "run", plan_id, "--approval-timeout", "60")
    assert "needs approve_before" in line
    assert cli_tests.ok_json("plans", "show", plan_id)["events"] == []
    assert ledger.jobs.list_by_plan(plan_id) == []

    cli_tests.ok_json("plans", "run", plan_id, "--approve-before", "execute")
    run_queued(ledger, plan_id)
    rejected = cli_tests.ok_json("plans", "reject", plan_id, "--note", "no", "--by", "dana")
    assert rejected["plan"]["pipeline"]["state"] == "rejected" and rejected["job"] is None

    other = cli_tests.ok_json("plans", "create", "--steps", "a")["plan_id"]
    cli_tests.ok_json("plans", "run", other, "--through", "apply")
    cancelled = cli_tests.ok_json("plans", "cancel", other, "--by", "ops")
    assert cancelled["plan"]["pipeline"]["state"] == "cancelled"
    assert len(cancelled["cancelled_jobs"]) == 1 and cancelled["outcome"] == "cancelled"
    assert "nothing to cancel" in cli_tests.fails(1, "plans", "cancel", other)
    (job,) = ledger.jobs.list_by_plan(other)
    assert job.status is AsyncJobStatus.cancelled
