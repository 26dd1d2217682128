"""The docker-compose fleet end to end: it runs wherever a Docker engine runs.

`make test-compose` runs it. `make test` never collects tests/docker (pyproject's
norecursedirs), so CI on a machine without Docker, such as the one planq is developed on,
never sees it and nothing is ever skipped. The native fleet tests in tests/acceptance run
the same worker, beat and Flower commands as real processes; this one proves the compose
file, the image and the healthchecks together: `up --wait`, a plan through all three
phases on the scaled workers, Flower behind its basic auth, the API's health, `down -v`.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import wait_for

ROOT = Path(__file__).resolve().parents[1]
FLOWER_PORT, API_PORT = 15555, 18000
AUTH = "ops:compose-test-pass"


def docker_ready() -> None:
    """Fail loudly (never skip) when there is no Docker engine to run the fleet on."""
    if shutil.which("docker") is None:
        pytest.fail("make test-compose needs Docker with the compose plugin: docker not found")
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.fail(f"make test-compose needs a running Docker engine: {probe.stderr.strip()}")


class Fleet:
    """`docker compose` on a project of its own, with a throw-away .env."""

    def __init__(self, env_file: Path) -> None:
        self.base = [
            "docker", "compose", "-p", f"planq-test-{uuid.uuid4().hex[:8]}",
            "--env-file", str(env_file), "-f", str(ROOT / "docker-compose.yml"),
        ]  # fmt: skip

    def compose(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.base, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"compose {args}: {done.stdout}\n{done.stderr}"
        return done

    def planq(self, *args: str) -> dict[str, object]:
        """A `planq … --json` command inside a worker container; its JSON document."""
        done = self.compose("exec", "-T", "worker", "planq", *args, "--json", timeout=600)
        document: dict[str, object] = json.loads(done.stdout)
        return document


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    docker_ready()
    env_file = tmp_path / ".env"
    env_file.write_text(
        "\n".join(
            [
                "POSTGRES_USER=planq",
                "POSTGRES_PASSWORD=compose-test-db-pass",
                "POSTGRES_DB=planq",
                f"FLOWER_BASIC_AUTH={AUTH}",
                f"FLOWER_PUBLISH=127.0.0.1:{FLOWER_PORT}",
                "PLANQ_API_TOKEN=compose-test-token",
                f"API_PUBLISH=127.0.0.1:{API_PORT}",
                "PLANQ_JOB_TIMEOUT=60",
                "",
            ]
        )
    )
    fleet = Fleet(env_file)
    try:
        fleet.compose("up", "-d", "--build", "--wait", "--scale", "worker=2", timeout=1800)
        yield fleet
    finally:
        subprocess.run([*fleet.base, "down", "-v", "--remove-orphans"], cwd=ROOT, timeout=300)


def http_get(url: str, auth: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_a_plan_runs_all_three_phases_on_the_compose_fleet(fleet: Fleet) -> None:
    plan_id = str(fleet.planq("plans", "create", "--steps", "survey:1,score:1")["plan_id"])
    for phase in ("strategize", "execute", "apply"):
        fleet.planq("plans", phase, plan_id)
        watch = ("plans", "watch", plan_id, "--timeout", "300")
        fleet.compose("exec", "-T", "worker", "planq", *watch)  # exit 0: the job succeeded

    shown = json.dumps(fleet.planq("plans", "show", plan_id))
    assert shown.count('"succeeded"') == 3, shown  # one succeeded job per phase

    assert http_get(f"http://127.0.0.1:{FLOWER_PORT}/api/workers")[0] == 401  # auth is on

    def both_workers() -> dict[str, object] | None:  # once they answer Flower's inspect
        status, body = http_get(f"http://127.0.0.1:{FLOWER_PORT}/api/workers?refresh=1", AUTH)
        workers: dict[str, object] = json.loads(body or b"{}") if status == 200 else {}
        return workers if len(workers) >= 2 else None

    wait_for(both_workers, timeout=60, interval=1.0, what="Flower to list both workers")
    assert http_get(f"http://127.0.0.1:{API_PORT}/healthz")[0] == 200
