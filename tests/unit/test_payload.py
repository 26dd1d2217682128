"""The versioned job payload: exact round trips and clear refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planq.domain.ids import new_id
from planq.domain.jobs import PAYLOAD_KEYS, deserialize_job_payload, serialize_job_payload


def test_round_trip_without_extra() -> None:
    plan_id = new_id()
    text = serialize_job_payload(plan_id, "execute")
    assert deserialize_job_payload(text) == {
        "schema_version": 1,
        "plan_id": plan_id,
        "phase": "execute",
    }


def test_round_trip_with_nested_extra() -> None:
    plan_id = new_id()
    extra: dict[str, Any] = {
        "dry_run": True,
        "limit": 250,
        "ratio": 0.25,
        "note": None,
        "tags": ["a", "b", "ü"],
        "nested": {"cursor": {"table": "users", "after": 41}, "empty": {}, "list": [[1], []]},
    }
    text = serialize_job_payload(plan_id, "apply", schema_version=2, extra=extra)
    data = deserialize_job_payload(text)
    assert data == {**extra, "schema_version": 2, "plan_id": plan_id, "phase": "apply"}
    assert data["nested"]["cursor"]["after"] == 41


def test_serialisation_is_deterministic_and_compact() -> None:
    plan_id = new_id()
    first = serialize_job_payload(plan_id, "execute", extra={"b": 1, "a": 2})
    second = serialize_job_payload(plan_id, "execute", extra={"a": 2, "b": 1})
    assert first == second
    assert " " not in first
    assert list(json.loads(first)) == sorted(json.loads(first))


def test_extra_is_not_modified() -> None:
    extra = {"k": [1, 2]}
    serialize_job_payload(new_id(), "execute", extra=extra)
    assert extra == {"k": [1, 2]}


def test_reserved_keys_in_extra_cannot_override_the_real_values() -> None:
    plan_id = new_id()
    text = serialize_job_payload(
        plan_id,
        "execute",
        3,
        extra={"plan_id": "forged", "phase": "apply", "schema_version": 99, "x": 1},
    )
    assert deserialize_job_payload(text) == {
        "plan_id": plan_id,
        "phase": "execute",
        "schema_version": 3,
        "x": 1,
    }


@pytest.mark.parametrize("plan_id", ["", "   ", None, 5])
def test_serialize_refuses_an_empty_plan_id(plan_id: object) -> None:
    with pytest.raises(ValueError, match="plan_id"):
        serialize_job_payload(plan_id, "execute")  # type: ignore[arg-type]


@pytest.mark.parametrize("phase", ["", "  ", None])
def test_serialize_refuses_an_empty_phase(phase: object) -> None:
    with pytest.raises(ValueError, match="phase"):
        serialize_job_payload(new_id(), phase)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [0, -1])
def test_serialize_refuses_schema_version_below_one(version: int) -> None:
    with pytest.raises(ValueError, match="schema_version"):
        serialize_job_payload(new_id(), "execute", schema_version=version)


@pytest.mark.parametrize("version", [True, 1.0, "1", None])
def test_serialize_refuses_a_non_integer_schema_version(version: object) -> None:
    with pytest.raises(ValueError, match="schema_version"):
        serialize_job_payload(new_id(), "execute", schema_version=version)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["", "   \n", None])
def test_deserialize_refuses_empty_text(text: object) -> None:
    with pytest.raises(ValueError, match="JSON object"):
        deserialize_job_payload(text)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["{", "{'a': 1}", "not json", '{"a": }'])
def test_deserialize_refuses_invalid_json(text: str) -> None:
    with pytest.raises(ValueError, match="JSON object") as info:
        deserialize_job_payload(text)
    assert "not valid JSON" in str(info.value)


@pytest.mark.parametrize(
    ("text", "type_name"),
    [("[1, 2]", "list"), ("[]", "list"), ('"s"', "str"), ("3", "int"), ("null", "NoneType")],
)
def test_deserialize_refuses_json_that_is_not_an_object(text: str, type_name: str) -> None:
    with pytest.raises(ValueError, match="JSON object") as info:
        deserialize_job_payload(text)
    assert type_name in str(info.value)


# -- property: any JSON-able extra survives the round trip ---------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)
extra_keys = st.text(max_size=12).filter(lambda key: key not in PAYLOAD_KEYS)


@settings(database=None, max_examples=150, deadline=None)
@given(
    extra=st.dictionaries(extra_keys, json_values, max_size=8),
    phase=st.sampled_from(["strategize", "execute", "apply"]),
    version=st.integers(min_value=1, max_value=10_000),
)
def test_round_trip_property(extra: dict[str, Any], phase: str, version: int) -> None:
    plan_id = new_id()
    text = serialize_job_payload(plan_id, phase, schema_version=version, extra=extra)
    data = deserialize_job_payload(text)
    assert data == {**extra, "schema_version": version, "plan_id": plan_id, "phase": phase}
    # a second trip through the codec changes nothing
    again = serialize_job_payload(plan_id, phase, schema_version=version, extra=data)
    assert again == text
