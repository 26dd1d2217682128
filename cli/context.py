"""The CLI's view of planq, built lazily from the environment (PLANQ_*) when a command needs it.

Nothing here runs at import, so `planq --help` needs no settings and no services. A listing
command touches only the ledger; a publishing command also checks the broker first, so a
broker outage refuses the command before the ledger is changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import Any

from planq.cli.output import BadInput, Unavailable, one_line

#: Seconds to wait for the broker before a publishing command gives up.
BROKER_CHECK_TIMEOUT = 5.0


def load_settings() -> Any:
    """PlanqSettings from the environment; BadInput (one line) if a value is invalid."""
    from planq.domain.errors import ConfigurationError
    from planq.worker_config.settings import load_settings as load  # builds nothing at import

    try:
        return load()
    except ConfigurationError as exc:
        raise BadInput(f"invalid setting: {exc}") from None


def build_app(settings: Any) -> Any:
    """The Celery app for these settings (tests may wrap this to add tasks)."""
    from planq.worker_config.bootstrap import bootstrap

    return bootstrap(settings)


class Planq:
    """Settings, app, runtime and run store for one command; each built on first use."""

    @cached_property
    def settings(self) -> Any:
        """PlanqSettings from the environment."""
        return load_settings()

    @cached_property
    def redactor(self) -> Any:
        """planq.domain.redaction.Redactor: the one redactor of this session, built from settings.

        The app built below (and so its runtime) gets its own from the same settings: the
        same patterns, so every text this session shows is redacted alike.
        """
        return self.settings.redactor()

    @cached_property
    def app(self) -> Any:
        """The Celery app (no connection is opened by building it)."""
        return build_app(self.settings)

    @cached_property
    def runtime(self) -> Any:
        """planq.tasks.runtime.Runtime: ledger stores, engine, lifecycle, publisher.

        A command that read first (`ledger`: a LedgerReader) hands its Database on, so a
        find-then-write opens one pool, and the runtime closes it.
        """
        from planq.tasks.runtime import runtime_for

        reader = self.__dict__.get("ledger")
        runtime = runtime_for(self.app, reader.db if reader is not None else None)
        if reader is not None and runtime.db is not reader.db:
            reader.close()  # the app had a runtime already: its pool serves from now on
        self.__dict__["ledger"] = runtime  # reads go through the runtime's stores from now on
        return runtime

    @cached_property
    def service(self) -> Any:
        """planq.tasks.service.PlanqService: every write (jobs, plans, runs), one object."""
        return self.runtime.service

    @cached_property
    def ledger(self) -> Any:
        """Read-only stores (jobs, plans, runs) without Celery: all a listing needs.

        The runtime's own stores when a command has built it; otherwise a LedgerReader, so
        `planq jobs list` never imports celery, kombu or the task modules.
        """
        if "runtime" in self.__dict__:
            return self.runtime
        from planq.worker_config.ledger import LedgerReader

        return LedgerReader(self.settings.database_url)

    @cached_property
    def runs(self) -> Any:
        """The recoverable-run store provider on the ledger database."""
        return self.ledger.runs

    def require_broker(self) -> None:
        """Unavailable unless the broker answers (checked before a publishing command writes)."""
        from planq.cli.output import classify

        if str(self.settings.broker_url).startswith("memory://"):
            raise BadInput(
                "PLANQ_BROKER_URL is memory://, which lives inside one process: a message sent "
                "from the CLI would vanish (use the Redis broker, or `planq demo`)"
            )
        try:
            with self.app.connection_for_write() as conn:
                conn.ensure_connection(
                    max_retries=1, interval_start=0, interval_step=0.5, timeout=BROKER_CHECK_TIMEOUT
                )
        except Exception as exc:
            error = classify(exc)
            if error is None:
                raise Unavailable(f"broker: {one_line(exc)}") from None
            raise error from None

    def close(self) -> None:
        """Release the runtime's connections and the app's broker pools."""
        ledger = self.__dict__.get("ledger")
        if ledger is not None and "runtime" not in self.__dict__:
            ledger.close()  # the LedgerReader (a runtime's stores close with the runtime)
        if "runtime" in self.__dict__:
            from planq.tasks.runtime import reset_runtime

            reset_runtime(self.app)
        if "app" in self.__dict__:
            self.app.close()


@contextmanager
def planq() -> Iterator[Planq]:
    """A Planq for the duration of one command, closed afterwards."""
    session = Planq()
    try:
        yield session
    finally:
        session.close()
