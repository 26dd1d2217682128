"""`planq demo` end to end: the installed console script, no TTY, a fresh working dir."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from planq.cli.demo import foreign_tasks
from planq.domain.jobs import AsyncJobStatus
from planq.store import Database, sql_ledger
from planq.worker_config.bootstrap import bootstrap
from planq.worker_config.settings import PlanqSettings, load_settings


def _planq() -> str:
    """The console script of this interpreter's environment (`python -m cli.main` has no main)."""
    beside = Path(sys.executable).with_name("planq")
    if beside.exists():
        return str(beside)
    found = shutil.which("planq")
    assert found, "the planq console script is not installed (pip install -e .)"
    return found


def test_planq_demo_runs_the_lifecycle_and_a_cancel_in_one_process(tmp_path: Path) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANQ_")}
    env.update(CI="true", TMPDIR=str(tmp_path), PYTHONWARNINGS="default")

    began = time.monotonic()
    proc = subprocess.run(
        [_planq(), "demo"],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    elapsed = time.monotonic() - began
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{proc.stderr}"
    assert elapsed < 30, f"demo took {elapsed:.1f}s\n{out}"

    for label in ("Strategize/COMPLETE", "Execute/COMPLETE", "Apply/COMPLETE"):
        assert label in out, out
    assert "Strategize/CANCELLED" in out, out
    # rich wraps at the console's width, which depends on the environment: read it unwrapped
    assert re.search(r"-> cancelled at \d+%.*cancel latency \d+ ms", " ".join(out.split())), out
    assert "Traceback" not in out + proc.stderr, proc.stderr
    assert "No hostname was supplied" not in out + proc.stderr, proc.stderr

    # Nothing leaks into the working directory (the beat works on the demo's own ledger).
    assert list(work.iterdir()) == []

    # The ledger the demo printed holds what it showed: three phases done, one cancelled.
    match = re.search(r"ledger: sqlite:///(\S+planq\.db)", out)
    assert match, out
    ledger = Path(match.group(1))
    assert ledger.is_relative_to(tmp_path)
    db = Database(f"sqlite:///{ledger}")
    try:
        jobs, plans = sql_ledger(db)
        statuses = sorted(job.status for job in jobs.list_all())
        labels = sorted(plan.label for plan in plans.list_all())
    finally:
        db.close()
    # and the pipeline's plan: three phases more, it waited at its gate and was approved
    assert statuses == sorted([AsyncJobStatus.succeeded] * 6 + [AsyncJobStatus.cancelled])
    assert labels == ["Apply/COMPLETE", "Apply/COMPLETE", "Strategize/CANCELLED"]
    assert "waiting at its gate: plan Execute/COMPLETE" in out, out
    assert "approved apply (demo-operator)" in out, out


def test_demo_refuses_tasks_bound_to_another_app(tmp_path: Path) -> None:
    """A planq task shared from another app (its closure, its ledger) is detected."""

    def settings(name: str) -> PlanqSettings:
        return load_settings(broker_url="memory://", database_url=f"sqlite:///{tmp_path / name}")

    other = bootstrap(settings("other.db"))
    other.finalize()
    app = bootstrap(settings("demo.db"))
    app.finalize()
    assert foreign_tasks(app) == []

    name = "planq.maintenance.relay_dispatch"
    app.tasks.unregister(name)
    app.tasks.register(other.tasks[name])  # what a shared @app.task would do
    assert foreign_tasks(app) == [name]
