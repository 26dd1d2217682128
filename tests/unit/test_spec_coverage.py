"""The guard: every seed scenario and spec test has a test marked as following it.

It parses docs/spec/async_jobs.feature.txt (Scenario titles) and
recoverable_runs.rs.txt (its #[test] / #[tokio::test] fns), reads every test module's
`@pytest.mark.spec("async_jobs: <title>")` / `("recoverable_runs: <fn>")` decorators with
ast (no import, no collection: deterministic), and fails naming each scenario or test
without a marked test, and each marker naming nothing in the seeds.

docs/spec/ holds verbatim copies of the seeds (../shared/seeds/), so a clone alone is
enough to run the guard; where the shared folder is present, the copies must equal it.
"""

from __future__ import annotations

import ast
import os
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
SEEDS = Path(os.environ.get("PLANQ_SPEC_SEEDS", ROOT / "docs" / "spec"))
#: Where the seeds are published beside the repository (absent in a lone clone).
SHARED_SEEDS = ROOT.parent / "shared" / "seeds"
FEATURE = SEEDS / "async_jobs.feature.txt"
RUST = SEEDS / "recoverable_runs.rs.txt"

SCENARIO = re.compile(r"^\s*Scenario(?: Outline)?:\s*(?P<title>.+?)\s*$", re.MULTILINE)
RUST_TEST = re.compile(r"#\[(?:tokio::)?test[^\]]*\]\s*(?:async\s+)?fn\s+(?P<name>\w+)")

#: marker prefix -> the seed it refers to
SPECS = ("async_jobs", "recoverable_runs")


def scenario_titles(text: str) -> list[str]:
    """The Scenario titles of a Gherkin feature, in order."""
    return [m["title"] for m in SCENARIO.finditer(text)]


def rust_test_names(text: str) -> list[str]:
    """The names of a Rust file's #[test] and #[tokio::test] functions."""
    return [m["name"] for m in RUST_TEST.finditer(text)]


def _is_spec_mark(node: ast.expr) -> bool:
    """Whether node is `pytest.mark.spec` (or `mark.spec`)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "spec"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    )


def spec_markers(source: str, where: str) -> tuple[dict[str, list[str]], list[str]]:
    """(marker reference -> tests carrying it, problems) for one module's source."""
    found: dict[str, list[str]] = defaultdict(list)
    problems: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            if not (isinstance(deco, ast.Call) and _is_spec_mark(deco.func)):
                continue
            test = f"{where}::{node.name}"
            args = deco.args
            if len(args) != 1 or not (
                isinstance(args[0], ast.Constant) and isinstance(args[0].value, str)
            ):
                problems.append(f"{test}: spec marker needs one literal string")
                continue
            if not node.name.startswith("test_"):
                problems.append(f"{test}: spec marker on a function pytest does not collect")
            found[args[0].value].append(test)
    return found, problems


def collect_markers(root: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Every spec marker of every test module under root."""
    found: dict[str, list[str]] = defaultdict(list)
    problems: list[str] = []
    for path in sorted(root.rglob("*.py")):
        where = str(path.relative_to(root.parent))
        marks, issues = spec_markers(path.read_text(encoding="utf-8"), where)
        for ref, tests in marks.items():
            found[ref].extend(tests)
        problems.extend(issues)
    return found, problems


def coverage_problems(
    titles: list[str], rust_tests: list[str], markers: dict[str, list[str]]
) -> list[str]:
    """What is uncovered, and what markers name that the seeds do not have."""
    expected = {f"async_jobs: {t}" for t in titles} | {f"recoverable_runs: {n}" for n in rust_tests}
    problems = [f"no test follows {ref!r}" for ref in sorted(expected - markers.keys())]
    for ref in sorted(markers.keys() - expected):
        prefix = ref.split(":", 1)[0]
        why = "not in the seeds" if prefix in SPECS else "unknown spec prefix"
        problems.append(f"{', '.join(markers[ref])}: marker {ref!r}: {why}")
    return problems


def test_the_seeds_parse_to_87_scenarios_and_7_rust_tests() -> None:
    assert FEATURE.is_file() and RUST.is_file(), f"the seed specs are missing under {SEEDS}"
    titles = scenario_titles(FEATURE.read_text(encoding="utf-8"))
    names = rust_test_names(RUST.read_text(encoding="utf-8"))
    assert len(titles) == 87 and len(set(titles)) == 87, "a Scenario title is missing or twice"
    assert len(names) == 7 and len(set(names)) == 7
    assert "runstatus_parse_is_symmetric" in names


def test_the_vendored_seeds_are_the_published_ones() -> None:
    published = [SHARED_SEEDS / f.name for f in (FEATURE, RUST)]
    if all(p.is_file() for p in published):  # beside the repository: must not drift
        assert [p.read_bytes() for p in published] == [FEATURE.read_bytes(), RUST.read_bytes()]
    assert FEATURE.read_bytes().count(b"Scenario:") == 87  # the copy is whole in any case


def test_every_spec_scenario_and_test_has_a_marked_test() -> None:
    titles = scenario_titles(FEATURE.read_text(encoding="utf-8"))
    names = rust_test_names(RUST.read_text(encoding="utf-8"))
    markers, problems = collect_markers(TESTS)
    problems += coverage_problems(titles, names, markers)
    assert not problems, "spec coverage:\n  " + "\n  ".join(problems)


# -- the guard itself catches what it must ------------------------------------------------------

FAKE_FEATURE = """Feature: x
  Scenario: First one
    Given a thing
  Scenario Outline: Second one
    Given <n> things
"""

FAKE_RUST = """
fn helper() {}
#[test]
fn plain_test() {}
#[tokio::test]
    async fn async_test() {}
"""


def test_parsers_read_titles_and_rust_test_names_only() -> None:
    assert scenario_titles(FAKE_FEATURE) == ["First one", "Second one"]
    assert rust_test_names(FAKE_RUST) == ["plain_test", "async_test"]


def test_guard_names_uncovered_unknown_and_malformed_markers() -> None:
    source = """
import pytest

@pytest.mark.spec("async_jobs: First one")
def test_a(): ...

@pytest.mark.spec("async_jobs: No such scenario")
def test_b(): ...

@pytest.mark.spec("rust: plain_test")
def test_c(): ...

@pytest.mark.spec(TITLE)
def test_d(): ...

class TestGroup:
    @pytest.mark.spec("recoverable_runs: plain_test")
    def test_e(self): ...

@pytest.mark.spec("recoverable_runs: async_test")
def helper(): ...
"""
    markers, problems = spec_markers(source, "fake.py")
    problems += coverage_problems(
        ["First one", "Second one"], ["plain_test", "async_test"], markers
    )
    assert problems == [
        "fake.py::test_d: spec marker needs one literal string",
        "fake.py::helper: spec marker on a function pytest does not collect",
        "no test follows 'async_jobs: Second one'",
        "fake.py::test_b: marker 'async_jobs: No such scenario': not in the seeds",
        "fake.py::test_c: marker 'rust: plain_test': unknown spec prefix",
    ]


@pytest.mark.parametrize("prefix", SPECS)
def test_the_marker_is_registered(prefix: str) -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"spec(ref):' in text and f"'{prefix}: " in text
