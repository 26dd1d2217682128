"""The log filter a planq process puts on its handlers: every part of a record redacted."""

from __future__ import annotations

import io
import logging

import pytest

from planq.domain.log_redaction import RedactingFilter, install_redacting_filter
from planq.domain.redaction import REDACTED, Redactor

REDACTOR = Redactor.from_patterns([r"tok_[A-Za-z0-9]+"])


@pytest.fixture
def logged() -> tuple[logging.Logger, io.StringIO]:
    """A logger whose one handler writes to a buffer, guarded by the filter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.Logger("planq.test.log_redaction")  # not in the global manager
    logger.addHandler(handler)
    assert install_redacting_filter(logger, REDACTOR) == 1
    assert install_redacting_filter(logger, REDACTOR) == 1  # idempotent: still one filter
    assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 1
    install_redacting_filter(logger, Redactor.from_patterns([r"other_[a-z]+"]))
    assert sum(isinstance(f, RedactingFilter) for f in handler.filters) == 2  # both kept
    return logger, stream


def test_message_args_and_the_whole_exception_chain_are_redacted(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged
    try:
        try:
            raise KeyError("cause tok_CAUSE1")
        except KeyError as cause:
            raise RuntimeError("effect tok_EFFECT2") from cause
    except RuntimeError:
        logger.exception("call with %s failed", "tok_ARG3", stack_info=True)
    text = stream.getvalue()
    assert f"call with {REDACTED} failed" in text
    assert f"KeyError: 'cause {REDACTED}'" in text
    assert f"RuntimeError: effect {REDACTED}" in text
    assert "The above exception was the direct cause" in text
    assert "tok_" not in text


def test_a_broken_log_call_is_still_written_redacted(
    logged: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = logged
    logger.warning("two %s %s but one arg", "tok_ONLY4")
    text = stream.getvalue()
    assert REDACTED in text and "tok_" not in text
