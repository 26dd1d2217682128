"""One Database per process: the engine, and the ambient transaction the stores share."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from planq.domain.errors import LedgerRejectedError, LedgerUnavailableError
from planq.domain.redaction import redact_secrets

DEFAULT_SQLITE_BUSY_MS = 30_000


#: What a URL may call PostgreSQL: SQLAlchemy's name, and the `postgres://` many hosts use.
POSTGRES_BACKENDS = ("postgresql", "postgres")


def normalise_url(url: str) -> str:
    """Use psycopg 3 for PostgreSQL whatever driver (or `postgres://` scheme) the URL names."""
    parsed = make_url(url)
    if (
        parsed.get_backend_name().lower() in POSTGRES_BACKENDS
        and parsed.drivername != "postgresql+psycopg"
    ):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def _configure_sqlite(engine: Engine) -> None:
    """WAL, a busy timeout, and BEGIN IMMEDIATE so writers queue instead of failing."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout={DEFAULT_SQLITE_BUSY_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine with the pragmas and pool settings planq relies on."""
    url = normalise_url(url)
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        database = make_url(url).database
        if database and database != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(database)), exist_ok=True)
        kwargs.setdefault("connect_args", {"check_same_thread": False, "timeout": 30})
        if not database or database == ":memory:":
            from sqlalchemy.pool import StaticPool

            kwargs.setdefault("poolclass", StaticPool)
        engine = create_engine(url, **kwargs)
        _configure_sqlite(engine)
        return engine
    if backend == "postgresql":
        kwargs.setdefault("pool_pre_ping", True)  # survive a PostgreSQL restart
        if "poolclass" not in kwargs:
            kwargs.setdefault("pool_size", 5)
            kwargs.setdefault("max_overflow", 10)
    return create_engine(url, **kwargs)


def is_transient(exc: BaseException) -> bool:
    """An outage, not a fault: connection lost/refused, server restarting, lock or serialization."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = getattr(exc, "orig", None)
    if isinstance(orig, sqlite3.Error):  # sqlite3 calls even a syntax error "operational"
        return "locked" in str(orig) or "busy" in str(orig)
    return isinstance(exc, (OperationalError, InterfaceError))


def as_outage(exc: DBAPIError) -> LedgerUnavailableError:
    """The domain's error for a transient failure (the SQL and its parameters left out)."""
    reason = str(exc.orig) if exc.orig is not None else type(exc).__name__
    return LedgerUnavailableError(redact_secrets(reason.strip().splitlines()[0][:300]))


#: What names a refused constraint in a driver's message (SQLite; psycopg has `diag`).
_CONSTRAINT = re.compile(r"constraint(?: failed)?:?\s+\"?([\w.]+)", re.IGNORECASE)


def as_rejection(exc: DBAPIError, operation: str) -> LedgerRejectedError:
    """The domain's error for a write the ledger refuses: the constraint, never the SQL.

    A SQLAlchemy error's text carries the statement and its parameters (job ids, worker
    ids, error text): none of it goes further than this function.
    """
    orig = exc.orig
    diag = getattr(orig, "diag", None)
    if diag is not None:  # psycopg: the constraint, else the column, by name
        name = diag.constraint_name or (
            f"{type(orig).__name__} on {diag.column_name}" if diag.column_name else None
        )
    else:  # sqlite3: "CHECK constraint failed: ck_…", "NOT NULL constraint failed: t.col"
        found = _CONSTRAINT.search(str(orig)) if orig is not None else None
        name = found.group(1) if found else None
    reason = name or type(orig if orig is not None else exc).__name__
    return LedgerRejectedError(operation, reason[:120])


#: Hot-path connections a process keeps (PostgreSQL): a threads or gevent pool's jobs.
HOT_POOL_SIZE = 32


def make_hot_engine(url: str, **kwargs: Any) -> Engine:
    """PostgreSQL's hot-path engine: autocommit, and no pre-ping (a round trip per checkout).

    A hot statement is atomic by itself, so it needs no BEGIN/COMMIT. A pooled connection
    that died with a server restart fails one statement; SQLAlchemy then invalidates the
    whole pool, and the caller rides the failure out (`domain.outage`). Everything else
    (operator reads, multi-statement transactions) keeps the pre-pinged engine.
    """
    kwargs.setdefault("pool_pre_ping", False)
    kwargs["isolation_level"] = "AUTOCOMMIT"  # always: the partition map's fallback needs it
    # Connections are opened only as threads need them at once, and then kept: with 5 kept
    # a `-P threads -c 16` worker writing alone (group commit off) closed and reopened a
    # backend on most claims (the bench's threads row: a third more CPU per job).
    kwargs.setdefault("pool_size", HOT_POOL_SIZE)
    kwargs.setdefault("max_overflow", HOT_POOL_SIZE)
    engine = make_engine(url, **kwargs)
    if engine.dialect.name == "postgresql":
        event.listen(engine, "connect", _keyed_lookups_only)
    return engine


