"""A worker refuses to start without a usable ledger: one line on stderr, a non-zero exit.

Without this check a worker whose ledger is unreachable or not migrated still prints
`ready`, takes tasks off the shared queues and fails every one of them. It runs in the
`celery worker` program's parent (`celeryd_init`), before the banner and before any
child forks; in-process test workers (`celery.contrib.testing`) never send that signal.
An outage that begins after start-up is ridden out as before (`domain/outage.py`).
"""

from __future__ import annotations

import sys

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from planq.domain.errors import ConfigurationError, LedgerUnavailableError, PlanqError
from planq.domain.redaction import redact_secrets
from planq.store.database import normalise_url
from planq.store.migrate import alembic_config, migrate_sqlite
from planq.tasks.executors import ExecutorRegistry
from planq.tasks.runtime import RuntimeConfig

#: Exit statuses of a worker refused at start, as the CLI's: the ledger is unusable (3),
#: a setting is wrong (2).
LEDGER_EXIT = 3
SETTING_EXIT = 2
#: Seconds to wait for PostgreSQL to answer before the worker gives up.
CONNECT_TIMEOUT = 5


def where(url: str) -> str:
    """The ledger's URL as operators may see it (the password redacted)."""
    return redact_secrets(url)


def check_ledger(url: str, *, auto_migrate: bool = False) -> None:
    """Raise LedgerUnavailableError unless the ledger answers and is at the latest revision.

    A SQLite ledger (auto_migrate) is brought to the latest revision here, as each
    process's Runtime would do anyway; PostgreSQL is migrated only by `planq db upgrade`.
    """
    if auto_migrate:
        try:
            migrate_sqlite(url)
        except DBAPIError as exc:
            raise _unreachable(url, exc) from None
        except OSError as exc:  # the SQLite file's directory cannot be made or written
            reason = f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc)
            raise LedgerUnavailableError(
                f"the ledger at {where(url)} cannot be created: {reason}"
            ) from None
        return
    connect_args = {"connect_timeout": CONNECT_TIMEOUT} if _is_postgres(url) else {}
    engine = create_engine(normalise_url(url), poolclass=NullPool, connect_args=connect_args)
    try:
        with engine.connect() as conn:
            current = set(MigrationContext.configure(conn).get_current_heads())
    except DBAPIError as exc:
        raise _unreachable(url, exc) from None
    finally:
        engine.dispose()
    expected = set(ScriptDirectory.from_config(alembic_config(url)).get_heads())
    if current == expected:
        return
    if not current:
        state = "is not migrated (no planq schema)"
    else:
        state = f"is at revision {', '.join(sorted(current))}, not {', '.join(sorted(expected))}"
    raise LedgerUnavailableError(
        f"the ledger at {where(url)} {state}: run `planq db upgrade` with this PLANQ_DATABASE_URL"
    )


def check_worker(config: RuntimeConfig) -> None:
    """Everything a worker needs before it takes a task: the ledger, then the executors."""
    check_ledger(config.database_url, auto_migrate=config.auto_migrate)
    try:
        ExecutorRegistry.from_settings(config.executors, config.default_executor)
    except PlanqError as exc:
        raise ConfigurationError(f"PLANQ_EXECUTORS / PLANQ_DEFAULT_EXECUTOR: {exc}") from None


def preflight(config: RuntimeConfig) -> None:
    """check_worker as `celery worker` starts (tasks/signals.py, celeryd_init).

    A refusal is one redacted line on stderr and the CLI's exit status (2: a setting, 3: the
    ledger).
    """
    try:
        check_worker(config)
    except PlanqError as exc:
        sys.stderr.write(f"planq worker: cannot start: {config.redactor(str(exc))}\n")
        sys.stderr.flush()
        status = SETTING_EXIT if isinstance(exc, ConfigurationError) else LEDGER_EXIT
        raise SystemExit(status) from None  # Celery swallows a receiver's Exception


def _is_postgres(url: str) -> bool:
    return make_url(normalise_url(url)).get_backend_name() == "postgresql"


def _unreachable(url: str, exc: DBAPIError) -> LedgerUnavailableError:
    reason = str(exc.orig) if exc.orig is not None else type(exc).__name__
    first = redact_secrets(reason.strip().splitlines()[0][:200]) if reason.strip() else reason
    return LedgerUnavailableError(f"the ledger at {where(url)} cannot be reached: {first}")
