"""The job ledger: in-memory and SQL stores behind the domain's ports.

Its public names load on first use (domain/exports.py): `planq jobs list` reads through the
SQL stores and never imports the in-memory ones or the run stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planq.domain.exports import lazy_exports

if TYPE_CHECKING:  # what type checkers see: the names, as if imported here (see __all__)
    from planq.store.database import Database, make_engine
    from planq.store.memory import (
        InMemoryJobStore,
        InMemoryPlanStore,
        in_memory_ledger,
    )
    from planq.store.partitions import prepare_partitions
    from planq.store.runs_memory import InMemoryRunStoreProvider
    from planq.store.runs_sql import SqlRunStoreProvider
    from planq.store.sql_jobs import SqlJobStore
    from planq.store.sql_plans import SqlPlanStore


def sql_ledger(database: Database) -> tuple[SqlJobStore, SqlPlanStore]:
    """A job store and a plan store on one database (their transactions are shared)."""
    from planq.store.sql_jobs import SqlJobStore
    from planq.store.sql_plans import SqlPlanStore

    return SqlJobStore(database), SqlPlanStore(database)


EXPORTS: dict[str, tuple[str, ...]] = {
    "planq.store.database": ("Database", "make_engine"),
    "planq.store.memory": ("InMemoryJobStore", "InMemoryPlanStore", "in_memory_ledger"),
    "planq.store.partitions": ("prepare_partitions",),
    "planq.store.runs_memory": ("InMemoryRunStoreProvider",),
    "planq.store.runs_sql": ("SqlRunStoreProvider",),
    "planq.store.sql_jobs": ("SqlJobStore",),
    "planq.store.sql_plans": ("SqlPlanStore",),
}
__all__ = [
    "Database",
    "InMemoryJobStore",
    "InMemoryPlanStore",
    "InMemoryRunStoreProvider",
    "SqlJobStore",
    "SqlPlanStore",
    "SqlRunStoreProvider",
    "in_memory_ledger",
    "make_engine",
    "prepare_partitions",
    "sql_ledger",
]  # the EXPORTS' names (tests/unit/test_lazy_exports.py)
__getattr__ = lazy_exports(__name__, EXPORTS)
