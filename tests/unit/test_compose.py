"""docker-compose.yml, .env.example and Dockerfile stay true to the code, with no Docker engine.

The YAML is parsed (anchors and merge keys resolved) and checked against what it names: the
Celery and Flower command-line options, PlanqSettings' fields and defaults, the queues, the
`planq` CLI and the commands the native fleet tests run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from celery.bin.beat import beat as celery_beat
from celery.bin.control import inspect as celery_inspect
from celery.bin.worker import worker as celery_worker
from flower.command import is_flower_envvar
from flower.options import default_options as flower_options

from planq.worker_config.celery_config import ALL_QUEUES
from planq.worker_config.settings import PlanqSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"

SERVICES = {"redis", "postgres", "migrate", "worker", "beat", "flower", "api"}
PLANQ_SERVICES = {"migrate", "worker", "beat", "flower", "api"}
PLANQ_PHASES = ("strategize", "execute", "apply")
#: Settings only `planq api` reads: the other services are not given its token.
API_ONLY = {"PLANQ_API_TOKEN", "PLANQ_API_OPEN_READS", "PLANQ_FLOWER_URL"}
#: Read by compose itself (the worker's command line), never by planq's settings.
COMPOSE_KNOBS = {"PLANQ_WORKER_CONCURRENCY", "PLANQ_WORKER_QUEUES"}
#: Settings whose compose default is the fleet's own address, not planq's local default.
FLEET_ADDRESSES = {"PLANQ_BROKER_URL"}
#: Environment keys whose value is a credential: only ever a required ${...} reference.
SECRET_KEY = re.compile(r"PASSWORD|SECRET|TOKEN|BASIC_AUTH|API_KEY")
#: ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}; not $${...}.
INTERPOLATION = re.compile(r"(?<!\$)\$\{(?P<name>[A-Za-z_]\w*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}")


def load_compose() -> dict[str, Any]:
    """docker-compose.yml as compose sees it before interpolation."""
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation of one string: ${...} from env or its default, $$ -> $."""

    def value(m: re.Match[str]) -> str:
        name, op, arg = m["name"], m["op"] or "", m["arg"] or ""
        present = bool(env.get(name)) if op.startswith(":") else name in env
        if op.endswith("?") and not present:
            raise KeyError(f"{name}: {arg}")
        if op.endswith("-"):
            return env[name] if present else arg
        if op.endswith("+"):
            return arg if present else ""
        return env.get(name, "")

    return INTERPOLATION.sub(value, text).replace("$$", "$")


def argv(service: dict[str, Any]) -> list[str]:
    """A service's command as an argument list (compose accepts a list or a string)."""
    command = service["command"]
    return list(command) if isinstance(command, list) else shlex.split(command)


def strings(node: Any) -> Iterator[str]:
    """Every string value (and mapping key) in a parsed YAML tree."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)


def interpolations(compose: dict[str, Any]) -> dict[str, set[str]]:
    """Variable name -> the set of (op, arg) forms it is used with."""
    found: dict[str, set[str]] = {}
    for text in strings(compose):
        for m in INTERPOLATION.finditer(text):
            found.setdefault(m["name"], set()).add(f"{m['op'] or ''}{m['arg'] or ''}")
    return found


def env_example() -> dict[str, str]:
    """NAME=value assignments of .env.example."""
    pairs = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, value = line.partition("=")
            assert sep, f".env.example: not NAME=value: {line!r}"
            pairs[name.strip()] = value.strip()
    return pairs


def environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a mapping (compose accepts a mapping or KEY=VALUE list)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {str(k): str(v) for k, v in env.items()}


def parse_options(command: click.Command, args: list[str]) -> dict[str, Any]:
    """Parse args with a Celery click command's own option parser (raises on an unknown one)."""
    parser = command.make_parser(click.Context(command))
    options, extra, _ = parser.parse_args(list(args))
    assert not extra, f"unexpected arguments {extra}"
    return options


