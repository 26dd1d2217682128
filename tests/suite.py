"""`make test`'s runner: the parallel group under pytest-xdist, then the serial group alone.

The serial group (`-m serial`) restarts the machine's shared Redis or PostgreSQL, which
would cut every other worker's connections: it runs after the parallel group, with nothing
beside it. Everything else runs spread over `--workers` xdist workers, each on resources of
its own (tests/resources.py). At the end: the 15 slowest tests and files of both groups, the time
each group took, and one closing line with the totals.

    python tests/suite.py                      # both groups
    python tests/suite.py --group serial       # one group
    python tests/suite.py -- -k cancel         # extra pytest arguments, given to each group
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

#: pytest's exit code when a group collected nothing (a -k or a path with no serial test).
NO_TESTS = 5
SLOWEST = 15


@dataclass
class Outcome:
    """What one group's JUnit report counted."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    durations: list[tuple[float, str]] = field(default_factory=list)


def read_report(path: Path) -> Outcome:
    """Count a JUnit XML report's cases and keep each case's time."""
    outcome = Outcome()
    if not path.exists():
        return outcome
    for case in ET.parse(path).iter("testcase"):
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            outcome.failed += 1
        elif "error" in kinds:
            outcome.errors += 1
        elif "skipped" in kinds:
            outcome.skipped += 1
        else:
            outcome.passed += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome.durations.append((float(case.get("time") or 0.0), name))
    return outcome


def run_group(group: str, workers: int, extra: list[str], report: Path) -> int:
    """Run one group; return pytest's exit code (no tests collected counts as success)."""
    args = [sys.executable, "-m", "pytest", f"--junitxml={report}"]
    if group == "parallel":
        args += ["-m", "not serial", "-n", str(workers), "--dist", "loadfile"]
    else:
        args += ["-m", "serial"]
    print(f"suite: the {group} group: {' '.join(args[3:])} {' '.join(extra)}", flush=True)
    code = subprocess.run([*args, *extra], check=False).returncode
    return 0 if code == NO_TESTS else code


def main() -> int:
    """Run the groups asked for and print the slowest tests and the totals."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", choices=["parallel", "serial", "all"], default="all")
    parser.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("PLANQ_TEST_WORKERS", "3")),
        help="xdist workers for the parallel group (at most 3: tests/resources.py)",
    )
    parser.add_argument("pytest_args", nargs="*", help="given to pytest (after --)")
    options = parser.parse_args()
    groups = ["parallel", "serial"] if options.group == "all" else [options.group]
    codes: list[int] = []
    outcomes: list[Outcome] = []
    times: list[str] = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="planq-suite-") as scratch:
        for group in groups:
            began = time.monotonic()
            report = Path(scratch) / f"{group}.xml"
            codes.append(run_group(group, options.workers, options.pytest_args, report))
            outcomes.append(read_report(report))
            times.append(f"{group} {time.monotonic() - began:.0f} s")
    slowest = sorted((d for o in outcomes for d in o.durations), reverse=True)[:SLOWEST]
    print(f"\nsuite: the {SLOWEST} slowest tests (setup + call + teardown)")
    for seconds, name in slowest:
        print(f"{seconds:8.2f}s  {name}")
    files: dict[str, float] = {}
    for seconds, name in (d for o in outcomes for d in o.durations):
        module = name.split("::", 1)[0]
        files[module] = files.get(module, 0.0) + seconds
    print(f"\nsuite: the {SLOWEST} costliest files (their tests' time, summed)")
    for module, seconds in sorted(files.items(), key=lambda f: f[1], reverse=True)[:SLOWEST]:
        print(f"{seconds:8.2f}s  {module}")
    passed = sum(o.passed for o in outcomes)
    failed = sum(o.failed + o.errors for o in outcomes)
    skipped = sum(o.skipped for o in outcomes)
    total = time.monotonic() - start
    print(f"suite: {', '.join(times)}; {total:.0f} s in all ({total / 60:.1f} min)")
    closing = f"{passed} passed, {failed} failed"
    print(f"suite: {closing}" + (f", {skipped} skipped" if skipped else ""))
    return next((code for code in codes if code), 1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
