"""Every import of planq's own code goes through the `planq` namespace.

In this work tree the repository root is on sys.path, so a bare `import tasks` or
`from domain import …` still resolves here; installed, it would be the user's own `tasks`
module or nothing at all, and in the tree it would load a second copy of the module
(two `PlanqError` classes). This guard keeps every such import out, in the README's and
the docs' code too.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("domain", "store", "tasks", "worker_config", "cli", "tests", "bench")
BARE = re.compile(
    r"^\s*(?:from|import)\s+(?:domain|store|tasks|worker_config|cli)(?:[.\s]|$)", re.M
)


def test_no_module_imports_planq_code_outside_the_namespace() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match[0].strip()}"
        for path in [
            *(p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))),
            ROOT / "README.md",  # its code blocks are run or compiled by the README test
            *sorted((ROOT / "docs").rglob("*.md")),  # the pages and docs/reference/
        ]
        for text in [path.read_text(encoding="utf-8")]
        for match in BARE.finditer(text)
    ]
    assert offenders == []
