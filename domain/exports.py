"""A package's public names loaded on first use (PEP 562), not when any submodule is imported.

`planq jobs list` imports a handful of submodules; with eager package imports it would load
every module the package re-exports (the run engine, the lifecycle, the memory store). The
package keeps its names (`from planq.domain import Plan` still works) and imports each one's
module when it is first asked for. Type checkers read the package's TYPE_CHECKING imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, modules: Mapping[str, tuple[str, ...]]) -> Callable[[str], object]:
    """The package's module `__getattr__`: {module: names it exports} resolved on first use."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # found once: the next lookup is plain
        return value

    return __getattr__
