"""planq builds from what git tracks with every warning an error: the sdist, then the wheel.

A copy of `git ls-files` (what a clone has, nothing the work tree adds) is built with
`python -m build --no-isolation` (the dev extra's setuptools, in the range [build-system]
asks for) under PYTHONWARNINGS=error, the sdist first and the wheel from it. A deprecated
field (the `license` table that setuptools stops building after 2027-02-18) or a data
folder left out of `packages` is a warning, so it fails the build here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from tests.celery_support import ROOT


def tracked_copy(dest: Path) -> Path:
    """The files git tracks, copied to dest: the tree a fresh clone builds from."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)
    return dest


def test_the_sdist_and_the_wheel_build_with_warnings_as_errors(tmp_path: Path) -> None:
    source, out = tracked_copy(tmp_path / "src"), tmp_path / "dist"
    env = {**os.environ, "PYTHONWARNINGS": "error"}
    build = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)]
    done = subprocess.run(build, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "Warning" not in output, output[-4000:]

    [sdist] = out.glob("planq-*.tar.gz")
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        assert f"{top}/LICENSE" in archive.getnames()
    [wheel] = out.glob("planq-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{info}/METADATA").decode()
    assert "License-Expression: MIT" in metadata.splitlines()
    assert f"{info}/licenses/LICENSE" in names
    assert "planq/cli/api/static/dashboard.js" in names  # the dashboard's files ship
    assert "planq/cli/api/static/dashboard.css" in names
    assert "planq/cli/api/templates/page.html" in names  # and its templates
    assert "planq/store/migrations/versions/" in "".join(names)
