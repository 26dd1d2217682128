"""CLI start-up stays light: a deterministic guard on what `--help` and listings import.

Wall time on a shared machine is noise; the modules loaded are not. `planq --help` loads none
of celery, kombu, sqlalchemy or fastapi; a listing loads SQLAlchemy for the ledger but never
Celery, kombu, FastAPI, the task modules, or alembic on a migrated ledger.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from planq.store.migrate import upgrade

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("celery", "kombu", "sqlalchemy", "fastapi", "uvicorn", "alembic", "tasks", "redis")
#: What a listing may not load (it reads the ledger through SQLAlchemy, nothing else).
NOT_FOR_LISTINGS = ("celery", "kombu", "fastapi", "uvicorn", "alembic", "tasks", "redis")
#: planq's own modules a job or plan listing has no use for (the packages load them lazily).
NOT_FOR_JOB_LISTINGS = {
    "planq.store.memory",
    "planq.store.runs_sql",
    "planq.store.runs_memory",
    "planq.domain.runs.engine",
    "planq.domain.lifecycle",
    "planq.worker_config.factory",
}

PROBE = """
import json, sys
from planq.cli.main import app
try:
    app(sys.argv[1:], prog_name="planq")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
loaded = sorted({m.split(".")[0] for m in sys.modules})
planq = sorted(m for m in sys.modules if m.startswith("planq."))
print(json.dumps({"code": code, "loaded": loaded, "planq": planq}), file=sys.stderr)
"""


def _env(**values: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PLANQ_")}
    return {**base, **values}


def probe(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """`planq *args` in a fresh interpreter: its exit code, the modules it loaded, stdout."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report: dict[str, Any] = json.loads(done.stderr.strip().splitlines()[-1])
    return {**report, "stdout": done.stdout}


def loaded_by(args: list[str], env: dict[str, str]) -> tuple[int, set[str], str]:
    """(exit code, top-level modules loaded, stdout) of `planq *args` in a fresh interpreter."""
    report = probe(args, env)
    return int(report["code"] or 0), set(report["loaded"]), report["stdout"]


@pytest.mark.parametrize("args", [["--help"], ["plans", "--help"], ["runs", "list", "--help"]])
def test_help_imports_no_heavy_module(args: list[str]) -> None:
    env = _env(PLANQ_DATABASE_URL="postgresql://nobody@127.0.0.1:1/x", PLANQ_JOB_TTL="-1")
    code, loaded, out = loaded_by(args, env)
    assert code == 0 and "Usage" in out
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize(
    "args", [["jobs", "list"], ["plans", "list", "--json"], ["runs", "list"], ["jobs", "show", "x"]]
)
def test_listings_import_no_celery_and_no_api(tmp_path: Path, args: list[str]) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    code, loaded, _ = loaded_by(args, _env(PLANQ_DATABASE_URL=url))
    assert code in (0, 2)  # `jobs show x` is a bad id: exit 2, and still light
    assert loaded.isdisjoint(NOT_FOR_LISTINGS), sorted(loaded & set(NOT_FOR_LISTINGS))
    assert "sqlalchemy" in loaded or args[:2] == ["jobs", "show"]


@pytest.mark.parametrize("args", [["jobs", "list"], ["plans", "list"], ["plans", "show", "ID"]])
def test_job_and_plan_listings_load_no_run_engine_nor_memory_store(
    tmp_path: Path, args: list[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    upgrade(url)
    env = _env(PLANQ_DATABASE_URL=url)
    if args[-1] == "ID":
        created = probe(["plans", "create", "--steps", "a", "--json"], env)
        args = [*args[:-1], json.loads(created["stdout"])["plan_id"]]
    report = probe(args, env)
    assert report["code"] in (0, None), report["stdout"]
    assert set(report["planq"]) & NOT_FOR_JOB_LISTINGS == set()
    assert "planq.store.sql_jobs" in report["planq"]  # it did read the ledger


def test_a_fresh_sqlite_ledger_is_migrated_by_the_first_listing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    code, loaded, out = loaded_by(["plans", "list", "--json"], _env(PLANQ_DATABASE_URL=url))
    assert code == 0 and json.loads(out) == {
        "plans": [],
        "total": 0,
        "total_is_lower_bound": False,
        "limit": 50,
        "offset": 0,
        "next_after": None,
    }
    assert "celery" not in loaded
    assert (tmp_path / "fresh.db").exists()
