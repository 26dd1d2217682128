"""The job ledger: in-memory and SQL stores behind the domain's ports."""

from __future__ import annotations

from planq.store.database import Database, make_engine
from planq.store.memory import InMemoryJobStore, InMemoryPlanStore, in_memory_ledger
from planq.store.partitions import prepare_partitions
from planq.store.runs_memory import InMemoryRunStoreProvider
from planq.store.runs_sql import SqlRunStoreProvider
from planq.store.sql_jobs import SqlJobStore
from planq.store.sql_plans import SqlPlanStore


def sql_ledger(database: Database) -> tuple[SqlJobStore, SqlPlanStore]:
    """A job store and a plan store on one database (their transactions are shared)."""
    return SqlJobStore(database), SqlPlanStore(database)


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
]
