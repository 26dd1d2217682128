"""The ledger without Celery: read-only stores for the CLI's listings, and migrations.

Part of the composition root: the CLI and the HTTP API reach the store implementations only
through here (an import-linter contract keeps `planq.cli` from importing `planq.store`), so
`planq jobs list` imports no celery, kombu or task module.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from planq.store import sql_ledger
from planq.store.database import Database
from planq.store.migrate import migrate_sqlite, upgrade

if TYPE_CHECKING:
    from planq.store.runs_sql import SqlRunStoreProvider
    from planq.store.sql_principals import SqlPrincipalStore


class LedgerReader:
    """The ledger's stores on their own Database: reads for listings, no Celery app.

    A SQLite ledger migrates itself first, as the app's runtime does (a fresh file lists
    empty); a current one costs one catalogue query, without loading alembic.
    """

    def __init__(self, database_url: str) -> None:
        migrate_sqlite(database_url)
        self.db = Database(database_url)
        self.jobs, self.plans = sql_ledger(self.db)

    @cached_property
    def runs(self) -> SqlRunStoreProvider:
        """The run stores, built when a command reads runs (a job listing does not)."""
        from planq.store.runs_sql import SqlRunStoreProvider

        return SqlRunStoreProvider(self.db)

    @cached_property
    def principals(self) -> SqlPrincipalStore:
        """The admin API's principals (`planq tokens`), on the same Database."""
        from planq.store.sql_principals import SqlPrincipalStore

        return SqlPrincipalStore(self.db)

    def close(self) -> None:
        """Close the connections."""
        self.db.close()


def upgrade_ledger(url: str) -> None:
    """Bring the ledger at url to the latest revision (`planq db upgrade`; idempotent)."""
    upgrade(url)
