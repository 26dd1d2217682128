"""One worker identity: a job row's worker_id is `<Celery node name>/<pid>` (issue 13).

A standalone `AsyncWorker` (no Celery, no runtime) claims as the spec's `worker-…` until
a node names it; everything the runtime builds is `<node>/<pid>`.

The process-level proofs (a prefork child's and a threads node's claims) are in
tests/acceptance/test_job_fencing_processes.py; here the form itself, its bound, and the
in-process (embedded) Celery worker.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from planq.domain.bounds import MAX_WORKER_ID_LENGTH
from planq.domain.config import AsyncWorkerConfig
from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import Plan
from planq.store.memory import in_memory_ledger
from planq.tasks.engine import AsyncWorker, worker_id_for
from tests.celery_support import embedded_runtime, make_app, wait_for_status

pytestmark = [pytest.mark.redis]


def test_the_form_is_node_slash_pid_and_fits_the_column() -> None:
    assert worker_id_for(18352, "celery@vm") == "celery@vm/18352"
    assert worker_id_for(7) == f"planq@{socket.gethostname()}/7"  # no Celery node
    cut = worker_id_for(4_194_304, "n" * 400 + "@host")
    assert len(cut) == MAX_WORKER_ID_LENGTH and cut.endswith("/4194304") and cut.startswith("nnn")


def test_a_worker_is_renamed_only_while_it_runs_no_job() -> None:
    jobs, plans = in_memory_ledger()
    engine = AsyncWorker(AsyncWorkerConfig(), jobs, "noop", plans)
    standalone = engine.worker_id
    assert standalone.startswith("worker-")  # no node yet: the spec's standalone form
    engine.tracker.track("01J0000000000000000000000A")
    assert engine.rename("celery@vm/1") is False  # its claim is fenced by the old id
    assert engine.worker_id == standalone
    engine.tracker.untrack("01J0000000000000000000000A")
    assert engine.rename("celery@vm/1") is True
    assert engine.health_report()["worker_id"] == "celery@vm/1"
    with pytest.raises(ValueError, match="at most 255"):
        engine.rename("x" * 256)
    engine.tracker.close()


def test_the_embedded_worker_claims_under_its_node_name(redis_url: str, tmp_path: Path) -> None:
    app = make_app(redis_url, f"sqlite:///{tmp_path / 'ledger.db'}", default_executor="noop")
    with embedded_runtime(app) as rt:
        node = f"planq-embedded-{os.getpid()}@{socket.gethostname()}"
        assert rt.worker.worker_id == f"{node}/{os.getpid()}"
        plan = Plan.with_steps(["one"])
        rt.plans.add(plan)
        job_id = app.tasks["planq.strategize_plan"].delay(plan.plan_id).id
        done = wait_for_status(rt.jobs, job_id, AsyncJobStatus.succeeded)
    assert done.worker_id == f"{node}/{os.getpid()}"
