"""A failed job's traceback as stored: the whole chain, redacted first, then bounded."""

from __future__ import annotations

import re

import pytest

from planq.domain.bounds import MAX_TRACEBACK_LENGTH
from planq.domain.errors import BoundsError
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, check_error_traceback
from planq.domain.plans import PlanPhase
from planq.domain.redaction import BUILTIN, REDACTED, Redactor
from planq.domain.tracebacks import bound_traceback, describe_traceback, redact_traceback

CUT = re.compile(
    r"\[\.\.\. (\d+) characters \((\d+) lines\) of the traceback cut by planq \.\.\.\]"
)


def _raise_chain() -> BaseException:
    try:
        try:
            raise KeyError("credential tok_CAUSEa1 refused")
        except KeyError as cause:
            raise RuntimeError("password=chainsecret upstream down") from cause
    except RuntimeError as exc:
        return exc


def test_the_whole_chain_is_kept_and_every_secret_in_it_redacted() -> None:
    redactor = Redactor.from_patterns([r"tok_[A-Za-z0-9]+"])
    text = describe_traceback(_raise_chain(), redactor)
    assert "The above exception was the direct cause" in text
    assert f"KeyError: 'credential {REDACTED} refused'" in text
    assert f"RuntimeError: password={REDACTED} upstream down" in text
    assert "in _raise_chain" in text
    assert "tok_CAUSE" not in text and "chainsecret" not in text


@pytest.mark.parametrize("size", [0, 10, 999, 1000])
def test_a_short_traceback_is_kept_whole(size: int) -> None:
    text = "x" * size
    assert bound_traceback(text, 1000) == text


@pytest.mark.parametrize(
    "text",
    [
        "".join(f'  File "m.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(3000)),
        "y" * 100_000,  # one huge line (a message of megabytes): cut inside it
        "a\n" * 50_000,
    ],
)
def test_a_long_traceback_keeps_its_head_and_tail_and_says_what_was_cut(text: str) -> None:
    bounded = bound_traceback(text, MAX_TRACEBACK_LENGTH)
    assert len(bounded) <= MAX_TRACEBACK_LENGTH
    match = CUT.search(bounded)
    assert match is not None
    head, tail = bounded[: match.start()], bounded[match.end() :]
    assert text.startswith(head.rstrip("\n")) and text.endswith(tail.lstrip("\n"))
    assert len(tail) > 2 * len(head) > 0  # the last frames get most of the room
    kept = len(head.rstrip("\n")) + len(tail.lstrip("\n"))
    assert int(match[1]) == len(text) - kept or int(match[1]) == len(text) - kept - 1


def test_frames_are_cut_whole() -> None:
    text = "".join(f'  File "m.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(3000))
    bounded = bound_traceback(text, 2000)
    head, tail = CUT.split(bounded)[0], CUT.split(bounded)[-1]
    assert head.rstrip("\n").endswith("()") and tail.startswith('\n  File "m.py"')


def test_a_secret_is_redacted_before_the_cut_can_split_it() -> None:
    secret = "s" * 20_000  # a value so long the cut falls inside it
    text = f"Traceback (most recent call last):\nValueError: password={secret} end\n"
    stored = redact_traceback(text, BUILTIN)
    assert "s" * 20 not in stored and f"password={REDACTED} end" in stored


def test_controls_are_made_storable_and_newlines_kept() -> None:
    stored = redact_traceback("Traceback\x00 (most recent call last):\n\tx\x07\n", BUILTIN)
    assert "\x00" not in stored and "\x07" not in stored and "\n\t" in stored


def test_an_unprintable_exception_never_shows_what_its_str_raised() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("password=hunter2 leaked by __str__")

    try:
        raise Unprintable()
    except Unprintable as exc:
        text = describe_traceback(exc, BUILTIN)
    assert "Unprintable" in text and "hunter2" not in text


def test_the_job_refuses_a_traceback_over_the_bound() -> None:
    job = AsyncJob(plan_id=new_id(), phase=PlanPhase.strategize)
    job.error_traceback = "t" * MAX_TRACEBACK_LENGTH
    with pytest.raises(ValueError):
        job.error_traceback = "t" * (MAX_TRACEBACK_LENGTH + 1)
    with pytest.raises(BoundsError):
        check_error_traceback("t" * (MAX_TRACEBACK_LENGTH + 1))
