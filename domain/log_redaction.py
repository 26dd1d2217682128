"""A logging filter that redacts every record, its exception text and chained causes included.

Installed on each handler of a planq process (the worker's, beat's) when its logging is set
up, holding the one redactor built from settings: a secret in a log call's message, its
arguments, or anywhere in a traceback (`raise X from Y` where Y carries the secret) is
redacted before any handler formats or writes it.
"""

from __future__ import annotations

import logging

from planq.domain.redaction import Redactor


class RedactingFilter(logging.Filter):
    """Rewrite a record in place: message and args merged, exception text pre-formatted."""

    _formatter = logging.Formatter()

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        """Always keep the record; only its text changes (idempotent: REDACTED stays so)."""
        try:
            message = record.getMessage()
        except Exception:  # a broken log call: show what it was given, redacted
            message = f"{record.msg!r} % {record.args!r}"
        record.msg = self.redactor(message)
        record.args = None
        if record.exc_info and record.exc_info[0] is not None:
            # The whole chain (__cause__ and __context__), formatted once and redacted.
            record.exc_text = self._formatter.formatException(record.exc_info)
        record.exc_info = None
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor(record.stack_info)
        return True


def install_redacting_filter(logger: logging.Logger, redactor: Redactor) -> int:
    """Put the filter on every handler of logger (once per redactor); how many it guards.

    A handler already guarded by an equal redactor is left alone, so a second setup (a
    restarted embedded worker) adds nothing; a different one (another app's patterns in
    the same process) is added beside it, so neither app's patterns are dropped.
    """
    guarded = 0
    for handler in logger.handlers:
        held = [f.redactor for f in handler.filters if isinstance(f, RedactingFilter)]
        if redactor not in held:
            handler.addFilter(RedactingFilter(redactor))
        guarded += 1
    return guarded
