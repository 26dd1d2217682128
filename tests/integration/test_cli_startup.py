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

import pytest

from planq.store.migrate import upgrade

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("celery", "kombu", "sqlalchemy", "fastapi", "uvicorn", "alembic", "tasks", "redis")
#: What a listing may not load (it reads the ledger through SQLAlchemy, nothing else).
NOT_FOR_LISTINGS = ("celery", "kombu", "fastapi", "uvicorn", "alembic", "tasks", "redis")

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
print(json.dumps({"code": code, "loaded": loaded}), file=sys.stderr)
"""


def _env(**values: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PLANQ_")}
    return {**base, **values}


def loaded_by(args: list[str], env: dict[str, str]) -> tuple[int, set[str], str]:
    """(exit code, top-level modules loaded, stdout) of `planq *args` in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return int(report["code"] or 0), set(report["loaded"]), done.stdout


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
