"""Recoverable runs' pure parts: statuses, outcomes, progress, findings, checks, reports."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from planq.domain.errors import PlanqError, RunNotActiveError, RunNotFoundError
from planq.domain.redaction import BUILTIN, REDACTED
from planq.domain.runs import (
    ACTIVE_RUN_STATUSES,
    NON_TERMINAL_RUN_STATUSES,
    TERMINAL_RUN_STATUSES,
    Completed,
    Failed,
    Finding,
    JobOutcome,
    Paused,
    ProgressKind,
    RunOutcome,
    RunProgress,
    RunStatus,
    Severity,
    derive_progress,
    describe_exception,
)
from planq.domain.runs.checks import (
    check_delta,
    check_param,
    check_total,
    clean_error,
    params_from_json,
    params_to_json,
    purge_cutoff,
    stale_cutoff,
)
from planq.domain.runs.findings import (
    check_kind,
    check_resource_id,
    check_severity,
    detail_from_json,
    detail_to_json,
    present_severity_counts,
)
from planq.domain.runs.summary import build_summary

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# -- status -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "status", "non_terminal", "active"),
    [
        ("Running", RunStatus.Running, True, True),
        ("Paused", RunStatus.Paused, True, False),
        ("CancelRequested", RunStatus.CancelRequested, True, True),
        ("Completed", RunStatus.Completed, False, False),
        ("Failed", RunStatus.Failed, False, False),
    ],
)
def test_status_round_trip_and_classes(
    text: str, status: RunStatus, non_terminal: bool, active: bool
) -> None:
    assert RunStatus.parse(text) is status
    assert status.as_str() == text
    assert RunStatus.parse(status.as_str()) is status
    assert status.is_non_terminal is non_terminal
    assert status.is_active is active


@pytest.mark.parametrize("text", ["running", "", "Cancelled", "RUNNING", " Paused"])
def test_unknown_status_parses_to_none(text: str) -> None:
    assert RunStatus.parse(text) is None


def test_status_sets_partition_every_status() -> None:
    assert set(RunStatus) == NON_TERMINAL_RUN_STATUSES | TERMINAL_RUN_STATUSES
    assert not NON_TERMINAL_RUN_STATUSES & TERMINAL_RUN_STATUSES
    assert ACTIVE_RUN_STATUSES < NON_TERMINAL_RUN_STATUSES
    assert RunStatus.CancelRequested in NON_TERMINAL_RUN_STATUSES


# -- outcomes ---------------------------------------------------------------------------------


def test_outcomes_are_frozen_values() -> None:
    outcomes: list[RunOutcome] = [Completed(), Paused(b"\x01"), Failed("x")]
    assert outcomes == [Completed(), Paused(b"\x01"), Failed("x")]
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcomes[1].cursor = b"\x02"  # type: ignore[union-attr,misc]


def test_paused_needs_a_bytes_cursor() -> None:
    with pytest.raises(TypeError):
        Paused("row-5")  # type: ignore[arg-type]


# -- progress ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scanned", "total", "kind", "fraction"),
    [
        (5, 10, ProgressKind.count, 0.5),
        (0, 10, ProgressKind.count, 0.0),
        (10, 10, ProgressKind.count, 1.0),
        (15, 10, ProgressKind.approximate, 1.5),
        (15, 10, ProgressKind.count, 1.5),
        (5, None, ProgressKind.count, None),
        (5, 0, ProgressKind.approximate, None),
    ],
)
def test_derive_progress_is_unclamped_and_none_without_a_total(
    scanned: int, total: int | None, kind: ProgressKind, fraction: float | None
) -> None:
    progress = derive_progress(scanned, total, kind)
    if fraction is None:
        assert progress is None
    else:
        assert progress == RunProgress(fraction, kind, scanned, total or 0)


def test_derive_progress_defaults_to_count() -> None:
    progress = derive_progress(1, 4)
    assert progress is not None and progress.kind is ProgressKind.count
    assert progress.as_dict() == {"fraction": 0.25, "kind": "count", "scanned": 1, "total": 4}


def test_derive_progress_with_no_kind_is_count_as_in_the_spec() -> None:
    # Spec: `let kind = kind.unwrap_or(ProgressKind::Count);`
    progress = derive_progress(3, 12, None)
    assert progress == RunProgress(0.25, ProgressKind.count, 3, 12)
    assert derive_progress(3, None, None) is None and derive_progress(3, 0, None) is None


def test_progress_kind_labels_round_trip() -> None:
    assert [k.value for k in ProgressKind] == ["count", "approximate"]
    assert [k.as_str() for k in ProgressKind] == ["count", "approximate"]
    assert all(ProgressKind.parse(k.as_str()) is k for k in ProgressKind)
    assert ProgressKind.parse("Count") is None and ProgressKind.parse("cursor") is None


# -- findings ---------------------------------------------------------------------------------


def test_severity_values_and_check() -> None:
    assert [s.value for s in Severity] == ["data_loss", "inconsistent", "anomaly"]
    assert check_severity("inconsistent") is Severity.inconsistent
    assert check_severity(Severity.anomaly) is Severity.anomaly
    with pytest.raises(ValueError, match="data_loss, inconsistent, anomaly"):
        check_severity("fatal")


@pytest.mark.parametrize("kind", ["", "   ", "x" * 101, 7, None])
def test_bad_finding_kinds(kind: object) -> None:
    with pytest.raises(ValueError):
        check_kind(kind)


def test_detail_json_round_trip_and_refusals() -> None:
    detail = {"b": [1, 2], "a": {"nested": None}}
    assert detail_from_json(detail_to_json(detail, BUILTIN)) == detail
    assert detail_to_json(None, BUILTIN) == "{}"
    with pytest.raises(TypeError):
        detail_to_json(["not", "a", "dict"], BUILTIN)
    with pytest.raises(ValueError):
        detail_to_json({"x": float("nan")}, BUILTIN)
    with pytest.raises(ValueError):
        detail_to_json({"x": object()}, BUILTIN)


def test_finding_as_dict_is_json_ready() -> None:
    finding = Finding("F1", "R1", "orphan", Severity.data_loss, None, {"a": 1}, NOW)
    assert json.loads(json.dumps(finding.as_dict()))["severity"] == "data_loss"


def test_resource_id_is_a_uuid_or_a_string() -> None:
    resource = uuid.UUID("6f1c2b9e-8a4d-4e6f-9b1a-2c3d4e5f6a7b")
    assert check_resource_id(resource) == "6f1c2b9e-8a4d-4e6f-9b1a-2c3d4e5f6a7b"
    assert check_resource_id("01J00000000000000000000000") == "01J00000000000000000000000"
    assert check_resource_id(None) is None
    with pytest.raises(ValueError, match="UUID or a string"):
        check_resource_id(42)
    with pytest.raises(ValueError):
        check_resource_id("x" * 501)


def test_present_severity_counts_drop_zeros_worst_first() -> None:
    assert present_severity_counts({}) == {}
    counts = present_severity_counts({"anomaly": 2, "data_loss": 1, "inconsistent": 0})
    assert counts == {"data_loss": 1, "anomaly": 2}
    assert list(counts) == ["data_loss", "anomaly"]


# -- checks -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("days", "expected"), [(0, 1.0), (-3, 1.0), (0.5, 1.0), (1, 1.0), (30, 30.0)]
)
def test_purge_keeps_at_least_one_day(days: float, expected: float) -> None:
    assert purge_cutoff(NOW, days) == NOW - timedelta(days=expected)


def test_stale_cutoff() -> None:
    assert stale_cutoff(NOW, 90) == NOW - timedelta(seconds=90)
    with pytest.raises(ValueError):
        stale_cutoff(NOW, -1)
    with pytest.raises(TypeError):
        stale_cutoff(NOW, "90")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3"])
def test_bad_counts(bad: object) -> None:
    with pytest.raises(ValueError):
        check_delta(bad)
    with pytest.raises(ValueError):
        check_total(bad)


def test_params_checks_and_json() -> None:
    assert check_param("k", "v") == ("k", "v")
    with pytest.raises(ValueError):
        check_param("", "v")
    with pytest.raises(TypeError):
        check_param("k", 3)
    assert params_from_json(params_to_json({"b": "2", "a": "1"})) == {"a": "1", "b": "2"}
    assert params_from_json(None) == {} and params_from_json("[]") == {}


def test_clean_error_redacts_and_bounds() -> None:
    assert (
        clean_error("login failed: password=hunter2", BUILTIN)
        == f"login failed: password={REDACTED}"
    )
    assert len(clean_error("x" * 10_000, BUILTIN)) == 4000


def test_describe_exception_names_the_type_and_redacts() -> None:
    text = describe_exception(ValueError("token=abc123def rejected"), BUILTIN)
    assert text == f"ValueError: token={REDACTED} rejected"


def test_run_errors_sit_under_the_root() -> None:
    assert issubclass(RunNotFoundError, PlanqError) and issubclass(RunNotFoundError, LookupError)
    err = RunNotActiveError("R1", "Paused")
    assert isinstance(err, PlanqError) and (err.run_id, err.status) == ("R1", "Paused")
    assert "R1" in str(RunNotFoundError("R1"))


# -- summaries and reports --------------------------------------------------------------------


def _summary(**overrides: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "run_id": "R1",
        "job_name": "scan",
        "status": "Paused",
        "owner": "w1",
        "started_at": NOW,
        "last_progress_at": NOW,
        "completed_at": None,
        "cursor": b"\xab\xcd",
        "scanned_count": 30,
        "finding_count": 2,
        "params": {"mode": "deep"},
        "progress_total": 40,
        "progress_kind": "approximate",
        "error_message": None,
    }
    fields.update(overrides)
    return fields


def test_build_summary_derives_progress_and_hex_cursor() -> None:
    summary = build_summary(**_summary())  # type: ignore[arg-type]
    assert summary.status is RunStatus.Paused and summary.cursor_hex == "abcd"
    assert summary.as_dict()["cursor_hex"] == "abcd" and "cursor" not in summary.as_dict()
    assert summary.stats == {"scanned_count": 30, "finding_count": 2, "progress_total": 40}
    assert summary.progress == RunProgress(0.75, ProgressKind.approximate, 30, 40)
    assert json.loads(json.dumps(summary.as_dict()))["progress"]["fraction"] == 0.75


def test_build_summary_without_total_or_cursor() -> None:
    summary = build_summary(**_summary(progress_total=None, progress_kind=None, cursor=None))  # type: ignore[arg-type]
    assert summary.progress is None and summary.cursor_hex is None
    assert "progress_total" not in summary.stats


def test_build_summary_with_a_total_but_no_kind_is_count() -> None:
    summary = build_summary(**_summary(progress_kind=None))  # type: ignore[arg-type]
    assert summary.progress == RunProgress(0.75, ProgressKind.count, 30, 40)


def test_build_summary_refuses_an_unknown_status() -> None:
    with pytest.raises(ValueError, match="unknown status"):
        build_summary(**_summary(status="Exploded"))  # type: ignore[arg-type]


def test_already_running_outcome() -> None:
    outcome = JobOutcome.already_running("R1", RunStatus.CancelRequested)
    assert outcome.ok and outcome.skipped == "already_running"
    assert not outcome.completed and not outcome.paused and outcome.count == 0
    assert outcome.extra == {
        "skipped": "already_running",
        "run_id": "R1",
        "status": "CancelRequested",
    }
    data = json.loads(json.dumps(outcome.as_dict()))
    assert data["status"] == "CancelRequested" and data["run_id"] == "R1"
    assert data["severity_counts"] == {} and data["extra"] == outcome.extra


def test_outcome_extra_is_the_specs_mapping() -> None:
    counts = {"run_id": "R1", "finding_count": 3, "scanned_count": 30}
    severities = {"data_loss": 1, "anomaly": 2}
    completed = JobOutcome(ok=True, completed=True, severity_counts=severities, **counts)  # type: ignore[arg-type]
    assert completed.extra == {"completed": True, **counts, "severity_counts": severities}
    assert completed.count == 3
    paused = JobOutcome(ok=True, paused=True, cursor_hex="abcd", **counts)  # type: ignore[arg-type]
    assert paused.extra == {"paused": True, **counts, "cursor_hex": "abcd", "severity_counts": {}}
    panicked = JobOutcome(ok=False, paused=True, cursor_hex="", error="E: x", **counts)  # type: ignore[arg-type]
    assert panicked.extra["error"] == "E: x" and panicked.extra["cursor_hex"] == ""
    assert panicked.count == 0
    failed = JobOutcome(ok=False, status=RunStatus.Failed, message="boom (run_id=R1)")
    assert failed.extra == {} and failed.count == 0
    assert json.loads(json.dumps(completed.as_dict()))["extra"] == completed.extra
