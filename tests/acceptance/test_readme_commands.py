"""Every command in README.md and the docs is run or compiled here (issues #13, #35).

The quick-start's (docs/quickstart.md) ```bash and ```python blocks run in order in a temp
dir, against the real Redis and PostgreSQL, as a newcomer would type them, each in bash
with the exports of the blocks before it. Every other page's blocks (README.md and the
docs/ pages this project's docs own) are marked `ci` or `skip`, and their Python is
compiled. Only what the quick-start itself names is substituted: the broker URL (this
test's Redis database), the ledger's database name (a throw-away one, which the page's
own `createdb` creates), and the metrics and Flower ports (free ones). A
`<!-- readme-test: … -->` comment before a block changes how it is treated:

* `background`: each line is a long-running process (worker, beat, Flower), started in
  its own session and stopped at the end with a warm shutdown (SIGTERM);
* `ci`: CI runs it itself (`make demo`, `make test`): checked against the Makefile and
  .ci/run, never run from here (`make test` would run this test again);
* `skip REASON`: cannot run here (docker compose; a fragment); Python is compiled.

docs/benchmarks.md keeps its own conventions (its commands are the bench's).
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from planq.store import Database, sql_ledger
from tests.resources import free_port
from tests.support import PG_ADMIN_DSN, REDIS_TEST_URL, drop_pg_database, flush_redis

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
QUICKSTART = ROOT / "docs" / "quickstart.md"
NOT_OURS = {"benchmarks.md"}  # a page with conventions of its own
MARKERS = {"background", "ci", "skip"}
FENCE = re.compile(r"^```(\w*)")
MARKER = re.compile(r"^<!--\s*readme-test:\s*(\w+)\s*(.*?)\s*-->$")
BLOCK_TIMEOUT = 300  # seconds for one foreground block (the slow plan takes ~12 s)


def pages() -> list[Path]:
    """README.md and the docs pages whose blocks this test checks."""
    docs = [*sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs").glob("*/*.md"))]
    return [README, *(p for p in docs if p.name not in NOT_OURS and p.parent.name != "spec")]


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    lang: str
    code: str
    marker: str  # "" = run it
    reason: str
    line: int


def readme_blocks(text: str | None = None, page: Path = README) -> list[Block]:
    """A page's fenced blocks, each with the marker comment right above it (if any)."""
    lines = (page.read_text() if text is None else text).splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start = i
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        above = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marked = MARKER.match(above.strip())
        blocks.append(
            Block(
                lang=fence[1],
                code="\n".join(lines[start + 1 : end]) + "\n",
                marker=marked[1] if marked else "",
                reason=marked[2] if marked else "",
                line=start + 1,
            )
        )
        i = end + 1
    return blocks


