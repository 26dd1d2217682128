"""One Database per process: the engine, and the ambient transaction the stores share."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from domain.errors import LedgerUnavailableError
from domain.redaction import redact_secrets

DEFAULT_SQLITE_BUSY_MS = 30_000


def normalise_url(url: str) -> str:
    """Use psycopg 3 for PostgreSQL whatever driver the URL names."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql" and parsed.drivername != "postgresql+psycopg":
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


class Database:
    """The engine plus a per-context session, so a job store and a plan store share a txn."""

    def __init__(self, url: str, engine: Engine | None = None, **engine_kwargs: Any) -> None:
        self.url = normalise_url(url)
        self.engine = engine or make_engine(self.url, **engine_kwargs)
        self._current: ContextVar[Session | None] = ContextVar(
            f"planq_session_{id(self)}", default=None
        )
        self._local = threading.local()
        self._owned: set[Connection] = set()  #: every thread's own connection, for close()
        self._owned_lock = threading.Lock()

    @property
    def dialect(self) -> str:
        """'sqlite' or 'postgresql'."""
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """The ambient session, or a new one committed on exit (rolled back on error)."""
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
            raise

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything the stores do inside commits together."""
        with self.session():
            yield

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """The hot path's connection, in one transaction.

        The ambient session's if any, else this thread's own, checked out once and kept
        (no pool checkout or pre-ping per job).

        On PostgreSQL it is in autocommit: a hot statement is atomic by itself and costs one
        round trip (no BEGIN/COMMIT). On SQLite the block is one BEGIN IMMEDIATE.
        """
        ambient = self._current.get()
        if ambient is not None:
            yield ambient.connection()
            return
        conn = self._own_connection()
        try:
            with conn.begin():
                yield conn
        except DBAPIError as exc:
            if exc.connection_invalidated or is_transient(exc):
                self._drop_own_connection()
            if is_transient(exc):
                raise as_outage(exc) from exc
            raise

    def _own_connection(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.invalidated:
            try:
                conn = self.engine.connect()
            except DBAPIError as exc:
                if is_transient(exc):
                    raise as_outage(exc) from exc
                raise
            if self.dialect == "postgresql":
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            self._local.conn = conn
            with self._owned_lock:
                self._owned.add(conn)
        return conn

    def _drop_own_connection(self) -> None:
        conn: Connection | None = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with self._owned_lock:
                self._owned.discard(conn)
            with contextlib.suppress(Exception):  # it is already broken; the pool makes anew
                conn.invalidate()
                conn.close()

    def dispose_after_fork(self) -> None:
        """Drop connections inherited from the parent process without closing them."""
        # The parent's per-thread connections are kept referenced, never finalised here:
        # finalising one would send a ROLLBACK down a socket the parent still uses.
        _INHERITED.append((self._local, self._owned))
        self._local = threading.local()
        self._owned = set()
        self.engine.dispose(close=False)

    def close(self) -> None:
        """Close every pooled connection, the threads' own ones included."""
        with self._owned_lock:
            owned, self._owned = self._owned, set()
        for conn in owned:
            with contextlib.suppress(Exception):  # at shutdown a broken one is gone anyway
                conn.close()
        self._local = threading.local()
        self.engine.dispose()


#: Per-thread connection holders a forked child inherited: kept alive, never used.
_INHERITED: list[tuple[threading.local, set[Connection]]] = []
