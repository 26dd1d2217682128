"""cli.output.classify: which exceptions are the user's input (exit 2), an outage (3), or a bug."""

from __future__ import annotations

import pytest
from kombu.exceptions import OperationalError as BrokerError
from sqlalchemy.exc import DataError, OperationalError, ProgrammingError

from planq.cli.output import BAD_INPUT, REFUSED, UNAVAILABLE, NotFound, classify
from planq.domain.errors import (
    BoundsError,
    CancelTooLateError,
    InvalidIdError,
    InvalidJobTransitionError,
    JobNotFoundError,
    LedgerUnavailableError,
    NoRunningRunError,
    PlanGoneError,
    PlanNotFoundError,
    RunNotFoundError,
    UnknownRecoverableJobError,
    UnknownRunArgError,
    WrongTypeError,
)


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (BoundsError("name", "must be at most 200 characters"), BAD_INPUT),
        (WrongTypeError("limit", "must be an integer", "'x'"), BAD_INPUT),  # a TypeError too
        (InvalidIdError("job_id", "nope"), BAD_INPUT),
        (ValueError("limit must be >= 1"), BAD_INPUT),
        (NotFound("no job with id 'X'"), BAD_INPUT),
        (PlanGoneError("X", "Y"), REFUSED),  # a PlanNotFoundError, but refused: not a 404
        (InvalidJobTransitionError("X", "succeeded", "cancelled"), REFUSED),
        (NoRunningRunError("scan", "Completed"), REFUSED),
        (UnknownRunArgError("arg 'x' is not one scan takes"), BAD_INPUT),
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


@pytest.mark.parametrize(
    "exc",
    [
        JobNotFoundError("X"),
        PlanNotFoundError("Y"),
        RunNotFoundError("Z"),
        UnknownRecoverableJobError("scan", ["other"]),
    ],
)
def test_the_service_objects_not_found_errors_are_not_found(exc: Exception) -> None:
    """The service raises domain errors; the CLI's exit 2 and the API's 404 come from here."""
    error = classify(exc)
    assert isinstance(error, NotFound) and error.message == str(exc)


def test_a_cancel_too_late_is_refused_naming_how_the_phase_ended() -> None:
    from datetime import UTC, datetime

    from planq.domain.jobs import AsyncJob, AsyncJobStatus
    from planq.domain.plans import PlanPhase

    job = AsyncJob(plan_id="01J0000000000000000000000A", phase=PlanPhase.execute).model_copy(
        update={"status": AsyncJobStatus.succeeded, "finished_at": datetime(2026, 1, 2, tzinfo=UTC)}
    )
    error = classify(CancelTooLateError("01J0000000000000000000000A", job))
    assert error is not None and error.code == REFUSED
    assert "execute job" in error.message and "ended succeeded at 2026-01-02" in error.message
