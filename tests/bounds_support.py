"""Hypothesis strategies for values just outside planq's bounds (domain/bounds.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from planq.domain.bounds import (
    INT64_MAX,
    MAX_CURSOR_BYTES,
    MAX_DETAIL_BYTES,
    MAX_JSON_DEPTH,
    MAX_KIND_LENGTH,
    MAX_PARAM_KEY_LENGTH,
    MAX_PARAM_VALUE_BYTES,
    MAX_RESOURCE_ID_LENGTH,
)
from planq.domain.errors import BoundsError
from planq.domain.runs import ProgressKind, RunStore

#: Every property below runs at least 1,000 cases; a store fixture is built once per test.
THOUSAND = settings(
    max_examples=1000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

UNSTORABLE = st.sampled_from(["\x00", "\ud800", "\udfff", "\udc80"])
SHORT_TEXT = st.text(max_size=12)
NOT_TEXT: st.SearchStrategy[object] = st.one_of(
    st.integers(),
    st.floats(),
    st.booleans(),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def with_unstorable(max_length: int) -> st.SearchStrategy[str]:
    """A text that fits the length but carries a NUL byte or a lone surrogate."""
    half = max(0, (max_length - 1) // 2)
    return st.tuples(
        st.text(max_size=min(half, 20)), UNSTORABLE, st.text(max_size=min(half, 20))
    ).map(lambda parts: "".join(parts))


def too_long(max_length: int) -> st.SearchStrategy[str]:
    """A text of more than max_length characters (built by repetition: fast at any size)."""
    return st.tuples(
        st.text(st.characters(codec="utf-8"), min_size=1, max_size=6).filter(str.strip),
        st.integers(min_value=1, max_value=50),
    ).map(lambda t: (t[0] * (max_length // len(t[0]) + 2))[: max_length + t[1]])


def too_many_bytes(max_bytes: int) -> st.SearchStrategy[str]:
    """A text whose UTF-8 form is more than max_bytes (ASCII or multi-byte characters)."""
    return st.tuples(st.sampled_from(["x", "é", "€", "𝄞"]), st.integers(1, 64)).map(
        lambda t: t[0] * (max_bytes // len(t[0].encode()) + t[1])
    )


def blank() -> st.SearchStrategy[str]:
    """Empty or whitespace-only text."""
    return st.text(st.sampled_from(" \t\n\r"), max_size=4)


def bad_text(max_length: int, *, allow_empty: bool = False) -> st.SearchStrategy[object]:
    """Anything a bounded text argument must refuse."""
    options: list[st.SearchStrategy[object]] = [
        NOT_TEXT,
        with_unstorable(max_length),
        too_long(max_length),
    ]
    if not allow_empty:
        options.append(blank())
    return st.one_of(options)


#: Job and run ids a store must refuse: not text, blank, unstorable, or over 26 characters.
BAD_IDS = bad_text(26)


def bad_int(low: int, high: int) -> st.SearchStrategy[object]:
    """Integers outside [low, high], and values that are not integers at all."""
    return st.one_of(
        st.integers(max_value=low - 1),
        st.integers(min_value=high + 1),
        st.integers(min_value=high + 1, max_value=2**70),
        st.sampled_from([10**400, -(10**400)]),
        st.booleans(),
        st.floats(),
        st.text(max_size=4),
        st.none(),
    )


def bad_number(low: float, high: float) -> st.SearchStrategy[object]:
    """Numbers outside [low, high], NaN, infinities, huge ints, and non-numbers."""
    return st.one_of(
        st.floats(max_value=low, exclude_max=True),
        st.floats(min_value=high, exclude_min=True),
        st.sampled_from([float("nan"), float("inf"), float("-inf"), 10**400, 1e300]),
        st.booleans(),
        st.text(max_size=4),
        st.none(),
    )


def nested(depth: int, leaf: Any = 0, as_dict: bool = False) -> Any:
    """A list (or dict) nested depth levels deep, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = {"k": value} if as_dict else [value]
    return value


def too_deep() -> st.SearchStrategy[Any]:
    """A JSON value nested beyond MAX_JSON_DEPTH (up to far past the recursion limit)."""
    return st.tuples(
        st.one_of(
            st.integers(MAX_JSON_DEPTH + 1, MAX_JSON_DEPTH + 20),
            st.integers(900, 1100),
            st.integers(3000, 5000),
        ),
        st.booleans(),
    ).map(lambda t: nested(t[0], as_dict=t[1]))


