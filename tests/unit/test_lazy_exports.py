"""planq.domain and planq.store keep their public names, loaded on first use (PEP 562).

The packages list each name twice (`__all__`, and the module it lives in); these tests hold the
two lists to each other and to the modules, and show that importing one submodule no longer
imports every module the package names.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from types import ModuleType

import pytest

PACKAGES = ["planq.domain", "planq.domain.runs", "planq.store"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_is_listed_and_resolves_to_its_module(name: str) -> None:
    package: ModuleType = importlib.import_module(name)
    exports: dict[str, tuple[str, ...]] = package.EXPORTS
    listed = {n for names in exports.values() for n in names}
    assert set(package.__all__) - listed <= {"sql_ledger"} and listed <= set(package.__all__)
    for module, names in exports.items():
        home = importlib.import_module(module)
        for attribute in names:
            assert getattr(package, attribute) is getattr(home, attribute)
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        _ = package.Nope


def test_from_imports_still_work() -> None:
    from planq.domain import AsyncJob, Plan, run_or_resume
    from planq.store import Database, InMemoryJobStore, sql_ledger

    assert AsyncJob.__module__ == "planq.domain.jobs" and Plan.__name__ == "Plan"
    assert callable(run_or_resume) and callable(sql_ledger)
    assert Database.__module__ == "planq.store.database" and InMemoryJobStore.__name__


def test_one_submodule_does_not_import_the_package_names() -> None:
    probe = (
        "import json, sys; import planq.store.sql_jobs, planq.store.sql_plans, planq.domain.ids;"
        " print(json.dumps(sorted(m for m in sys.modules if m.startswith('planq.'))))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))
    unneeded = {
        "planq.store.memory",
        "planq.store.runs_sql",
        "planq.store.runs_memory",
        "planq.domain.runs.engine",
        "planq.domain.lifecycle",
    }
    assert loaded & unneeded == set(), sorted(loaded & unneeded)
