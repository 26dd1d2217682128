"""The built wheel installs under one `planq` namespace, beside a Celery project's `tasks.py`.

planq used to install `cli`, `domain`, `store`, `tasks` and `worker_config` as top-level
modules: a project with its own `tasks.py` (Celery's convention) then got
`ModuleNotFoundError: No module named 'tasks.maintenance'; 'tasks' is not a package`.
Here the wheel goes into a fresh virtual environment (its dependencies come from this
one's site-packages, read as a plain path, so the editable install is not seen), and a
real worker started in a project folder with its own `tasks.py` runs a plan's job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from tests.support import REDIS_TEST_URL, flush_redis

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
OWN_FOLDERS = {"cli", "domain", "store", "tasks", "worker_config"}

USER_TASKS = '''
"""The project's own tasks module, as Celery's tutorials name it."""

def add(x, y):
    return x + y
'''

PRODUCER = "\n".join(
    [
        "import tasks  # the project's own module, not planq's",
        "from planq.worker_config import client",
        "assert tasks.add(2, 3) == 5",
        'plan = client.create_plan(["one", "two"], name="beside-a-project")',
        'result = client.queue_phase(plan.plan_id, "strategize")',
        'print(client.wait_for_job(result.id, timeout=60)["status"])',
    ]
)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with only the built wheel installed (dependencies read from ours)."""
    base = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(base), str(ROOT)],
        check=True,
        timeout=300,
        cwd=base,
    )
    (wheel,) = base.glob("planq-*.whl")
    env_dir = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--quiet",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    # Our dependencies as a plain path entry: its .pth files (our editable planq) stay unread.
    (site / "planq_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env_dir


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def test_site_packages_holds_one_planq_namespace(venv: Path) -> None:
    top = {p.name for p in site_packages(venv).iterdir()}
    assert "planq" in top
    assert not OWN_FOLDERS & top, OWN_FOLDERS & top
    installed = {p.name for p in (site_packages(venv) / "planq").iterdir()}
    assert installed >= OWN_FOLDERS
    assert (site_packages(venv) / "planq" / "worker_config" / "py.typed").exists()


def test_a_worker_runs_a_job_beside_the_projects_own_tasks_module(
    venv: Path, tmp_path: Path
) -> None:
    flush_redis(REDIS_TEST_URL)
    project = tmp_path / "project"
    project.mkdir()
    (project / "tasks.py").write_text(textwrap.dedent(USER_TASKS))
    (project / "produce.py").write_text(textwrap.dedent(PRODUCER))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLANQ_", "PYTHON"))}
    env |= {
        "PLANQ_BROKER_URL": REDIS_TEST_URL,
        "PLANQ_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.db'}",
    }
    python = str(venv / "bin" / "python")
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [
            python,
            "-m",
            "celery",
            "-A",
            "planq.worker_config",
            "worker",
            "-P",
            "threads",
            "-c",
            "2",
            "--without-mingle",
            "--without-gossip",
            "-n",
            "beside@%h",
        ],
        env=env,
        cwd=project,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        done = subprocess.run(
            [python, "produce.py"],
            env=env,
            cwd=project,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr + (tmp_path / "worker.log").read_text()
        assert done.stdout.strip().splitlines()[-1] == "succeeded"
        assert (
            "planq"
            in subprocess.run(
                [
                    python,
                    "-c",
                    "import planq.tasks, tasks; print(planq.tasks.__file__, tasks.__file__)",
                ],
                env=env,
                cwd=project,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
    finally:
        worker.terminate()
        worker.wait(30)
        log.close()