def seconds(duration: str) -> float:
    """A compose duration such as '6m' or '1m30s' in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The parsed compose file."""
    return load_compose()


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The compose services by name."""
    return compose["services"]  # type: ignore[no-any-return]


def test_the_six_services_exist(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == SERVICES
    for name in PLANQ_SERVICES:
        assert services[name]["image"] == "planq:latest" and services[name]["build"] == "."


def test_worker_scales_and_runs_the_native_worker_command(
    services: dict[str, dict[str, Any]],
) -> None:
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert not any("container_name" in s for s in services.values())
    args = argv(worker)
    assert args[:4] == ["celery", "-A", "planq.worker_config", "worker"]
    options = parse_options(celery_worker, [interpolate(a, {}) for a in args[4:]])
    assert options["pool"] == "prefork"
    assert int(options["concurrency"]) >= 1
    assert options["queues"].split(",") == ALL_QUEUES  # every queue, the runs queue included
    assert options["hostname"] == "worker@%h"
    # Warm shutdown lets running jobs finish: give it longer than the default job timeout.
    assert seconds(worker["stop_grace_period"]) > PlanqSettings().job_timeout
    assert worker["init"] is True


def test_beat_and_flower_commands_parse(services: dict[str, dict[str, Any]]) -> None:
    beat = argv(services["beat"])
    assert beat[:4] == ["celery", "-A", "planq.worker_config", "beat"]
    schedule = parse_options(celery_beat, beat[4:])["schedule"]
    mount = next(v for v in services["beat"]["volumes"] if v.endswith(str(Path(schedule).parent)))
    assert mount.split(":")[0] in load_compose()["volumes"]  # a named volume: it survives

    flower = argv(services["flower"])
    assert flower[:4] == ["celery", "-A", "planq.worker_config", "flower"]
    for arg in flower[4:]:  # tornado options: only --name=value is understood
        name, sep, _ = arg.removeprefix("--").partition("=")
        assert sep and name in flower_options, arg
    assert "--port=5555" in flower
    assert any(p.endswith(":5555") for p in services["flower"]["ports"])


def test_commands_are_the_ones_the_native_fleet_tests_run(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import tests.celery_support as support
    from tests.acceptance.flower_support import flower_command

    started: list[list[str]] = []

    class Recorder:
        def __init__(self, args: list[str], **_: Any) -> None:
            started.append(args)

    monkeypatch.setattr(support.subprocess, "Popen", Recorder)
    support.WorkerProcess({}, "w1")
    support.BeatProcess({}, "b1", tmp_path / "schedule", tmp_path / "beat.log")
    native = [*started, flower_command(5555)]
    python_m_celery = [sys.executable, "-m", "celery"]
    for args, name in zip(native, ["worker", "beat", "flower"], strict=True):
        assert args[:3] == python_m_celery
        assert ["celery", *args[3:6]] == argv(services[name])[:4]


def test_depends_on_waits_for_healthy_services_and_the_migration(
    services: dict[str, dict[str, Any]],
) -> None:
    ready = {
        "redis": "service_healthy",
        "postgres": "service_healthy",
        "migrate": "service_completed_successfully",
    }
    for name in ("worker", "beat"):
        assert {k: v["condition"] for k, v in services[name]["depends_on"].items()} == ready
    migrate = services["migrate"]
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert migrate["restart"] == "no"
    assert argv(migrate) == ["planq", "db", "upgrade"]
    assert services["flower"]["depends_on"] == {"redis": {"condition": "service_healthy"}}
    for service in services.values():  # whatever is waited on as healthy has a healthcheck
        for dep, spec in (service.get("depends_on") or {}).items():
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], dep


def test_the_api_runs_planq_api_with_a_required_token(
    services: dict[str, dict[str, Any]],
) -> None:
    import typer.main

    from planq.cli.main import app

    api = services["api"]
    args = argv(api)
    assert args[:2] == ["planq", "api"]
    command = typer.main.get_command(app).commands["api"]  # type: ignore[attr-defined]
    params = command.make_context("api", args[2:]).params  # the CLI's own option parser
    assert params["host"] == "0.0.0.0" and any(
        p.endswith(f":{params['port']}") for p in api["ports"]
    )
    assert environment(api)["PLANQ_API_TOKEN"].startswith("${PLANQ_API_TOKEN:?")
    assert f"127.0.0.1:{params['port']}/healthz" in " ".join(api["healthcheck"]["test"])


def test_planq_db_upgrade_is_a_cli_command() -> None:
    from typer.testing import CliRunner

    from planq.cli.main import app

    result = CliRunner().invoke(app, ["db", "upgrade", "--help"])
    assert result.exit_code == 0, result.output


def test_every_long_running_service_has_a_healthcheck(
    services: dict[str, dict[str, Any]],
) -> None:
    def check(name: str) -> str:
        test = services[name]["healthcheck"]["test"]
        assert test[0] in {"CMD", "CMD-SHELL"}
        return " ".join(test[1:])

    assert set(services) - {"migrate"} <= {n for n, s in services.items() if "healthcheck" in s}
    assert check("redis") == "redis-cli ping"
    assert check("postgres").startswith("pg_isready")
    ping = shlex.split(check("worker"))
    assert ping[:5] == ["celery", "-A", "planq.worker_config", "inspect", "ping"]
    options = parse_options(celery_inspect, ping[5:])
    assert options["destination"] == "worker@$$HOSTNAME"  # $$: the container's shell expands it
    assert "http://127.0.0.1:5555/healthcheck" in check("flower")


def test_redis_never_evicts_and_keeps_an_append_only_file(
    services: dict[str, dict[str, Any]],
) -> None:
    args = argv(services["redis"])
    assert args[0] == "redis-server" and services["redis"]["image"] == "redis:7"
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert args[args.index("--appendonly") + 1] == "yes"
    assert services["postgres"]["image"] == "postgres:16"
    assert any(v.startswith("postgres-data:") for v in services["postgres"]["volumes"])


def test_env_names_are_documented_in_env_example(compose: dict[str, Any]) -> None:
    used = set(interpolations(compose))
    documented = set(env_example())
    assert used - documented == set(), "used in docker-compose.yml, missing from .env.example"
    assert documented - used == set(), "in .env.example, never read by docker-compose.yml"


def test_planq_names_are_settings_fields(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    fields = set(PlanqSettings.model_fields)
    passed = {k for s in services.values() for k in environment(s) if k.startswith("PLANQ_")}
    assert passed, "the planq services get no PLANQ_* setting"
    assert {k.removeprefix("PLANQ_").lower() for k in passed} - fields == set()
    assert passed & COMPOSE_KNOBS == set()
    read = {n for n in interpolations(compose) if n.startswith("PLANQ_")}
    assert {n.removeprefix("PLANQ_").lower() for n in read - COMPOSE_KNOBS} - fields == set()
    for name in PLANQ_SERVICES:  # one anchor: every planq process sees the same settings
        assert passed - API_ONLY <= set(environment(services[name]))
    assert set(environment(services["api"])) >= API_ONLY


def test_defaults_match_the_settings_and_env_example(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    example = env_example()
    defaults: dict[str, str] = {}
    for name, forms in interpolations(compose).items():
        for form in forms:
            if form.startswith(":-"):
                defaults[name] = form[2:]
                assert example[name] == defaults[name], f"{name}: .env.example differs"
    for key in [k for k in os.environ if k.startswith("PLANQ_")]:
        monkeypatch.delenv(key)
    baseline = PlanqSettings()
    settings_defaults = {
        k: v
        for k, v in defaults.items()
        if k.startswith("PLANQ_") and k not in COMPOSE_KNOBS | FLEET_ADDRESSES
    }
    assert len(settings_defaults) >= 10
    for name, value in settings_defaults.items():
        monkeypatch.setenv(name, value)
    from_compose = PlanqSettings()
    for name in settings_defaults:
        field = name.removeprefix("PLANQ_").lower()
        assert getattr(from_compose, field) == getattr(baseline, field), name


def test_no_secret_is_written_in_the_file(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    required = re.compile(r"\$\{[A-Z_]+:\?[^}]*\}")
    for name, service in services.items():
        for key, value in environment(service).items():
            if SECRET_KEY.search(key):
                assert required.fullmatch(value), f"{name}.{key} must be a required ${{...}}"
    userinfo = re.compile(r"://(?P<user>[^/@\s]+)@")
    for text in strings(compose):
        for m in userinfo.finditer(text):
            literal = INTERPOLATION.sub("", m["user"]).replace(":", "")
            assert literal == "", f"credentials written in a URL: {text}"
    assert "POSTGRES_PASSWORD" in environment(services["postgres"])
    assert "${POSTGRES_PASSWORD:?" in environment(services["worker"])["PLANQ_DATABASE_URL"]


def test_flower_has_basic_auth_from_the_environment(services: dict[str, dict[str, Any]]) -> None:
    env = environment(services["flower"])
    assert env["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")
    for key in (k for k in env if k.startswith("FLOWER_")):
        assert is_flower_envvar(key), f"Flower does not read {key}"
    assert "basic_auth" in flower_options
    user, sep, password = env_example()["FLOWER_BASIC_AUTH"].partition(":")
    assert user and sep and password  # the user:password form Flower expects


def test_dockerfile_installs_the_package_without_dev_deps_as_a_non_root_user() -> None:
    lines = [x.strip() for x in (ROOT / "Dockerfile").read_text().splitlines()]
    lines = [x for x in lines if x and not x.startswith("#")]
    dockerfile = "\n".join(lines)  # the instructions, without comments
    assert lines[0] == "FROM python:3.11-slim"
    assert re.search(r"pip install --no-deps \.(\s|$)", dockerfile) and "[dev]" not in dockerfile
    users = [x.split()[1] for x in lines if x.startswith("USER ")]
    assert users and users[-1] not in {"root", "0"}
    assert "/var/lib/planq/beat" in dockerfile  # the beat volume's mount point, owned by it
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for package in {name.split(".")[1] for name in project["tool"]["setuptools"]["packages"]}:
        assert f"COPY {package} ./{package}" in dockerfile, f"package {package} not copied"
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".env", ".venv", ".git", "tests"} <= ignored
    assert not {"README.md", "pyproject.toml"} & ignored  # pip install . needs them


def test_the_dependencies_are_a_layer_of_their_own_before_the_source() -> None:
    """A code change rebuilds only the last layers, not the dependencies.

    They come from pyproject.toml alone, installed before any source is copied; the source
    then installs without them.
    """
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")  # continued lines joined
    steps = [x.strip() for x in text.splitlines() if x.startswith(("COPY ", "RUN "))]
    copies = [i for i, x in enumerate(steps) if x.startswith("COPY ")]
    first_source = next(i for i in copies if steps[i] != "COPY pyproject.toml ./")
    assert steps[copies[0]] == "COPY pyproject.toml ./" and copies[0] < first_source
    deps = [x for x in steps[copies[0] : first_source] if "pip install -r" in x]
    assert deps and "['project']['dependencies']" in deps[0]  # read from pyproject.toml
    assert all("pip install" not in x or "--no-deps" in x for x in steps[first_source:])


def test_the_image_gets_the_redis_transport_dependencies() -> None:
    """kombu.transport.redis imports `packaging`, which only the `redis` extra installs.

    A dev venv has it through pytest; a clean `pip install .` (the image) must ask for it.
    """
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = [Requirement(r) for r in project["dependencies"]]
    dockerfile = (ROOT / "Dockerfile").read_text()
    pip = re.search(r"pip install \. (?P<extra>[^&\n]*)", dockerfile)
    if pip:
        installed += [Requirement(r) for r in shlex.split(pip["extra"])]
    assert any(r.name in {"kombu", "celery"} and "redis" in r.extras for r in installed)


# -- the docs' Docker page (docs/compose.md, the README's section until issue 35) --------------
def readme_docker_section() -> str:
    """docs/compose.md, "Fleet with docker compose"."""
    text = (ROOT / "docs" / "compose.md").read_text()
    assert text.startswith("# Fleet with docker compose\n")
    return text


def readme_blocks(lang: str) -> list[str]:
    """The section's fenced blocks in lang."""
    return re.findall(rf"^```{lang}\n(.*?)^```", readme_docker_section(), re.S | re.M)


