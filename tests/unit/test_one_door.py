"""One door per concern, kept so: the checks that a second door would fail."""

from __future__ import annotations

import ast
from pathlib import Path

from alembic.script import ScriptDirectory

from planq.store.migrate import HEAD_REVISION, alembic_config, migrate_sqlite

ROOT = Path(__file__).resolve().parents[2]
SOURCE_PACKAGES = ("domain", "store", "tasks", "worker_config", "cli")


def source_modules() -> list[Path]:
    return [path for package in SOURCE_PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]


#: The signals of a worker's (or beat's) start, processes and stop.
LIFECYCLE_SIGNALS = {
    "celeryd_init",
    "after_setup_logger",
    "after_setup_task_logger",
    "worker_init",
    "worker_process_init",
    "worker_process_shutdown",
    "worker_shutting_down",
    "worker_ready",
    "worker_shutdown",
    "beat_init",
    "task_prerun",
    "task_revoked",
}


def signals_imported(path: Path) -> set[str]:
    """The celery.signals names a module imports (`import celery.signals` counts as all)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "celery.signals":
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import) and any(a.name == "celery.signals" for a in node.names):
            names.update(LIFECYCLE_SIGNALS)
    return names


def test_worker_start_and_stop_are_connected_in_tasks_signals_only() -> None:
    # (cli/demo.py counts the maintenance tasks it shows with a task_postrun observer.)
    listeners = {
        str(path.relative_to(ROOT)): sorted(signals_imported(path) & LIFECYCLE_SIGNALS)
        for path in source_modules()
        if signals_imported(path) & LIFECYCLE_SIGNALS
    }
    assert list(listeners) == ["tasks/signals.py"]


def test_no_module_level_registry_of_apps() -> None:
    holders = [
        str(path.relative_to(ROOT))
        for path in source_modules()
        if "WeakKeyDictionary" in path.read_text()
    ]
    assert holders == []  # per-app state lives on the app's RuntimeHolder (`app.planq`)


def test_the_head_revision_constant_is_the_migrations_head() -> None:
    heads = ScriptDirectory.from_config(alembic_config("sqlite:///unused.db")).get_heads()
    assert heads == [HEAD_REVISION]


def test_a_sqlite_ledger_migrates_itself_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert migrate_sqlite(url) is True  # a new file: migrated
    assert migrate_sqlite(url) is False  # current: one catalogue query, nothing done


def test_postgresql_is_never_migrated_automatically() -> None:
    # No connection is attempted: the URL's backend decides (port 1 would refuse).
    assert migrate_sqlite("postgresql://planq@127.0.0.1:1/nowhere") is False


def calls_of(path: Path, names: set[str]) -> set[str]:
    """The names in `names` a module calls (plain or attribute calls)."""
    called: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in names:
                called.add(name)
    return called


def test_only_bootstrap_builds_an_app_and_its_runtime() -> None:
    # The composition root is worker_config/bootstrap.py; every entry point calls it.
    builders = {
        str(path.relative_to(ROOT)): sorted(found)
        for path in source_modules()
        if (found := calls_of(path, {"Celery", "attach_runtime", "RuntimeHolder"}))
    }
    assert builders == {
        "worker_config/bootstrap.py": ["Celery", "attach_runtime"],
        "tasks/runtime.py": ["RuntimeHolder"],  # attach_runtime's own body
    }


def test_a_process_has_one_job_ledger(tmp_path: Path) -> None:
    # The lifecycle's queue and the worker's writes go through the same JobLedger.
    from planq.tasks.runtime import reset_runtime, runtime_for
    from planq.worker_config.bootstrap import bootstrap
    from planq.worker_config.settings import load_settings

    app = bootstrap(
        load_settings(database_url=f"sqlite:///{tmp_path / 'one.db'}", broker_url="memory://")
    )
    try:
        runtime = runtime_for(app)
        assert "worker" not in runtime.__dict__  # no runner until a job runs here
        assert runtime.service.jobs.ledger is runtime.lifecycle.ledger is runtime.ledger
        assert runtime.ledger.enqueue == runtime.publish == runtime.publisher.publish
        assert runtime.worker.ledger is runtime.ledger  # the runner, once built, shares it
        assert runtime.worker.jobs is runtime.service.jobs  # and the one set of job actions
    finally:
        reset_runtime(app)


def test_an_operators_cancel_and_retry_build_no_runner(tmp_path: Path) -> None:
    """The CLI's and the API's process: the service object acts, no tracker or poller exists."""
    from planq.domain.jobs import AsyncJobStatus
    from planq.domain.plans import PlanPhase
    from planq.tasks.runtime import reset_runtime, service_for
    from planq.worker_config.bootstrap import bootstrap
    from planq.worker_config.settings import load_settings

    app = bootstrap(
        load_settings(database_url=f"sqlite:///{tmp_path / 'ops.db'}", broker_url="memory://")
    )
    try:
        service = service_for(app)
        plan = service.plans.create(["one"], name="ops")
        [(_, job)] = service.plans.queue([plan.plan_id], PlanPhase.strategize)
        assert job is not None and job.dispatched_at is not None  # the row as stored
        cancelled = service.jobs.cancel(job.job_id, "cli:ops@host")
        assert cancelled.status is AsyncJobStatus.cancelled
        retried = service.jobs.retry(job.job_id)
        assert (retried.job.attempt, retried.job.retry_of) == (2, job.job_id)
        assert "worker" not in app.planq.get().__dict__  # no runner was built for any of it
    finally:
        reset_runtime(app)
