"""Response and request models: the spec's JSON shapes (RunSummary, Finding, …) and the ledger's.

Built here, from the domain objects, rather than by dumping them: the wire format stays the
spec's (`cursor_hex`, progress {fraction, kind, scanned, total}) while the domain evolves.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planq.cli.views import job_dict
from planq.domain.bounds import describe

Severity = Literal["data_loss", "inconsistent", "anomaly"]
#: Worst first: the pill of a run or job is the colour of its worst severity present.
SEVERITY_ORDER: tuple[Severity, ...] = ("data_loss", "inconsistent", "anomaly")


def severity_counts(counts: dict[str, int]) -> dict[str, int]:
    """Every severity with its count, zeros included, worst first (stores may omit zeros)."""
    return {s: int(counts.get(s, 0)) for s in SEVERITY_ORDER} | {
        k: int(v) for k, v in counts.items() if k not in SEVERITY_ORDER
    }


def _cursor_hex(summary: Any) -> str | None:
    """The run's cursor as hex, whichever name the domain's summary gives it."""
    value = getattr(summary, "cursor_hex", None)
    return value if value is not None else getattr(summary, "cursor", None)


class RunProgressOut(BaseModel):
    """Progress of a run: fraction is NOT clamped (an approximate run may pass 1.0)."""

    fraction: float
    kind: Literal["count", "approximate"]
    scanned: int
    total: int


class RunSummaryOut(BaseModel):
    """The spec's RunSummary (absent optional fields are omitted from the JSON)."""

    id: str
    job_name: str
    status: str
    owner: str | None = None
    started_at: datetime
    last_progress_at: datetime
    completed_at: datetime | None = None
    stats: dict[str, int]
    params: dict[str, str]
    cursor_hex: str | None = None
    error_message: str | None = None
    progress: RunProgressOut | None = None

    @classmethod
    def of(cls, run: Any) -> RunSummaryOut:
        """From a domain RunSummary."""
        progress = run.progress
        return cls(
            id=run.id,
            job_name=run.job_name,
            status=run.status.as_str(),
            owner=run.owner,
            started_at=run.started_at,
            last_progress_at=run.last_progress_at,
            completed_at=run.completed_at,
            stats=dict(run.stats),
            params=dict(run.params),
            cursor_hex=_cursor_hex(run),
            error_message=run.error_message,
            progress=None
            if progress is None
            else RunProgressOut(
                fraction=progress.fraction,
                kind=progress.kind.value,
                scanned=progress.scanned,
                total=progress.total,
            ),
        )


class FindingOut(BaseModel):
    """The spec's Finding; `kind` says the shape of `detail`."""

    id: str
    run_id: str
    kind: str
    severity: Severity
    resource_id: str | None = None
    detail: dict[str, Any]
    created_at: datetime

    @classmethod
    def of(cls, finding: Any) -> FindingOut:
        """From a domain Finding."""
        return cls(
            id=finding.id,
            run_id=finding.run_id,
            kind=finding.kind,
            severity=finding.severity.value,
            resource_id=finding.resource_id,
            detail=dict(finding.detail),
            created_at=finding.created_at,
        )


class FindingsPage(BaseModel):
    """One page of a run's findings, with the per-severity totals."""

    run_id: str
    job_name: str
    severity_counts: dict[str, int]
    total: int
    limit: int
    offset: int
    #: The last finding's id when the page is full: `?after=` it for the next page.
    next_after: str | None = None
    findings: list[FindingOut]


class RunOutcomeOut(BaseModel):
    """A job's last outcome, as the spec's JobOutcome extra (the badge's source)."""

    ok: bool
    completed: bool
    paused: bool
    run_id: str
    status: str
    cursor_hex: str | None = None
    finding_count: int
    scanned_count: int
    severity_counts: dict[str, int]
    error_message: str | None = None
    pill: Literal["data_loss", "inconsistent", "anomaly", "clean", "failed"]

    @classmethod
    def of(cls, run: Any, counts: dict[str, int]) -> RunOutcomeOut:
        """From the run the outcome is about and its finding counts by severity."""
        status = run.status.as_str()
        return cls(
            ok=status in ("Completed", "Paused"),
            completed=status == "Completed",
            paused=status == "Paused",
            run_id=run.id,
            status=status,
            cursor_hex=_cursor_hex(run),
            finding_count=run.finding_count,
            scanned_count=run.scanned_count,
            severity_counts=severity_counts(counts),
            error_message=run.error_message,
            pill=pill_for(counts, failed=status == "Failed"),
        )


def pill_for(counts: dict[str, int], failed: bool = False) -> Any:
    """Red for data_loss, amber for inconsistent, neutral for anomaly-only, else clean/failed."""
    for severity in SEVERITY_ORDER:
        if counts.get(severity, 0) > 0:
            return severity
    return "failed" if failed else "clean"


class RecoverableJobOut(BaseModel):
    """One registered recoverable job: its schedule, active run and last outcome."""

    name: str
    task: str
    interval_seconds: float | None = None
    active_run: RunSummaryOut | None = None
    last_outcome: RunOutcomeOut | None = None


class TriggerIn(BaseModel):
    """Per-dispatch args handed to the handler (string to string, stored on the run)."""

    model_config = ConfigDict(extra="forbid")

    args: dict[str, str] = Field(default_factory=dict, max_length=50)


