"""The ledger's tables; invariants live in the schema too (CHECKs, partial unique index)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from planq.domain.clock import as_utc
from planq.domain.jobs import AsyncJobStatus
from planq.domain.pipeline import EventKind
from planq.domain.plans import PipelineState, Plan, PlanPhase, PlanStatus

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def _in(column: str, values: list[str]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


JOB_STATUSES = [s.value for s in AsyncJobStatus]
TERMINAL = ["succeeded", "failed", "cancelled"]
LIVE = ["queued", "running"]
FAILURES = ["failed", "cancelled"]
RETRIES = "retry_of IS NOT NULL"
LISTING_KEY = ["status", "created_at", "job_id"]
#: Room left on each page of the hot tables so an update's new row version fits beside
#: the old one (a HOT update); PostgreSQL only.
FILLFACTOR = 85
PHASES = [p.value for p in PlanPhase]
PLAN_STATUSES = [s.value for s in PlanStatus]
EVENT_KINDS = [k.value for k in EventKind]
#: The plans the expiry sweep and the gate gauges read (migration 0010).
WAITING_AT_GATE = f"pipeline_state = '{PipelineState.awaiting_approval.value}'"


def _partial(name: str, columns: list[str], where: str, unique: bool = False) -> Index:
    """An index over the rows where holds only (PostgreSQL and SQLite alike)."""
    clause = text(where)
    return Index(name, *columns, unique=unique, postgresql_where=clause, sqlite_where=clause)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC in and out, on SQLite (which keeps no zone) as on PostgreSQL."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = as_utc(value)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        return None if value is None else as_utc(value)


class Base(DeclarativeBase):
    """Declarative base with a naming convention, so migrations name constraints stably."""

    metadata = MetaData(naming_convention=NAMING)


class AsyncJobModel(Base):
    """One job: a phase of a plan, and everything the workers record about it."""

    __tablename__ = "async_jobs"

    job_id: Mapped[str] = mapped_column(String(26), primary_key=True)
    plan_id: Mapped[str] = mapped_column(String(26))
    phase: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    schema_version: Mapped[int] = mapped_column(Integer, default=1)
    payload_json: Mapped[str] = mapped_column(Text)
    worker_id: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_heartbeat: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error_message: Mapped[str | None] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    retry_of: Mapped[str | None] = mapped_column(String(26))
    dispatched_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    dispatch_count: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    progress: Mapped[float | None] = mapped_column(Float)
    checkpoint_json: Mapped[str | None] = mapped_column(Text)
    #: a failed job's traceback, redacted and bounded (last: migration 0006 added it)
    error_traceback: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint(_in("status", JOB_STATUSES), name="status"),
        CheckConstraint(_in("phase", PHASES), name="phase"),
        CheckConstraint("schema_version >= 1", name="schema_version"),
        CheckConstraint("attempt >= 1", name="attempt"),
        CheckConstraint("dispatch_count >= 0", name="dispatch_count"),
        CheckConstraint(
            f"NOT ({_in('status', TERMINAL)}) OR finished_at IS NOT NULL", name="terminal_finished"
        ),
        CheckConstraint("status <> 'running' OR worker_id IS NOT NULL", name="running_worker"),
        # No index names a column that heartbeats, stamps, cancel requests or progress
        # write, so those updates can be HOT (docs/benchmarks.md, "Ledger at scale").
        # One retry per job: a unique index on SQLite; on PostgreSQL a unique index of a
        # partitioned table must hold the partition key, so the retry's insert checks it
        # under a lock instead (store/sql_jobs.py `_add`) and the index only finds them.
        _partial("uq_async_jobs_retry_of", ["retry_of"], RETRIES, unique=True).ddl_if(
            dialect="sqlite"
        ),
        _partial("ix_async_jobs_retry_of", ["retry_of"], RETRIES).ddl_if(dialect="postgresql"),
        _partial("ix_async_jobs_live", LISTING_KEY, _in("status", LIVE)),  # sweeps, relay
        _partial("ix_async_jobs_failures", LISTING_KEY, _in("status", FAILURES)),
        _partial("ix_async_jobs_finished_terminal", ["finished_at"], _in("status", TERMINAL)),
        Index(None, "created_at", "job_id"),  # every listing, newest first, keyset-paged
        Index(None, "plan_id", "created_at"),  # a plan's jobs (a handful: ties sort cheaply)
        # PostgreSQL: one partition per day of job ids (ULIDs sort by creation time), each
        # WITH the FILLFACTOR (a partitioned table takes none): store/partitions.py.
        {"postgresql_partition_by": "RANGE (job_id)"},
    )


class PlanModel(Base):
    """A plan: its current phase and status, its step spec, and an optimistic version."""

    __tablename__ = "plans"

    plan_id: Mapped[str] = mapped_column(String(26), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    phase: Mapped[str | None] = mapped_column(String(16))
    status: Mapped[str | None] = mapped_column(String(16))
    spec_json: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    version: Mapped[int] = mapped_column(Integer, default=0)
    #: The pipeline (migration 0008): NULL on a plan whose phases are queued one at a time.
    pipeline_through: Mapped[str | None] = mapped_column(String(16))
    pipeline_gate: Mapped[str | None] = mapped_column(String(16))
    pipeline_state: Mapped[str | None] = mapped_column(String(24))
    pipeline_approval_timeout: Mapped[float | None] = mapped_column(Float)
    #: Four-eyes (migration 0013): who ran it, approvers needed, approvers so far (JSON).
    pipeline_started_by: Mapped[str | None] = mapped_column(String(200))
    pipeline_approvals: Mapped[int | None] = mapped_column(Integer)
    pipeline_approved_by: Mapped[str | None] = mapped_column(Text)
    #: The pipeline's own webhook receivers, a JSON list (migration 0014).
    pipeline_notify: Mapped[str | None] = mapped_column(Text)
    #: When it reached its approval gate; NULL unless waiting there (migration 0012). The
    #: store's own column, written only with the plan: the gate index keys on it, not on
    #: updated_at, which every plan move writes (an update that changes a column any index
    #: names is never HOT).
    gated_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        CheckConstraint(f"phase IS NULL OR {_in('phase', PHASES)}", name="phase"),
        CheckConstraint(f"status IS NULL OR {_in('status', PLAN_STATUSES)}", name="status"),
        CheckConstraint("(phase IS NULL) = (status IS NULL)", name="phase_status_together"),
        CheckConstraint("version >= 0", name="version"),
        Index(None, "created_at", "plan_id"),  # the listing, newest first
        _partial("ix_plans_gated_at", ["gated_at", "plan_id"], WAITING_AT_GATE),
        {"postgresql_with": {"fillfactor": FILLFACTOR}},
    )


#: A plan's columns that the domain's Plan has (gated_at is the store's own): what a read
#: returns and a write derives from the plan.
PLAN_FIELDS = [c.key for c in PlanModel.__table__.columns if c.key in Plan.model_fields]


class PlanEventModel(Base):
    """One line of a plan's audit trail (append-only; migration 0008)."""

    __tablename__ = "plan_events"

    event_id: Mapped[str] = mapped_column(String(26), primary_key=True)
    plan_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("plans.plan_id", ondelete="CASCADE")
    )
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    kind: Mapped[str] = mapped_column(String(24))
    phase: Mapped[str | None] = mapped_column(String(16))
    job_id: Mapped[str | None] = mapped_column(String(26))
    actor: Mapped[str | None] = mapped_column(String(200))
    note: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint(_in("kind", EVENT_KINDS), name="kind"),
        CheckConstraint(f"phase IS NULL OR {_in('phase', PHASES)}", name="phase"),
        Index(None, "plan_id", "at"),  # a plan's timeline, in order
        Index(None, "at"),  # the TTL cleanup, oldest first
        # PostgreSQL: one partition per day of event ids, as async_jobs (migration 0011).
        {"postgresql_partition_by": "RANGE (event_id)"},
    )


