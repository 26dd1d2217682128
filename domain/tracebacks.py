"""A failed job's traceback as stored text: the whole chain, redacted, then bounded.

The line of the user's bug is what an operator needs, so the executor's traceback is kept
with the failed row (`async_jobs.error_traceback`) and shown by the worker log, Flower,
`AsyncResult.traceback`, the CLI and the API. It is redacted as a whole BEFORE it is cut,
so a cut can never split a secret into a piece no pattern recognises; then the head (the
outermost frames: where planq called the executor) and the tail (the innermost frames and
the exception itself: where it went wrong) are kept, and one line says what was cut.
"""

from __future__ import annotations

import traceback

from planq.domain.bounds import MAX_TRACEBACK_LENGTH
from planq.domain.redaction import Redactor, describe_exception, printable

#: The share of the bound kept from the start; the rest goes to the last frames.
HEAD_SHARE = 0.25
_FRAME = '\n  File "'  #: where a frame of Python's traceback starts
_CUT = "\n[... {chars} characters ({lines} lines) of the traceback cut by planq ...]\n"


def format_traceback(exc: BaseException) -> str:
    """The exception's traceback with its `__cause__`/`__context__` chain, as Python prints it.

    Never raises: a failure to format (a broken `__str__` is handled by `traceback` itself)
    falls back to the exception's one-line description, unredacted here like the rest.
    """
    try:
        return "".join(traceback.format_exception(exc))
    except Exception:  # formatting must not turn a job's failure into a worker's crash
        return f"{type(exc).__name__} (its traceback could not be formatted)\n"


def bound_traceback(text: str, limit: int = MAX_TRACEBACK_LENGTH) -> str:
    """Text of at most `limit` characters: the head and the tail kept, the middle named.

    Cuts fall between frames (else between lines) where that keeps at least half of each
    part; a single huge line (an exception message of megabytes) is cut inside it.
    """
    if len(text) <= limit:
        return text
    room = limit - len(_CUT.format(chars=len(text), lines=text.count("\n") + 1))
    if room < 2:  # a limit too small for the note: a plain cut
        return text[:limit]
    head = text[: int(room * HEAD_SHARE)]
    tail = text[len(text) - (room - len(head)) :]
    for mark in (_FRAME, "\n"):  # a whole frame where one fits, else a whole line
        end = head.rfind(mark) + 1
        if end * 2 >= len(head):
            head = head[:end]
            break
    for mark in (_FRAME, "\n"):
        start = tail.find(mark) + 1
        if start > 0 and start * 2 <= len(tail):
            tail = tail[start:]
            break
    cut = text[len(head) : len(text) - len(tail)]
    return head.rstrip("\n") + _CUT.format(chars=len(cut), lines=cut.count("\n") + 1) + tail


def redact_traceback(text: str, redactor: Redactor, limit: int = MAX_TRACEBACK_LENGTH) -> str:
    """Redacted (the whole text, first), storable (no NULs or controls), then bounded."""
    return bound_traceback(printable(redactor(str(text))), limit)


def describe_traceback(exc: BaseException, redactor: Redactor) -> str:
    """The stored form of exc's traceback; its one-line description if even that fails."""
    try:
        return redact_traceback(format_traceback(exc), redactor)
    except Exception:  # the redactor itself failing: never lose the job's failure over it
        return describe_exception(exc, redactor)
