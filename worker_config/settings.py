"""Settings from the environment (PLANQ_*), validated once at start-up."""

from __future__ import annotations

from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from domain import config
from domain.config import AsyncWorkerConfig
from domain.errors import ConfigurationError
from domain.redaction import Redactor


class PlanqSettings(BaseSettings):
    """Every knob planq reads; credentials come only from the environment."""

    model_config = SettingsConfigDict(env_prefix="PLANQ_", extra="ignore")

    broker_url: str = "redis://127.0.0.1:6379/0"
    database_url: str = "sqlite:///planq.db"
    job_timeout: float = Field(config.DEFAULT_JOB_TIMEOUT, gt=0)
    job_ttl: float = Field(config.DEFAULT_JOB_TTL, gt=0)
    #: Unset: derived from job_timeout (`domain.config.derive_heartbeat_interval`).
    heartbeat_interval: float | None = Field(None, gt=0)
    max_workers: int = Field(config.DEFAULT_MAX_WORKERS, ge=1)
    poll_interval: float = Field(config.DEFAULT_POLL_INTERVAL, gt=0)
    max_attempts: int = Field(config.DEFAULT_MAX_ATTEMPTS, ge=1)
    dispatch_grace: float = Field(config.DEFAULT_DISPATCH_GRACE, gt=0)
    max_dispatches: int = Field(config.DEFAULT_MAX_DISPATCHES, ge=1)
    visibility_timeout: float = Field(12 * 3600.0, gt=0)
    stuck_check_interval: float = Field(30.0, gt=0)
    cleanup_interval: float = Field(3600.0, gt=0)
    relay_interval: float = Field(30.0, gt=0)
    redaction_patterns: list[str] = Field(default_factory=list)
    executors: dict[str, str] = Field(default_factory=dict)
    default_executor: str = "walk_steps"
    metrics_port: int = Field(0, ge=0, le=65535)
    #: Producers send Celery's task-sent event (Flower then lists jobs from their enqueue,
    #: not their delivery), at the cost of a second broker publish per delay().
    task_sent_events: bool = False
    #: Boot sweep: another node's active run silent this long is presumed dead (>= 2 checkpoints).
    run_stale_after: float = Field(300.0, ge=60)
    #: Beat interval of the ledger_consistency scan; 0 = no beat entry (trigger it by hand).
    ledger_consistency_interval: float = Field(0.0, ge=0)
    #: `planq api`: bearer token for the admin API; unset = no auth, bound to loopback only.
    api_token: SecretStr | None = None
    #: `planq api`: let reads through without the token (writes always need it).
    api_open_reads: bool = False
    #: `planq api`: where operators reach Flower; the dashboard links to it when set.
    flower_url: str = ""

    @model_validator(mode="after")
    def _coherent(self) -> PlanqSettings:
        if self.visibility_timeout <= self.job_timeout:
            raise ValueError(
                "visibility_timeout must be above job_timeout, or long jobs are delivered twice"
            )
        if self.heartbeat_interval is not None and self.heartbeat_interval >= self.job_timeout:
            raise ValueError("heartbeat_interval must be below job_timeout")
        Redactor.from_patterns(self.redaction_patterns)
        return self

    def worker_config(self) -> AsyncWorkerConfig:
        """The engine's view of these settings."""
        return AsyncWorkerConfig(
            max_workers=self.max_workers,
            poll_interval=self.poll_interval,
            job_timeout=self.job_timeout,
            job_ttl=self.job_ttl,
            heartbeat_interval=self.heartbeat_interval,
            max_attempts=self.max_attempts,
            dispatch_grace=self.dispatch_grace,
            max_dispatches=self.max_dispatches,
        )


def load_settings(**overrides: object) -> PlanqSettings:
    """Read the environment; an invalid value is one clear line naming the variable."""
    try:
        return PlanqSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "settings"
        name = f"PLANQ_{field.upper()}" if first["loc"] else "PLANQ settings"
        raise ConfigurationError(f"{name}: {first['msg']}") from None