# -- recoverable runs ------------------------------------------------------------------------
# Appended as its own section (imports included) so the ledger classes above stay untouched.

from sqlalchemy import BigInteger, LargeBinary  # noqa: E402

from planq.domain.runs.findings import Severity  # noqa: E402
from planq.domain.runs.progress import ProgressKind  # noqa: E402
from planq.domain.runs.status import NON_TERMINAL_RUN_STATUSES, TERMINAL_RUN_STATUSES, RunStatus  # noqa: E402

RUN_STATUSES = [s.value for s in RunStatus]
RUN_NON_TERMINAL = [s.value for s in RunStatus if s in NON_TERMINAL_RUN_STATUSES]
RUN_TERMINAL = [s.value for s in RunStatus if s in TERMINAL_RUN_STATUSES]
SEVERITIES = [s.value for s in Severity]
PROGRESS_KINDS = [k.value for k in ProgressKind]
ONE_NON_TERMINAL_RUN = _in("status", RUN_NON_TERMINAL)


class RecoverableRunModel(Base):
    """One run of a long scan: its status, owner, cursor, counters and per-run params."""

    __tablename__ = "recoverable_runs"

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    job_name: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16))
    owner: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_progress_at: Mapped[datetime] = mapped_column(UTCDateTime())
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    cursor: Mapped[bytes | None] = mapped_column(LargeBinary)
    scanned_count: Mapped[int] = mapped_column(BigInteger, default=0)
    finding_count: Mapped[int] = mapped_column(BigInteger, default=0)
    #: Findings per severity, kept by the statement that records each finding (migration
    #: 0009): the counts are one primary-key read, never a GROUP BY over run_findings.
    data_loss_findings: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    inconsistent_findings: Mapped[int] = mapped_column(
        BigInteger, default=0, server_default=text("0")
    )
    anomaly_findings: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    params_json: Mapped[str] = mapped_column(Text, default="{}")
    progress_total: Mapped[int | None] = mapped_column(BigInteger)
    progress_kind: Mapped[str | None] = mapped_column(String(16))
    error_message: Mapped[str | None] = mapped_column(Text)
    #: The lease: bumped at every open/resume and by a sweep; every write of the run's
    #: store carries it in its WHERE, so a process that lost the run writes nothing.
    lease_epoch: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    #: The owner process's own liveness (batched heartbeat), independent of checkpoints.
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        CheckConstraint(_in("status", RUN_STATUSES), name="status"),
        CheckConstraint(
            f"progress_kind IS NULL OR {_in('progress_kind', PROGRESS_KINDS)}",
            name="progress_kind",
        ),
        CheckConstraint("scanned_count >= 0", name="scanned_count"),
        CheckConstraint("finding_count >= 0", name="finding_count"),
        CheckConstraint(
            f"NOT ({_in('status', RUN_TERMINAL)}) OR completed_at IS NOT NULL",
            name="terminal_completed",
        ),
        # At most one non-terminal run per job name; the losing concurrent insert reads the winner.
        Index(
            "uq_recoverable_runs_job_name_non_terminal",
            "job_name",
            unique=True,
            postgresql_where=text(ONE_NON_TERMINAL_RUN),
            sqlite_where=text(ONE_NON_TERMINAL_RUN),
        ),
        Index(None, "job_name", "started_at"),  # list_runs of one name
        Index(None, "started_at", "id"),  # list_runs of every name, newest first
        Index(None, "status", "last_progress_at"),  # boot recovery sweep
        Index(None, "status", "completed_at"),  # purge
    )


