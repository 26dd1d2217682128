"""docs/reference/ is generated from the code, and committed as generated (issue 35).

.ci/reference_docs.py (`make docs`) writes the pages; this test regenerates them in memory.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "reference_docs", ROOT / ".ci" / "reference_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("reference_docs", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return generator().pages()  # type: ignore[no-any-return]


def test_the_committed_reference_pages_are_what_the_code_generates(
    pages: dict[str, str],
) -> None:
    stale = [
        relative
        for relative, text in pages.items()
        if not (ROOT / relative).exists() or (ROOT / relative).read_text(encoding="utf-8") != text
    ]
    assert stale == [], f"{', '.join(stale)} differ from the code: run `make docs`"


def test_generation_is_deterministic(pages: dict[str, str]) -> None:
    assert generator().pages() == pages
    for text in pages.values():
        assert str(ROOT) not in text and "/tmp/" not in text  # no machine paths


def test_every_setting_and_route_is_listed(pages: dict[str, str]) -> None:
    from planq.cli.api.app import create_api
    from planq.worker_config.settings import PlanqSettings

    settings = pages["docs/reference/settings.md"]
    for name in PlanqSettings.model_fields:
        assert f"| `PLANQ_{name.upper()}` |" in settings
    http = pages["docs/reference/http.md"]
    schema = create_api(settings=PlanqSettings()).openapi()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert f"| {method.upper()} | `{path}` | `{operation['x-planq-role']}` |" in http
    cli = pages["docs/reference/cli.md"]
    for command in ("plans", "jobs", "runs", "tokens", "db", "worker", "beat", "flower", "api"):
        assert f"## `planq {command}`" in cli


def test_a_documented_field_carries_its_comment(pages: dict[str, str]) -> None:
    # the `#:` comment above `run_stale_after` spans several lines: all of them, joined
    settings = pages["docs/reference/settings.md"]
    row = next(ln for ln in settings.splitlines() if ln.startswith("| `PLANQ_RUN_STALE_AFTER`"))
    assert "presumed dead" in row and "clock skew" in row
    assert "≥ 5" in row