def expect_bounds(error: pytest.ExceptionInfo[BaseException], field: str) -> BoundsError:
    """The error is a BoundsError naming field, with a one-line message that names it too."""
    exc = error.value
    assert isinstance(exc, BoundsError), f"{type(exc).__name__}: {exc}"
    assert isinstance(exc, ValueError)
    assert exc.field == field or exc.field.startswith(field), (exc.field, field)
    text = str(exc)
    assert "\n" not in text and exc.field in text and len(text) < 400
    return exc


def nested_text(depth: int, as_dict: bool = False) -> str:
    """JSON text nested depth levels deep (json.dumps would hit the recursion limit)."""
    if as_dict:
        return '{"k":' * depth + "0" + "}" * depth
    return "[" * depth + "0" + "]" * depth


def too_deep_text(wrap: str = "{}") -> st.SearchStrategy[str]:
    """JSON text nested beyond MAX_JSON_DEPTH; wrap's {} is where the deep value goes."""
    return st.tuples(
        st.one_of(
            st.integers(MAX_JSON_DEPTH + 1, MAX_JSON_DEPTH + 20),
            st.integers(900, 1100),
            st.integers(3000, 5000),
        ),
        st.booleans(),
    ).map(
        lambda t: (
            wrap.replace("{}", nested_text(t[0], t[1]), 1)
            if wrap != "{}"
            else nested_text(t[0], t[1])
        )
    )


#: (field, write, value): one run write with one argument out of bounds.
RUN_WRITES = st.one_of(
    st.tuples(
        st.just("cursor"),
        st.just("checkpoint"),
        NOT_TEXT.filter(lambda v: not isinstance(v, bytes)),
    ),
    st.tuples(
        st.just("cursor"),
        st.just("checkpoint"),
        st.integers(1, 64).map(lambda n: b"c" * (MAX_CURSOR_BYTES + n)),
    ),
    st.tuples(st.just("delta_count"), st.just("checkpoint"), bad_int(0, INT64_MAX)),
    st.tuples(
        st.just("delta_count"), st.just("checkpoint"), st.integers(11, INT64_MAX)
    ),  # overflow
    st.tuples(st.just("param key"), st.just("param"), bad_text(MAX_PARAM_KEY_LENGTH)),
    st.tuples(st.just("param value"), st.just("param"), NOT_TEXT),
    st.tuples(st.just("param value"), st.just("param"), with_unstorable(100)),
    st.tuples(st.just("param value"), st.just("param"), too_many_bytes(MAX_PARAM_VALUE_BYTES)),
    st.tuples(st.just("kind"), st.just("finding"), bad_text(MAX_KIND_LENGTH)),
    st.tuples(st.just("severity"), st.just("finding"), st.text(max_size=8)),
    st.tuples(
        st.just("resource_id"),
        st.just("finding"),
        bad_text(MAX_RESOURCE_ID_LENGTH, allow_empty=True).filter(lambda v: v is not None),
    ),
    st.tuples(st.just("detail"), st.just("finding"), too_deep().map(lambda v: {"d": v})),
    st.tuples(
        st.just("detail"),
        st.just("finding"),
        too_many_bytes(MAX_DETAIL_BYTES).map(lambda s: {"d": s}),
    ),
    st.tuples(
        st.just("detail"),
        st.just("finding"),
        st.sampled_from([[1], "x", 3, {"n": float("nan")}, {"s": {1, 2}}]),
    ),
    st.tuples(
        st.just("total"), st.just("seed"), bad_int(0, INT64_MAX).filter(lambda v: v is not None)
    ),
    st.tuples(st.just("progress kind"), st.just("seed"), st.text(max_size=8)),
)


def run_write(store: RunStore, op: str, field: str, value: Any) -> None:
    """Call the write op of store with value in the named argument, the rest valid."""
    if op == "checkpoint":
        cursor, delta = (value, 1) if field == "cursor" else (b"next", value)
        store.checkpoint(cursor, delta)
    elif op == "param":
        key, text = (value, "v") if field == "param key" else ("k", value)
        store.set_string_param(key, text)
    elif op == "finding":
        args: dict[str, Any] = {
            "kind": "k",
            "severity": "anomaly",
            "resource_id": None,
            "detail": {},
        }
        args[field] = value
        store.record_finding(args["kind"], args["severity"], args["resource_id"], args["detail"])
    else:
        total, kind = (value, ProgressKind.count) if field == "total" else (5, value)
        store.seed_progress_params(total, kind)