#: What a hot session runs when its connection opens (`_keyed_lookups_only`).
KEYED_LOOKUPS_ONLY = "SET enable_seqscan = off"


def _keyed_lookups_only(dbapi_conn: Any, _record: Any) -> None:
    """`enable_seqscan = off` for the hot engine's sessions: its statements go by key.

    Every hot statement finds its rows by key (a job id, a plan id, a batch of them).
    psycopg prepares a statement after a few uses, and PostgreSQL keeps the plan it made
    from the statistics of that moment for the connection's life: a new day's partition
    (made ahead, empty) gets a Seq Scan, which stays while the partition fills (the bench's
    prefork row: two scans of the whole partition per job). Off, the planner takes an
    index whatever the statistics say (the primary key, or the live-set index); a statement
    with no usable index would still scan. A SET, not a startup option, so poolers that
    refuse unknown startup parameters (PgBouncer) still connect (docs/ledger.md).
    """
    dbapi_conn.execute(KEYED_LOOKUPS_ONLY)
    if not dbapi_conn.autocommit:  # the SET opened a transaction: keep it for the session
        dbapi_conn.commit()


class Database:
    """The engines plus a per-context session, so a job store and a plan store share a txn."""

    def __init__(self, url: str, engine: Engine | None = None, **engine_kwargs: Any) -> None:
        self.url = normalise_url(url)
        self.engine = engine or make_engine(self.url, **engine_kwargs)
        self._current: ContextVar[Session | None] = ContextVar(
            f"planq_session_{id(self)}", default=None
        )
        self._hot = (
            make_hot_engine(self.url, **engine_kwargs)
            if self.engine.dialect.name == "postgresql"
            else self.engine  # SQLite: one engine, one file lock; BEGIN IMMEDIATE per block
        )

    @property
    def engines(self) -> tuple[Engine, ...]:
        """Every engine this database talks through (for instrumentation and disposal)."""
        return (self.engine,) if self._hot is self.engine else (self.engine, self._hot)

    @property
    def dialect(self) -> str:
        """'sqlite' or 'postgresql'."""
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """The ambient session, or a new one committed on exit (rolled back on error).

        A transient failure is LedgerUnavailableError; a row or value the schema refuses
        (IntegrityError, DataError) not caught by the store inside is LedgerRejectedError
        (the constraint, never the SQL). Anything else (a schema that is not migrated)
        stays SQLAlchemy's, for the CLI to explain.
        """
        ambient = self._current.get()
        if ambient is not None:
            yield ambient
            return
        try:
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                token = self._current.set(session)
                try:
                    yield session
                finally:
                    self._current.reset(token)
        except DBAPIError as exc:
            if is_transient(exc):
                raise as_outage(exc) from exc
            if isinstance(exc, IntegrityError | DataError):
                raise as_rejection(exc, "write") from None
            raise

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything the stores do inside commits together."""
        with self.session():
            yield

    @property
    def in_transaction(self) -> bool:
        """Whether this context writes inside an ambient transaction (a failure aborts it)."""
        return self._current.get() is not None

    @contextmanager
    def connection(self, operation: str = "write") -> Iterator[Connection]:
        """The hot path's connection, in one transaction (the ambient session's, if any).

        On PostgreSQL it comes from the hot engine (`make_hot_engine`): one round trip per
        statement. On SQLite the block is one BEGIN IMMEDIATE. A transient failure is
        LedgerUnavailableError (ridden out by the caller); any other refusal is
        LedgerRejectedError naming `operation` and the constraint, never the SQL.
        """
        ambient = self._current.get()
        if ambient is not None:
            yield ambient.connection()
            return
        try:
            with self._hot.begin() as conn:
                yield conn
        except DBAPIError as exc:
            if is_transient(exc):
                raise as_outage(exc) from exc
            raise as_rejection(exc, operation) from None

    def dispose_after_fork(self) -> None:
        """Drop connections inherited from the parent process without closing them."""
        for engine in self.engines:
            engine.dispose(close=False)

    def close(self) -> None:
        """Close every pooled connection."""
        for engine in self.engines:
            engine.dispose()


class OnDatabase:
    """What a SQL store is to its ports: stores on one Database are one ledger.

    Their transactions are the database's ambient one, so the job and plan stores (and a
    pipeline's writes through both) commit together.
    """

    def __init__(self, database: Database) -> None:
        self.db = database

    @property
    def ledger(self) -> Database:
        """The database: stores on the same Database object are one ledger."""
        return self.db

    def transaction(self) -> AbstractContextManager[None]:
        """The database's ambient transaction (shared by every store on it)."""
        return self.db.transaction()