def test_the_readme_counts_and_names_the_services_of_the_compose_file(
    services: dict[str, dict[str, Any]],
) -> None:
    words = {5: "five", 7: "seven"}
    first = readme_docker_section().split("\n\n")[1]  # the paragraph that describes the file
    assert f"{words[len(services)]} services" in first
    planq = {name for name, s in services.items() if s.get("image") == "planq:latest"}
    assert planq == PLANQ_SERVICES and f"{words[len(planq)]} planq services" in first
    for name in services:
        assert re.search(rf"\b{name}\b", first, re.I), f"{name} is not named in the README"


def test_the_readme_overrides_merge_onto_the_compose_services(
    services: dict[str, dict[str, Any]],
) -> None:
    mounted, derived = (yaml.safe_load(block) for block in readme_blocks("yaml"))
    worker = mounted["services"]["worker"]
    assert set(mounted["services"]) == {"worker"}  # only workers run executors
    (mount,) = worker["volumes"]
    source, target, mode = mount.split(":")
    assert worker["environment"]["PYTHONPATH"] == target and mode == "ro"
    executors = json.loads(worker["environment"]["PLANQ_EXECUTORS"])
    assert "executors" in PlanqSettings.model_fields and set(executors) <= set(PLANQ_PHASES)
    assert all(ref.partition(":")[0] == "myjobs" for ref in executors.values())
    assert source.startswith("./")  # relative to the compose file
    assert set(derived["services"]) == PLANQ_SERVICES  # every planq service on the image
    assert all(s["image"] != "planq:latest" and s["build"] for s in derived["services"].values())
    (dockerfile,) = readme_blocks("dockerfile")
    assert dockerfile.startswith("# myjobs/Dockerfile") and "FROM planq:latest" in dockerfile
    assert dockerfile.strip().splitlines()[-1] == "USER planq"  # back to the non-root user
    (pyproject,) = readme_blocks("toml")
    entry_points = tomllib.loads(pyproject)["project"]["entry-points"]["planq.executors"]
    assert set(entry_points) <= set(PLANQ_PHASES) and entry_points == executors
