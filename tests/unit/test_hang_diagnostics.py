"""A hung test ends the run with every thread's stack, under the suite's own settings.

Even a hang that outlives the timeout's own exception (a cleanup that blocks again, as
the embedded worker's stop once did) must end the run and say where every thread is.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HUNG = """
import threading

import pytest


@pytest.mark.timeout(2)
def test_waits_for_ever():
    helper = threading.Thread(target=threading.Event().wait, name="hung-helper", daemon=True)
    helper.start()
    try:
        threading.Event().wait()
    except BaseException:  # as a cleanup that hangs after the timeout fired would
        threading.Event().wait()
"""


def test_a_hang_prints_every_threads_stack_and_ends_the_run(tmp_path: Path) -> None:
    (tmp_path / "test_hung.py").write_text(HUNG)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_hung.py"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Timeout" in out
    assert "Stack of hung-helper" in out  # the other threads, by name
    assert "test_waits_for_ever" in out  # and the hung test's own frame