def commands(block: Block) -> list[str]:
    """The block's non-empty, non-comment lines."""
    return [ln for ln in block.code.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


# -- the conventions, checked without services -----------------------------------------------


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_every_marker_is_known_and_a_skip_says_why() -> None:
    for page in pages():
        blocks = readme_blocks(page=page)
        assert {b.marker for b in blocks} <= MARKERS | {""}, name(page)
        for block in blocks:
            if block.marker == "skip":
                assert block.reason, f"{name(page)} line {block.line}: a skip needs its reason"


def test_shell_blocks_are_bash_so_that_they_are_run() -> None:
    for page in pages():
        for block in readme_blocks(page=page):
            assert block.lang not in {"sh", "shell", "console", "zsh", "py"}, (
                f"{name(page)} line {block.line}: write ```bash or ```python (run or compiled)"
            )


def test_only_the_quick_start_runs_unmarked_blocks() -> None:
    # Everywhere else a ```bash or ```python block says why it is not run, so that no page
    # looks tested when it is not.
    for page in pages():
        if page == QUICKSTART:
            continue
        for block in readme_blocks(page=page):
            if block.lang in {"bash", "python"}:
                assert block.marker in {"ci", "skip"}, (
                    f"{name(page)} line {block.line}: mark it `skip REASON` (only the "
                    "quick-start is run), or move it to docs/quickstart.md"
                )


def test_make_demo_and_make_test_are_the_first_two_commands_and_ci_runs_them() -> None:
    first = next(b for b in readme_blocks() if b.lang == "bash")
    assert first.marker == "ci"
    assert [shlex.split(c, comments=True) for c in commands(first)] == [
        ["make", "demo"],
        ["make", "test"],
    ]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()  # runs the suite, test_demo.py too
    assert (ROOT / "tests" / "acceptance" / "test_demo.py").exists()


def test_only_make_targets_are_left_to_ci() -> None:
    for page in pages():
        for block in readme_blocks(page=page):
            if block.marker == "ci":
                for command in commands(block):
                    assert shlex.split(command, comments=True)[0] == "make", command


def test_skipped_python_still_compiles() -> None:
    for page in pages():
        for block in readme_blocks(page=page):
            if block.lang == "python":
                ast.parse(block.code, filename=f"{name(page)}:{block.line}")


def test_the_readme_stays_short_and_the_architecture_a_picture() -> None:
    # issue 35: the README is the front door, the architecture the picture; detail is
    # in the pages they link.
    assert len(README.read_bytes()) <= 12 * 1024
    assert len((ROOT / "docs" / "architecture.md").read_text().splitlines()) <= 400


def test_the_parser_reads_markers_and_fences() -> None:
    text = "x\n<!-- readme-test: skip why not -->\n```bash\necho hi\n```\n\n```python\npass\n```\n"
    assert readme_blocks(text) == [
        Block("bash", "echo hi\n", "skip", "why not", 3),
        Block("python", "pass\n", "", "", 7),
    ]


# -- the quick-start, run for real -------------------------------------------------------------


class Session:
    """The reader's terminals: exports carried from block to block, background processes."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.state = workdir / ".readme-exports.sh"
        self.state.write_text("")
        self.background: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.outputs: list[str] = []

    def script(self, block: Block) -> str:
        if block.lang == "python":
            body = f"python - <<'PLANQ_README_PY'\n{block.code}PLANQ_README_PY\n"
        else:
            body = block.code
        return f"set -euo pipefail\nsource {self.state}\n{body}\nexport -p > {self.state}\n"

    def run(self, block: Block) -> str:
        done = subprocess.run(
            ["bash", "-c", self.script(block)],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
        )
        if done.returncode != 0:
            pytest.fail(
                f"quick-start block at line {block.line} exited {done.returncode}:\n{block.code}\n"
                f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}\n"
                f"{self.background_logs()}"
            )
        self.outputs.append(done.stdout)
        return done.stdout

    def start(self, block: Block) -> None:
        for index, command in enumerate(commands(block)):
            log = self.workdir / f"background-{block.line}-{index}.log"
            with open(log, "wb") as out:
                process = subprocess.Popen(
                    ["bash", "-c", f"source {self.state}\nexec {command}"],
                    cwd=self.workdir,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.background.append((command, process, log))

    def background_logs(self) -> str:
        return "\n".join(
            f"--- {command} (exit {p.poll()}):\n{log.read_text(errors='replace')[-2000:]}"
            for command, p, log in self.background
        )

    def stop(self) -> dict[str, int | None]:
        """Warm shutdown of every background process; the group is killed if it hangs."""
        codes: dict[str, int | None] = {}
        for _, process, _ in self.background:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for command, process, _ in self.background:
            try:
                codes[command] = process.wait(60)
            except subprocess.TimeoutExpired:
                codes[command] = None
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        return codes


@pytest.fixture
def database_name() -> Iterator[str]:
    """A fresh name for the quick-start's `createdb`; the database is dropped after."""
    name = f"planq_readme_{uuid.uuid4().hex[:10]}"
    yield name
    drop_pg_database(f"{PG_ADMIN_DSN.rsplit('/', 1)[0]}/{name}")


def substituted(blocks: list[Block], replacements: dict[str, str]) -> list[Block]:
    """The blocks with the page's own URLs, names and ports replaced (each must occur)."""
    text = "".join(b.code for b in blocks)
    for old in replacements:
        assert old in text, f"the quick-start no longer says {old!r}: update the substitutions"
    # One pass: a replacement's own text is never replaced again (a free metrics port such
    # as 55551 would otherwise have its "5555" turned into Flower's port).
    pattern = re.compile("|".join(re.escape(old) for old in sorted(replacements, key=len)[::-1]))
    return [
        Block(
            block.lang,
            pattern.sub(lambda m: replacements[m[0]], block.code),
            block.marker,
            block.reason,
            block.line,
        )
        for block in blocks
    ]


def test_the_readme_quick_start_runs_against_real_services(
    tmp_path: Path, database_name: str
) -> None:
    flush_redis(REDIS_TEST_URL)
    metrics_port, flower_port = free_port(), free_port()
    runnable = [b for b in readme_blocks(page=QUICKSTART) if b.lang in {"bash", "python"}]
    blocks = substituted(
        runnable,
        {
            "export PLANQ_BROKER_URL=redis://127.0.0.1:6379/0": (
                f"export PLANQ_BROKER_URL={REDIS_TEST_URL}"
            ),
            "@127.0.0.1:5432/planq\n": f"@127.0.0.1:5432/{database_name}\n",
            "createdb -h 127.0.0.1 -U postgres planq\n": (
                f"createdb -h 127.0.0.1 -U postgres {database_name}\n"
            ),
            "9808": str(metrics_port),
            "5555": str(flower_port),
        },
    )
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("PLANQ_", "FLOWER_", "CELERY_"))
    }
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    base.pop("PYTHONPATH", None)  # planq is installed: the quick-start's commands need no path
    session = Session(tmp_path, base)
    try:
        for block in blocks:
            if block.marker in {"ci", "skip"}:
                continue
            if block.marker == "background":
                session.start(block)
            else:
                session.run(block)
    finally:
        codes = session.stop()
    logs = session.background_logs()
    worker = next(c for c in codes if c.startswith("planq worker"))
    assert codes[worker] == 0, f"the worker's warm shutdown did not exit 0:\n{logs}"
    assert "cannot start" not in logs and "invalid setting" not in logs

    shell_out, python_out = session.outputs[-2], session.outputs[-1]
    assert re.search(
        r'^planq_jobs_total\{phase="execute",status="succeeded"\} 1\.0$', shell_out, re.M
    )
    assert "Flower without a password: 401" in shell_out
    assert re.search(r"^\S+@\S+ alive: true$", shell_out, re.M), "Flower saw no worker"
    assert python_out.splitlines()[1:] == [
        "SUCCESS 1.0",
        "SUCCESS succeeded",
        "SUCCESS",
        "SUCCESS",
        "SUCCESS",
        "FAILURE RuntimeError: disk full",
    ]
    assert python_out.splitlines()[0] in {"PENDING", "STARTED", "SUCCESS"}

    db = Database(f"postgresql+psycopg://postgres@127.0.0.1:5432/{database_name}")
    try:
        _, plans = sql_ledger(db)
        states = {p.name: p.label for p in plans.list_all()}
    finally:
        db.close()
    assert states["slow"] == "Execute/COMPLETE"
    assert states["nightly"] == "Execute/COMPLETE"
    assert states["failing"] == "Strategize/FAILED"
    assert [states[f"batch-{i}"] for i in range(3)] == ["Strategize/COMPLETE"] * 3
