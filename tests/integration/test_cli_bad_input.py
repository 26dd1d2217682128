"""Every bad CLI input is exit 2, one stderr line, and nothing written (hypothesis, ~1,200 cases).

The CLI runs in-process (typer's CliRunner) on a SQLite ledger seeded once; each generated
call is refused at the boundary, so the row counts of every table stay what they were.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from typer.testing import CliRunner

from planq.cli.main import app
from planq.domain.lifecycle import PlanLifecycleService
from planq.domain.runs import Fresh, Severity
from planq.store import Database, SqlRunStoreProvider, sql_ledger
from planq.store.migrate import upgrade
from planq.store.models import Base
from tests.support import REDIS_TEST_URL

MAX_DAYS = 36_500.0
MAX_WINDOW = 10_000


@dataclass
class Seeded:
    """The ledger under the CLI and a plan and run that exist in it."""

    db: Database
    plan_id: str
    run_id: str

    def counts(self) -> dict[str, int]:
        with self.db.session() as s:
            return {
                t.name: int(s.scalar(select(func.count()).select_from(t)) or 0)
                for t in Base.metadata.sorted_tables
            }


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    url = f"sqlite:///{tmp_path_factory.mktemp('bad-input') / 'ledger.db'}"
    upgrade(url)
    db = Database(url)
    jobs, plans = sql_ledger(db)
    lifecycle = PlanLifecycleService(plans, jobs)
    plan = lifecycle.create_plan(["a", "b"], name="seeded")
    lifecycle.strategize_plan(plan.plan_id)
    provider = SqlRunStoreProvider(db)
    opened = provider.open_or_start("scan_a", owner="node@host")
    assert isinstance(opened, Fresh)
    opened.store.record_finding("kind", Severity.anomaly, "res-1", {"i": 1})
    assert opened.store.mark_completed()
    saved = {k: v for k, v in os.environ.items() if k.startswith("PLANQ_")}
    for key in saved:
        del os.environ[key]
    os.environ.update(PLANQ_DATABASE_URL=url, PLANQ_BROKER_URL=REDIS_TEST_URL)
    yield Seeded(db, plan.plan_id, opened.store.run_id)
    for key in ("PLANQ_DATABASE_URL", "PLANQ_BROKER_URL"):
        os.environ.pop(key, None)
    os.environ.update(saved)
    db.close()


# -- generated bad values ---------------------------------------------------------------------
def _number_text(x: float) -> str:
    return repr(x)


def _not_a_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return True
    return False


NON_NUMBERS = st.text(min_size=1, max_size=30).filter(_not_a_number)
NON_FINITE = st.sampled_from(["inf", "-inf", "nan", "Infinity", "1e309", "-1e400", "NaN"])


def floats_outside(low: float, high: float) -> st.SearchStrategy[str]:
    """Text of a float below low or above high (inf included), of a non-finite, or of no number."""
    below = st.floats(max_value=low, exclude_max=True, allow_nan=False).map(_number_text)
    above = st.floats(min_value=high, exclude_min=True, allow_nan=False).map(_number_text)
    return st.one_of(below, above, NON_FINITE, NON_NUMBERS)


def ints_outside(low: int, high: int) -> st.SearchStrategy[str]:
    """Text of an int out of [low, high] (up to 10**30), a float-looking number, or no number."""
    below = st.integers(max_value=low - 1, min_value=-(10**30)).map(str)
    above = st.integers(min_value=high + 1, max_value=10**30).map(str)
    floaty = st.sampled_from(["1e23", "2.5", "1e3", "0.5", "inf", "nan"])  # "10.0" is 10
    return st.one_of(below, above, floaty, NON_NUMBERS)


TEXT = st.text(max_size=40)
WITH_NUL = st.builds(lambda a, b: f"{a}\x00{b}", TEXT, TEXT)
TOO_LONG_NAME = st.integers(min_value=201, max_value=2_000).map(lambda n: "n" * n)


def bad_calls(plan_id: str, run_id: str) -> st.SearchStrategy[list[str]]:
    """One bad invocation of the CLI (args), across every option with a bound."""
    purge = floats_outside(1.0, MAX_DAYS).map(lambda v: ["runs", "purge", "--older-than-days", v])
    watch_interval = floats_outside(0.05, 3_600.0).map(
        lambda v: ["plans", "watch", plan_id, "--interval", v]
    )
    watch_timeout = floats_outside(0.0, 7 * 86_400.0).map(
        lambda v: ["plans", "watch", plan_id, "--timeout", v]
    )
    limits = st.tuples(
        st.sampled_from([["plans", "list"], ["jobs", "list"], ["runs", "list"]]),
        ints_outside(1, MAX_WINDOW),
    ).map(lambda t: [*t[0], "--limit", t[1]])
    offsets = st.tuples(
        st.sampled_from([["plans", "list"], ["jobs", "list"]]),
        ints_outside(0, MAX_WINDOW - 50),
    ).map(lambda t: [*t[0], "--offset", t[1]])
    findings = ints_outside(1, MAX_WINDOW).map(lambda v: ["runs", "findings", run_id, "--limit", v])
    names = st.one_of(TOO_LONG_NAME, WITH_NUL).map(
        lambda n: ["plans", "create", "--steps", "a,b", "--name", n]
    )
    steps = WITH_NUL.filter(lambda s: "," not in s and ":" not in s and s.strip() != "\x00").map(
        lambda s: ["plans", "create", "--steps", f"ok,{s}"]
    )
    run_names = st.tuples(
        st.sampled_from([["runs", "trigger"], ["runs", "list"], ["runs", "cancel"]]), WITH_NUL
    ).map(lambda t: [*t[0], t[1]])
    statuses = WITH_NUL.map(lambda s: ["jobs", "list", "--status", s])
    ids = WITH_NUL.map(lambda s: ["plans", "show", s])
    return st.one_of(
        purge,
        watch_interval,
        watch_timeout,
        limits,
        offsets,
        findings,
        names,
        steps,
        run_names,
        statuses,
        ids,
    )


@settings(
    max_examples=1_200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_every_bad_input_is_exit_2_one_line_and_writes_nothing(
    seeded: Seeded, data: st.DataObject
) -> None:
    before = seeded.counts()
    args = data.draw(bad_calls(seeded.plan_id, seeded.run_id))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (args, result.stdout, result.stderr, result.exception)
    assert isinstance(result.exception, SystemExit), (args, repr(result.exception))
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("planq: error: "), (args, result.stderr)
    assert "Traceback" not in result.output
    assert seeded.counts() == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["runs", "purge", "--older-than-days", "inf"], "--older-than-days must be a finite"),
        (["runs", "purge", "--older-than-days", "1e6"], "from 1 to 36500"),
        (["plans", "list", "--limit", "1e23"], "--limit"),
        (["plans", "list", "--limit", str(10**23)], "offset + limit <= 10000"),
        (["plans", "create", "--steps", "a", "--name", "x" * 201], "at most 200 characters"),
        (["plans", "create", "--steps", "a", "--name", "a\x00b"], "NUL"),
        (["runs", "trigger", "scan\x00"], "NUL"),
        (["plans", "list", "--after", "nope"], "--after"),
        (["plans", "list", "--after", "01" + "A" * 24], "no plan with id"),
    ],
)
def test_the_issues_examples_name_what_is_wrong(
    seeded: Seeded, args: list[str], expected: str
) -> None:
    before = seeded.counts()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.stderr
    assert expected in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert seeded.counts() == before


def test_watch_interval_inf_is_refused(seeded: Seeded) -> None:
    result = CliRunner().invoke(app, ["plans", "watch", seeded.plan_id, "--interval", "inf"])
    assert result.exit_code == 2 and "--interval must be a finite" in result.stderr


def test_a_purge_far_below_the_bound_still_works(seeded: Seeded, tmp_path: Path) -> None:
    """The bounds refuse only what cannot be right: 36500 days is a valid (empty) purge."""
    result = CliRunner().invoke(app, ["runs", "purge", "--older-than-days", "36500", "--json"])
    assert result.exit_code == 0, result.stderr
    assert '"purged": 0' in result.stdout
    assert math.isclose(float(MAX_DAYS), 36_500.0)
    assert timedelta(days=MAX_DAYS)  # representable: the bound is inside what datetime holds