class TriggerAccepted(BaseModel):
    """202: the run was started or resumed and handed to a worker."""

    job_name: str
    decision: Literal["fresh", "resumed"]
    task_id: str | None = None
    run_id: str | None = None  #: None only if no worker opened the run within the wait
    status: str | None = None
    run: RunSummaryOut | None = None


class TriggerSkipped(BaseModel):
    """409: a run is already active, or a trigger is already queued; nothing was sent."""

    job_name: str
    skipped: Literal["already_running", "already_queued"] = "already_running"
    run_id: str | None = None  #: the active run (already_running)
    status: str | None = None
    task_id: str | None = None  #: the queued trigger (already_queued)
    message: str


class CancelRunOut(BaseModel):
    """200: the Running run was asked to pause at its next batch."""

    job_name: str
    run_id: str
    status: Literal["CancelRequested"] = "CancelRequested"


class PurgeOut(BaseModel):
    """What a purge deleted (active runs are never touched)."""

    purged: int
    retention_days: float


# -- the job ledger -------------------------------------------------------------------------
class JobOut(BaseModel):
    """A phase job's ledger row, with progress, dispatch facts and its checkpoint.

    As listed: a failed job's traceback is only in one job's view (`JobDetail`).
    """

    job_id: str
    plan_id: str
    phase: str
    status: str
    worker_id: str | None = None
    attempt: int
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error_message: str | None = None
    progress: float | None = None
    retry_of: str | None = None
    dispatched: bool
    dispatched_at: datetime | None = None
    dispatch_count: int | None = None
    cancel_requested_at: datetime | None = None
    last_heartbeat: datetime | None = None
    checkpoint: dict[str, Any] | None = None
    #: Why the domain refuses this stored row (a corrupt payload); None for a sound row.
    unreadable: str | None = None

    @classmethod
    def of(cls, job: Any) -> JobOut:
        """From an AsyncJob, through the CLI's own view of it (one source of field names)."""
        return cls.model_validate(job_dict(job, detail=True))


class JobDetail(JobOut):
    """One job's row, with a failed job's traceback (redacted and bounded at the write)."""

    error_traceback: str | None = None

    @classmethod
    def of(cls, job: Any) -> JobDetail:
        """From an AsyncJob, through `planq jobs show --json`'s view of it."""
        return cls.model_validate(job_dict(job, detail=True, traceback=True))


class PlanOut(BaseModel):
    """A plan and where it stands."""

    plan_id: str
    name: str
    phase: str | None = None
    status: str | None = None
    state: str
    steps: int
    created_at: datetime
    updated_at: datetime
    #: The pipeline (state, through, approve_before), None on a plan run phase by phase.
    pipeline: dict[str, str | None] | None = None

    @classmethod
    def of(cls, plan: Any) -> PlanOut:
        """From a Plan, through its CLI view."""
        return cls.model_validate(plan.as_cli_dict())


class PlanDetail(PlanOut):
    """A plan with its step list, every job, and the latest job of each phase."""

    step_list: list[dict[str, Any]]
    jobs: list[JobOut]
    phases: dict[str, JobOut | None]


class PlansPage(BaseModel):
    """Plans, newest first, how many (counted to 10,000 at most) and the next page's cursor."""

    plans: list[PlanOut]
    limit: int
    offset: int
    total: int
    total_is_lower_bound: bool = False
    next_after: str | None = None


class JobsPage(BaseModel):
    """Jobs, newest first, how many match (to 10,000 at most) and the next page's cursor."""

    jobs: list[JobOut]
    limit: int
    offset: int
    status: str | None = None
    plan_id: str | None = None
    total: int
    total_is_lower_bound: bool = False
    next_after: str | None = None


class StepIn(BaseModel):
    """One step of a new plan; seconds sets how long the demo executors take on it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    seconds: float | None = Field(default=None, ge=0, le=86_400)


class PlanIn(BaseModel):
    """A new plan: steps as names or step objects."""

    model_config = ConfigDict(extra="forbid")

    steps: list[StepIn | str] = Field(min_length=1, max_length=1000)
    name: str = Field(default="", max_length=200)

    def step_dicts(self) -> list[dict[str, Any]]:
        """The steps as the lifecycle service takes them; a blank name is refused."""
        out: list[dict[str, Any]] = []
        for step in self.steps:
            if isinstance(step, str):
                if not step.strip() or len(step) > 200:
                    shown = describe(step)  # never the whole of a long name
                    raise ValueError(f"step name: 1-200 non-blank characters, got {shown}")
                out.append({"name": step.strip()})
            else:
                out.append(step.model_dump(exclude_none=True))
        return out


class QueuedOut(BaseModel):
    """A queued phase: the plan as saved and its job row."""

    plan: PlanOut
    job: JobOut | None = None


class CancelJobOut(BaseModel):
    """A cancel: a queued job ends now, a running one is asked to stop."""

    outcome: Literal["cancelled", "cancel requested"]
    job: JobOut


class RetryOut(BaseModel):
    """A retry: the new attempt's row (published, or left to the relay)."""

    job: JobOut
    published: bool


class StuckOut(BaseModel):
    """Stuck detection run now."""

    job_timeout_seconds: float
    expired: list[JobOut]
    retried: dict[str, str]


class CleanupOut(BaseModel):
    """Ended jobs older than the TTL, deleted now."""

    deleted: int
    job_ttl_seconds: float
