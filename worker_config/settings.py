"""Settings from the environment (PLANQ_*), read where they are first needed.

An invalid value is ONE line naming the variable and the rule, for example
`PLANQ_HEARTBEAT_INTERVAL=400: must be below PLANQ_JOB_TIMEOUT (300), …`. Every number
is bounded (durations finite and at most ten years, counts capped), so no value starts
fine and then fails in every sweep; the ledger URL must name SQLite or PostgreSQL.
Secrets are never echoed: URLs are shown with their passwords redacted. A PLANQ_* name
that is no setting but close to one (PLANQ_JOB_TIMOUT) is warned about, once, with the
setting it likely meant.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Mapping
from typing import Annotated, Any

from annotated_types import Ge, Gt, Le
from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from planq.domain import config, webhooks
from planq.domain.config import AsyncWorkerConfig, plain, shown
from planq.domain.errors import ConfigurationError
from planq.domain.redaction import Redactor, redact_secrets
from planq.domain.spelling import closest

logger = logging.getLogger("planq.settings")

DEFAULT_DATABASE_URL = "sqlite:///planq.db"
#: The databases the ledger runs on (SQLAlchemy backend names).
LEDGER_BACKENDS = ("sqlite", "postgresql")
#: Other names for them: `postgres://` is what many hosts and tools hand out (libpq reads
#: it; SQLAlchemy does not), so it is read as `postgresql://`.
BACKEND_ALIASES = {"postgres": "postgresql"}
_URL = re.compile(r"(?P<backend>[A-Za-z][\w.-]*?)(?:\+[\w.-]+)?://")
_EXECUTOR_REF = re.compile(r"[A-Za-z_][\w.]*(?::[A-Za-z_][\w.]*)?")
_PHASES = ("strategize", "execute", "apply")
_NEVER_SHOWN = {"api_token", "webhook_secret"}
_SHOWN_REDACTED = {"broker_url", "database_url", "webhook_urls"}
_MAX_SHOWN = 80

_warned_lock = threading.Lock()
_warned_default_ledger = False
_warned_unknown: set[str] = set()


def _seconds(default: float | None, *, ge: float | None = None) -> Any:
    """A duration: a finite number of seconds above 0 (or at least ge), at most ten years."""
    if ge is not None:
        return Field(default, ge=ge, le=config.MAX_DURATION, allow_inf_nan=False)
    return Field(default, gt=0, le=config.MAX_DURATION, allow_inf_nan=False)


class PlanqSettings(BaseSettings):
    """Every knob planq reads; credentials come only from the environment."""

    model_config = SettingsConfigDict(env_prefix="PLANQ_", extra="ignore")

    broker_url: str = "redis://127.0.0.1:6379/0"
    #: Unset: ./planq.db, with a warning naming the file (`load_settings`).
    database_url: str = DEFAULT_DATABASE_URL
    job_timeout: float = _seconds(config.DEFAULT_JOB_TIMEOUT)
    job_ttl: float = _seconds(config.DEFAULT_JOB_TTL)
    #: Unset: derived from job_timeout (`domain.config.derive_heartbeat_interval`).
    heartbeat_interval: float | None = _seconds(None)
    max_workers: int = Field(config.DEFAULT_MAX_WORKERS, ge=1, le=config.MAX_WORKERS)
    poll_interval: float = _seconds(config.DEFAULT_POLL_INTERVAL)
    max_attempts: int = Field(config.DEFAULT_MAX_ATTEMPTS, ge=1, le=config.MAX_ATTEMPTS)
    dispatch_grace: float = _seconds(config.DEFAULT_DISPATCH_GRACE)
    max_dispatches: int = Field(config.DEFAULT_MAX_DISPATCHES, ge=1, le=config.MAX_DISPATCHES)
    #: Group commit, in milliseconds: in a process that holds many jobs at once (threads or
    #: gevent pool), claims and finishes arriving within this window go to the ledger in one
    #: statement per kind (docs/group_commit.md); 0 = off (one statement per job, as prefork).
    group_commit_ms: float = Field(
        config.DEFAULT_GROUP_COMMIT_MS, ge=0, le=config.MAX_GROUP_COMMIT_MS, allow_inf_nan=False
    )
    visibility_timeout: float = _seconds(12 * 3600.0)
    stuck_check_interval: float = _seconds(config.DEFAULT_STUCK_CHECK_INTERVAL)
    cleanup_interval: float = _seconds(3600.0)
    relay_interval: float = _seconds(30.0)
    #: JSON list of regular expressions (decoded here, so a bad value names the rule).
    redaction_patterns: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: JSON object: phase -> "module:function" or a builtin executor name.
    executors: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    default_executor: str = "walk_steps"
    metrics_port: int = Field(0, ge=0, le=65535)
    #: Producers send Celery's task-sent event (Flower then lists jobs from their enqueue,
    #: not their delivery), at the cost of a second broker publish per delay().
    task_sent_events: bool = False
    #: Boot sweep: another node's active run silent this long is presumed dead (>= 2 checkpoints).
    #: Default 300 s; floor 5 s (tests lower it). At the floor every interval derived from it
    #: still holds: the run heartbeat every stale_after / 6 (0.83 s), the stale sweep's beat
    #: entry every stale_after / 2 (2.5 s), its allowed gap 0.75 x stale_after (3.75 s), and
    #: gap + heartbeat < stale_after (domain/availability.py); below 4 s the gap's 1 s
    #: lateness floor takes over, and at 3 s gap + heartbeat reach stale_after. Heartbeats
    #: carry the worker's clock: across hosts keep this far above their clock skew.
    run_stale_after: float = _seconds(300.0, ge=5)
    #: Beat interval of the ledger_consistency scan; 0 = no beat entry (trigger it by hand).
    ledger_consistency_interval: float = _seconds(0.0, ge=0)
    #: `planq api`: bearer token for the admin API; unset = no auth, bound to loopback only.
    api_token: SecretStr | None = None
    #: `planq api`: let reads through without the token (writes always need it).
    api_open_reads: bool = False
    #: `planq api`: every request needs a principal's token (`planq tokens create`) even
    #: with PLANQ_API_TOKEN unset; then it may listen beyond loopback, as with the token.
    api_require_token: bool = False
    #: A whole-plan cancel that asks a running phase to stop waits this long for its end, so
    #: its answer says cancelled or too late (CLI and API); 0: answer at once.
    cancel_wait: float = _seconds(5.0, ge=0)
    #: Four-eyes: false (the default) refuses the principal that ran a pipeline the
    #: approval of its gate; true lets it approve (one person alone, a demo).
    approval_self: bool = False
    #: `planq api`: where operators reach Flower; the dashboard links to it when set.
    flower_url: str = ""
    #: Webhook receivers of every pipeline's gate, failures and end: a JSON list of URLs
    #: or URLs separated by commas (domain/webhooks.py); each needs the secret below.
    webhook_urls: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: Signs each delivery (`X-Planq-Signature: sha256=HMAC(secret, body)`); unset: none is
    #: sent, and `plans run --notify` is refused.
    webhook_secret: SecretStr | None = None
    #: Beat's delivery sweep: how often the outbox is read for due notifications.
    webhook_interval: float = _seconds(5.0)
    #: One POST's limit, connect to answer.
    webhook_timeout: float = _seconds(webhooks.DEFAULT_TIMEOUT)
    #: Tries of one delivery before it is given up (kept in the outbox, logged, counted).
    webhook_max_attempts: int = Field(webhooks.DEFAULT_MAX_ATTEMPTS, ge=1, le=100)
    #: The longest wait between two tries (they back off 1, 2, 4 … seconds up to it).
    webhook_backoff_max: float = _seconds(webhooks.DEFAULT_BACKOFF_MAX)
    #: Hosts `plans run --notify` may name, a JSON list or names separated by commas (`*`:
    #: any); unset: the hosts of PLANQ_WEBHOOK_URLS.
    webhook_notify_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)

    @field_validator("database_url")
    @classmethod
    def _ledger_url(cls, url: str) -> str:
        return check_database_url(url)

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, url: str) -> str:
        if _URL.match(url) is None:
            raise ConfigurationError(
                f"PLANQ_BROKER_URL={_show('broker_url', url)}: must be a broker URL such as "
                "redis://127.0.0.1:6379/0 or amqp://user@host:5672//"
            )
        return url

    @field_validator("executors", mode="before")
    @classmethod
    def _executors(cls, value: object) -> object:
        parsed = _json(value)
        if not (
            isinstance(parsed, dict)
            and all(
                key in _PHASES and isinstance(ref, str) and _EXECUTOR_REF.fullmatch(ref)
                for key, ref in parsed.items()
            )
        ):
            raise ConfigurationError(
                f'PLANQ_EXECUTORS: must be a JSON object of phase → "module:function" '
                f"(phases: {', '.join(_PHASES)}), got {_clip(value)!r}"
            )
        return parsed

    @field_validator("redaction_patterns", mode="before")
    @classmethod
    def _patterns(cls, value: object) -> object:
        parsed = _json(value)
        if not (isinstance(parsed, list) and all(isinstance(p, str) for p in parsed)):
            raise ConfigurationError(
                "PLANQ_REDACTION_PATTERNS: must be a JSON list of regular expressions, "
                f"got {_clip(value)!r}"
            )
        try:
            Redactor.from_patterns(parsed)
        except ValueError as exc:
            raise ConfigurationError(f"PLANQ_REDACTION_PATTERNS: {exc}") from None
        return parsed

    @field_validator("webhook_urls", "webhook_notify_hosts", mode="before")
    @classmethod
    def _text_list(cls, value: object, info: ValidationInfo) -> object:
        parsed = _json(value)
        if isinstance(parsed, str):  # a, b, c
            parsed = [u.strip() for u in parsed.split(",") if u.strip()]
        if not (isinstance(parsed, list) and all(isinstance(u, str) for u in parsed)):
            raise ConfigurationError(
                f"PLANQ_{str(info.field_name).upper()}: must be a JSON list or values separated "
                f"by commas, got {_clip(redact_secrets(str(value)))!r}"
            )
        return parsed

    @model_validator(mode="after")
    def _coherent(self) -> PlanqSettings:
        if self.visibility_timeout <= self.job_timeout:
            raise ConfigurationError(
                f"PLANQ_VISIBILITY_TIMEOUT={plain(self.visibility_timeout)}: must be above "
                f"PLANQ_JOB_TIMEOUT ({plain(self.job_timeout)}), or a long job is delivered twice"
            )
        if self.heartbeat_interval is not None and self.heartbeat_interval >= self.job_timeout:
            raise ConfigurationError(
                f"PLANQ_HEARTBEAT_INTERVAL={plain(self.heartbeat_interval)}: must be below "
                f"PLANQ_JOB_TIMEOUT ({plain(self.job_timeout)}), or every job looks stuck"
            )
        self.webhooks()  # a bad URL, or URLs without a secret, is one line here
        return self

    def webhooks(self) -> webhooks.WebhookPolicy:
        """Where notifications go, how they are signed and retried."""
        secret = self.webhook_secret.get_secret_value() if self.webhook_secret else None
        return webhooks.WebhookPolicy(
            urls=tuple(self.webhook_urls),
            secret=secret or None,
            timeout=self.webhook_timeout,
            max_attempts=self.webhook_max_attempts,
            backoff_max=self.webhook_backoff_max,
            notify_hosts=tuple(self.webhook_notify_hosts),
        )

    def redactor(self) -> Redactor:
        """THE redactor: built-in patterns plus PLANQ_REDACTION_PATTERNS (checked above).

        Each composition root (worker_config.bootstrap, the CLI/API session) calls this once
        and hands the result to everything that stores or shows text.
        """
        return Redactor.from_patterns(self.redaction_patterns)

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
            group_commit_ms=self.group_commit_ms,
        )


def check_database_url(url: str) -> str:
    """url, if it names a database the ledger runs on; else a one-line ConfigurationError.

    A `postgres://` (or `postgres+driver://`) URL comes back as `postgresql://`, the rest of
    it unchanged. For callers that take a ledger URL of their own too.
    """
    match = _URL.match(url)
    if match is None:
        raise ConfigurationError(
            f"PLANQ_DATABASE_URL={_show('database_url', url)}: must be a database URL, "
            "sqlite:///path/planq.db or postgresql://user@host:5432/planq"
        )
    backend = match["backend"].lower()
    if backend in BACKEND_ALIASES:
        backend = BACKEND_ALIASES[backend]
        url = backend + url[match.end("backend") :]
    if backend not in LEDGER_BACKENDS:
        raise ConfigurationError(
            f"PLANQ_DATABASE_URL={_show('database_url', url)}: the ledger runs on SQLite or "
            f"PostgreSQL (sqlite:///path, or postgresql:// or postgres://user@host/db), "
            f"not {backend!r}"
        )
    return url


def load_settings(**overrides: object) -> PlanqSettings:
    """Read the environment; an invalid value is a ConfigurationError of one line.

    An unset PLANQ_DATABASE_URL with a real broker logs a warning (once per process)
    naming the SQLite file in use: a fleet whose members each use their own ./planq.db
    looks empty from everywhere else. So does a PLANQ_* variable that is no setting but
    looks like one misspelt (`warn_unknown_variables`): it would be ignored silently.
    """
    try:
        settings = PlanqSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigurationError(describe(exc)) from None
    except SettingsError as exc:  # a value pydantic-settings could not decode
        raise ConfigurationError(f"PLANQ settings: {exc}") from None
    _warn_default_ledger(settings)
    warn_unknown_variables(os.environ)
    return settings


def misspelt_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """{unknown PLANQ_* name: the setting it most likely meant}, for names close to one."""
    fields = [name.upper() for name in PlanqSettings.model_fields]
    found: dict[str, str] = {}
    for name in environ:
        upper = name.upper()
        if not upper.startswith("PLANQ_") or upper[6:] in fields:
            continue
        close = closest(upper[6:], fields)  # names compared without `PLANQ_`
        if close:
            found[name] = f"PLANQ_{close}"
    return found


def warn_unknown_variables(environ: Mapping[str, str]) -> None:
    """One warning line per misspelt PLANQ_* name, once per process: it is being ignored."""
    for name, meant in sorted(misspelt_settings(environ).items()):
        with _warned_lock:
            if name in _warned_unknown:
                continue
            _warned_unknown.add(name)
        logger.warning(
            "%s is not a planq setting and is ignored; did you mean %s?", _clip(name), meant
        )


def describe(exc: ValidationError) -> str:
    """The first error as `PLANQ_NAME=value: rule`, and how many more there are."""
    errors = exc.errors()
    more = f" (and {len(errors) - 1} more invalid PLANQ_* settings)" if len(errors) > 1 else ""
    first = errors[0]
    cause = first.get("ctx", {}).get("error")
    if isinstance(cause, ConfigurationError):  # our validators word their own line
        return f"{cause}{more}"
    field = str(first["loc"][0]) if first["loc"] else ""
    if field not in PlanqSettings.model_fields:
        return f"PLANQ settings: {first['msg']}{more}"
    return f"PLANQ_{field.upper()}={_show(field, first['input'])}: {_rule(field, first)}{more}"


def _rule(field: str, error: ErrorDetails) -> str:
    """What a valid value of field looks like, from its type and bounds."""
    info = PlanqSettings.model_fields[field]
    bounds: dict[type, Any] = {type(m): m for m in info.metadata}
    if info.annotation is bool:
        return "must be true or false"
    if info.annotation is int:
        low, high = bounds[Ge].ge, bounds[Le].le
        return f"must be a whole number from {plain(low)} to {plain(high)}"
    if field == "group_commit_ms":
        return f"must be a finite number of milliseconds from 0 (off) to {plain(bounds[Le].le)}"
    if info.annotation in (float, float | None):
        low_text = (
            f"above {plain(bounds[Gt].gt)}" if Gt in bounds else f"at least {plain(bounds[Ge].ge)}"
        )
        high = bounds[Le].le
        years = " (ten years)" if high == config.MAX_DURATION else ""
        return f"must be a finite number of seconds {low_text} and at most {plain(high)}{years}"
    return str(error["msg"])


def _show(field: str, value: object) -> str:
    """The value as given, clipped; secrets never, URLs with passwords redacted."""
    if field in _NEVER_SHOWN:
        return "***"
    text = value if isinstance(value, str) else shown(value)
    if field in _SHOWN_REDACTED:
        text = redact_secrets(text)
    return _clip(text)


def _clip(value: object) -> str:
    text = value if isinstance(value, str) else shown(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 1] + "…"


def _json(value: object) -> object:
    """A JSON text decoded (a value that is not JSON comes back as given, to be refused)."""
    if not isinstance(value, str | bytes):
        return value
    try:
        decoded: object = json.loads(value)
    except ValueError:
        return value
    return decoded


def _warn_default_ledger(settings: PlanqSettings) -> None:
    global _warned_default_ledger
    if "database_url" in settings.model_fields_set or settings.broker_url.startswith("memory:"):
        return
    with _warned_lock:
        if _warned_default_ledger:
            return
        _warned_default_ledger = True
    path = os.path.abspath(settings.database_url.split(":///", 1)[1])
    logger.warning(
        "PLANQ_DATABASE_URL is unset: the ledger is the SQLite file %s; set PLANQ_DATABASE_URL "
        "so every worker, beat and CLI of the fleet share one ledger",
        path,
    )
