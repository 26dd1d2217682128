"""cli.output.classify: which exceptions are the user's input (exit 2), an outage (3), or a bug."""

from __future__ import annotations

import pytest
from kombu.exceptions import OperationalError as BrokerError
from sqlalchemy.exc import DataError, OperationalError, ProgrammingError

from planq.cli.output import BAD_INPUT, REFUSED, UNAVAILABLE, classify
from planq.cli.services import NotFound, PlanGone
from planq.domain.errors import BoundsError, InvalidIdError, LedgerUnavailableError, WrongTypeError


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (BoundsError("name", "must be at most 200 characters"), BAD_INPUT),
        (WrongTypeError("limit", "must be an integer", "'x'"), BAD_INPUT),  # a TypeError too
        (InvalidIdError("job_id", "nope"), BAD_INPUT),
        (ValueError("limit must be >= 1"), BAD_INPUT),
        (NotFound("no job with id 'X'"), BAD_INPUT),
        (PlanGone("job X's plan Y no longer exists"), REFUSED),
        (DataError("INSERT", {}, Exception("invalid byte sequence: 0x00")), BAD_INPUT),
        (OperationalError("SELECT 1", {}, Exception("connection refused")), UNAVAILABLE),
        (ProgrammingError("SELECT", {}, Exception("no such table: plans")), UNAVAILABLE),
        (LedgerUnavailableError("ledger down"), UNAVAILABLE),
        (BrokerError("Error 111 connecting"), UNAVAILABLE),
    ],
)
def test_known_failures_map_to_their_exit_code(exc: Exception, code: int) -> None:
    error = classify(exc)
    assert error is not None and error.code == code
    assert "\n" not in error.message


@pytest.mark.parametrize(
    "exc", [TypeError("'NoneType' object is not subscriptable"), KeyError("x")]
)
def test_a_bug_is_left_to_show_its_traceback(exc: Exception) -> None:
    assert classify(exc) is None
