"""Errors as JSON: the CLI's error classes map to HTTP statuses, and no traceback ever leaks.

One rule for both front ends: cli.output.classify() decides what an exception means (bad
input, refused, unavailable), so the API answers 422 / 409 / 503 exactly where the CLI exits
2 / 1 / 3. An unknown exception is a bug: 500 with a one-line body, the traceback in the log.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from planq.cli.api.auth import Forbidden, Unauthorized
from planq.cli.api.state import api_state
from planq.cli.output import (
    BadInput,
    CliError,
    Denied,
    NotFound,
    Refused,
    TimedOut,
    Unavailable,
    classify,
    cut,
    one_line,
)

logger = logging.getLogger("planq.api")

#: Validation problems listed in a 422 (a list of 1,000 bad steps is not echoed 1,000 times).
MAX_PROBLEMS = 20
#: (error class, HTTP status, error code), most specific first.
STATUS_FOR: tuple[tuple[type[CliError], int, str], ...] = (
    (NotFound, 404, "not_found"),
    (BadInput, 422, "bad_input"),
    (Denied, 403, "forbidden"),
    (Refused, 409, "refused"),
    (TimedOut, 504, "timeout"),
    (Unavailable, 503, "unavailable"),
)


class Conflict(Exception):
    """A refusal whose body is a document (e.g. trigger skipped: already_running)."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body.get("message", "conflict"))
        self.body = body


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    """The JSON every error answers with; its message cut to MAX_MESSAGE characters."""
    return {"error": code, "message": cut(message), **extra}


def respond(request: Request, error: CliError) -> JSONResponse:
    """The response for a classified error, its message redacted like the ledger's."""
    status, code = next((s, c) for cls, s, c in STATUS_FOR if isinstance(error, cls))
    message = api_state(request).redact(error.message)
    return JSONResponse(error_body(code, message), status_code=status)


def _service_down(exc: Exception) -> CliError | None:
    """Ledger and broker failures classify() leaves alone (pool timeouts, redis-py errors)."""
    from kombu.exceptions import KombuError
    from redis.exceptions import RedisError
    from sqlalchemy.exc import SQLAlchemyError

    if isinstance(exc, SQLAlchemyError):
        return Unavailable(f"ledger: {one_line(exc)}")
    if isinstance(exc, RedisError | KombuError):
        return Unavailable(f"broker: {one_line(exc)}")
    return None


async def _known(request: Request, exc: Exception) -> JSONResponse:
    error = classify(exc) or _service_down(exc)
    if error is None:
        return await _internal(request, exc)
    return respond(request, error)


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    problems = [  # never pydantic's "input": that is the request echoed back
        {
            "loc": [cut(str(p), 60) for p in e.get("loc", ())],
            "msg": cut(str(e.get("msg", ""))),
            "type": str(e.get("type", "")),
        }
        for e in errors[:MAX_PROBLEMS]
    ]
    first = problems[0] if problems else {"loc": [], "msg": "invalid request"}
    where = ".".join(p for p in first["loc"] if p not in ("body", "query", "path")) or "request"
    message = api_state(request).redact(f"{where}: {first['msg']}")
    extra = {"more_problems": len(errors) - MAX_PROBLEMS} if len(errors) > MAX_PROBLEMS else {}
    body = error_body("bad_input", message, detail=problems, **extra)
    return JSONResponse(body, status_code=422)


async def _unauthorized(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Unauthorized)
    return JSONResponse(
        error_body("unauthorized", exc.message),
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer realm="planq"'},
    )


async def _forbidden(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Forbidden)
    return JSONResponse(error_body(exc.code, api_state(request).redact(exc.message)), 403)


async def _conflict(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Conflict)
    return JSONResponse(exc.body, status_code=409)


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    logger.error("%s %s failed: %s", request.method, request.url.path, one_line(exc), exc_info=exc)
    return JSONResponse(
        error_body("internal", "internal error (the API's log has the details)"),
        status_code=500,
    )


def known_exception_types() -> tuple[type[Exception], ...]:
    """What classify() understands: planq's errors, bad values, ledger and broker failures."""
    from kombu.exceptions import KombuError
    from redis.exceptions import RedisError
    from sqlalchemy.exc import SQLAlchemyError

    from planq.domain.errors import PlanqError

    return (CliError, PlanqError, ValueError, SQLAlchemyError, KombuError, RedisError, OSError)


def install_error_handlers(app: FastAPI) -> None:
    """Register every handler on app."""
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(Unauthorized, _unauthorized)
    app.add_exception_handler(Forbidden, _forbidden)
    app.add_exception_handler(Conflict, _conflict)
    for exc_type in known_exception_types():
        app.add_exception_handler(exc_type, _known)
    app.add_exception_handler(Exception, _internal)