class RunFindingModel(Base):
    """One finding of one run; deleted with its run."""

    __tablename__ = "run_findings"

    id: Mapped[str] = mapped_column(String(26), primary_key=True)
    run_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("recoverable_runs.id", ondelete="CASCADE")
    )
    kind: Mapped[str] = mapped_column(String(100))
    severity: Mapped[str] = mapped_column(String(16))
    resource_id: Mapped[str | None] = mapped_column(String(500))
    detail_json: Mapped[str] = mapped_column(Text, default="{}")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())

    __table_args__ = (
        CheckConstraint(_in("severity", SEVERITIES), name="severity"),
        Index(None, "run_id", "severity"),  # severity counts per run (index only)
        Index(None, "run_id", "created_at", "id"),  # a run's findings page, in order
    )


# -- ledger availability (fair lease expiry) --------------------------------------------------


class LedgerAvailabilityModel(Base):
    """One row per sweep kind: when a sweep last reached the ledger, and since when it is up.

    Updated by each sweep in one transaction under a row lock (domain/availability.py).
    """

    __tablename__ = "ledger_availability"

    sweep: Mapped[str] = mapped_column(String(16), primary_key=True)
    last_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    available_since: Mapped[datetime | None] = mapped_column(UTCDateTime())


# -- principals (the admin API's named tokens) ------------------------------------------------


class PrincipalModel(Base):
    """A named API principal: its roles and its token's SHA-256 (never the token; 0013)."""

    __tablename__ = "api_principals"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    roles: Mapped[str] = mapped_column(String(64))  #: space-separated, sorted
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class WebhookDeliveryModel(Base):
    """The webhook outbox (migration 0014): one row per notification and receiver.

    Written in the event's transaction; a delivered row is deleted, so the table holds the
    live set only (due, leased, or given up until the TTL cleanup takes it).
    """

    __tablename__ = "webhook_deliveries"

    delivery_id: Mapped[str] = mapped_column(String(26), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(26))
    plan_id: Mapped[str] = mapped_column(
        String(26), ForeignKey("plans.plan_id", ondelete="CASCADE")
    )
    url: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    #: When it is due (a claim leases it by moving this on); NULL: given up.
    next_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint("attempts >= 0", name="attempts"),
        _partial("ix_webhook_deliveries_due", ["next_at"], "next_at IS NOT NULL"),
        _partial("ix_webhook_deliveries_given_up", ["created_at"], "next_at IS NULL"),
        Index(None, "plan_id"),  # a plan's purge cascades here
    )
