#!/usr/bin/env python3
"""Print import cycles among planq's modules, function-level imports included.

import-linter checks layers between packages; this also sees cycles inside one package
(for example tasks/), which function-level imports hide at run time.
Usage: python .ci/import_cycles.py [REPO_ROOT]   (exit 1 when a cycle exists; `make lint` runs it)
A copy of the team tool ../shared/tools/import_cycles.py, so a clean clone (CI) has it.
"""

from __future__ import annotations

import ast
import pathlib
import sys

PACKAGES = ("domain", "store", "tasks", "worker_config", "cli")


def module_graph(root: pathlib.Path) -> dict[str, set[str]]:
    mods: dict[str, pathlib.Path] = {}
    for pkg in PACKAGES:
        for f in (root / pkg).rglob("*.py"):
            if "migrations" in f.parts:
                continue
            name = ".".join(f.relative_to(root).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = f
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            # planq installs its folders under one namespace: planq.store.x is store/x.py
            targets = [t.removeprefix("planq.") for t in targets]
            graph[m].update(t for t in targets if t in mods and t != m)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    # a package __init__ that re-exports its own modules is not a design cycle
    return [c for c in found if not any(m in PACKAGES for m in c)]


def main() -> int:
    arg = sys.argv[1] if len(sys.argv) > 1 else "."
    root = pathlib.Path(arg).resolve()
    if arg.startswith("-") or not root.is_dir():
        print("usage: import_cycles.py [PROJECT_ROOT]  (prints each cycle; exit 1 if any)")
        return 2
    found = cycles(module_graph(root))
    for c in found:
        print("import cycle: " + " -> ".join(c))
    if not found:
        print("no import cycles")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
