"""Recoverable runs on SQL: each operation below is one named, short statement where it can be."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from planq.domain.availability import RUN_SWEEP, stale_sweep_gap
from planq.domain.bounds import INT64_MAX
from planq.domain.clock import utcnow
from planq.domain.errors import (
    ConcurrentUpdateError,
    RunFencedError,
    RunNotActiveError,
    RunNotFoundError,
)
from planq.domain.ids import new_id
from planq.domain.outage import OutageMonitor
from planq.domain.redaction import BUILTIN, Redactor
from planq.domain.runs.checks import (
    SERVER_RESTART_ERROR,
    SWEEP_ERROR,
    check_params_size,
    check_scanned_total,
    params_from_json,
    params_to_json,
)
from planq.domain.runs.findings import Finding, Severity, detail_from_json, present_severity_counts
from planq.domain.runs.ports import AlreadyActive, Fresh, OpenResult, Resumed
from planq.domain.runs.status import (
    ACTIVE_RUN_STATUSES,
    NON_TERMINAL_RUN_STATUSES,
    TERMINAL_RUN_STATUSES,
    RunStatus,
)
from planq.domain.runs.summary import RunSummary, build_summary
from planq.domain.runs.sweep import SweepResult
from planq.store.availability import sight_ledger
from planq.store.database import Database
from planq.store.keyset import past_cursor
from planq.store.models import RecoverableRunModel, RunFindingModel
from planq.store.runs_bound import Clock
from planq.store.runs_checked import CheckedRunStore, CheckedRunStoreProvider

R = RecoverableRunModel
F = RunFindingModel

_ACTIVE = [s.value for s in ACTIVE_RUN_STATUSES]
#: The run row's counter of each severity (worst first, as Severity is ordered).
SEVERITY_COUNTERS = {
    Severity.data_loss: R.data_loss_findings,
    Severity.inconsistent: R.inconsistent_findings,
    Severity.anomaly: R.anomaly_findings,
}
_NON_TERMINAL = [s.value for s in NON_TERMINAL_RUN_STATUSES]
_TERMINAL = [s.value for s in TERMINAL_RUN_STATUSES]
_OPEN_ATTEMPTS = 5
_PURGE_BATCH = 500
_HEARTBEAT_CHUNK = 200  #: leases per heartbeat statement (a process holds a few runs)


def to_summary(row: RecoverableRunModel) -> RunSummary:
    """Convert at the boundary: the domain never sees a row."""
    return build_summary(
        run_id=row.id,
        job_name=row.job_name,
        status=row.status,
        owner=row.owner,
        started_at=row.started_at,
        last_progress_at=row.last_progress_at,
        completed_at=row.completed_at,
        cursor=row.cursor,
        scanned_count=row.scanned_count,
        finding_count=row.finding_count,
        params=params_from_json(row.params_json),
        progress_total=row.progress_total,
        progress_kind=row.progress_kind,
        error_message=row.error_message,
        lease_epoch=row.lease_epoch,
        heartbeat_at=row.heartbeat_at,
    )


def to_finding(row: RunFindingModel) -> Finding:
    """A finding row as the domain's Finding."""
    return Finding(
        id=row.id,
        run_id=row.run_id,
        kind=row.kind,
        severity=Severity(row.severity),
        resource_id=row.resource_id,
        detail=detail_from_json(row.detail_json),
        created_at=row.created_at,
    )


def _rowcount(result: Any) -> int:
    return int(result.rowcount)


class SqlRunStore(CheckedRunStore):
    """One run's store: what its handler (and the engine) may write to that row.

    Every write is fenced: its WHERE carries the run id AND this store's lease epoch (and,
    for all but the purge-safe reads, an active status), so a process that lost the run
    (swept, then resumed by another worker) changes nothing and gets RunFencedError.
    """

    def __init__(
        self,
        database: Database,
        run_id: str,
        started_at: datetime,
        clock: Clock,
        epoch: int,
        redactor: Redactor = BUILTIN,
    ) -> None:
        self.db = database
        super().__init__(run_id, started_at, clock, epoch, redactor)

    def _read_state(self) -> tuple[RunStatus | None, int] | None:
        """(status, lease epoch) of the row, or None when it is gone."""
        with self.db.session() as s:
            row = s.execute(select(R.status, R.lease_epoch).where(R.id == self._run_id)).first()
        return None if row is None else (RunStatus.parse(row.status), int(row.lease_epoch))

    def status(self) -> RunStatus:
        """STATUS: SELECT status, lease_epoch (the handler's cancel poll, and its fence)."""
        self._check_held()
        state = self._read_state()
        if state is None:
            raise RunNotFoundError(self._run_id)
        status, epoch = state
        if epoch != self._epoch:
            raise self._fenced(epoch, status.as_str() if status is not None else None)
        if status is None:
            raise ValueError(f"run {self._run_id} has an unknown status")
        return status

    def _held(self) -> Any:
        """WHERE id AND lease_epoch: this store's lease."""
        return and_(R.id == self._run_id, R.lease_epoch == self._epoch)

    def _update_active(self, **values: Any) -> bool:
        """One UPDATE … WHERE id AND lease_epoch AND status IN (Running, CancelRequested)."""
        self._check_held()
        stmt = update(R).where(self._held(), R.status.in_(_ACTIVE)).values(**values)
        with self.db.session() as s:
            return bool(_rowcount(s.execute(stmt)))

    def _refused(self) -> RunNotActiveError | RunNotFoundError:
        """Why a fenced write changed nothing: gone, lost (another lease), or not active."""
        state = self._read_state()
        if state is None:
            return RunNotFoundError(self._run_id)
        status, epoch = state
        text = status.as_str() if status is not None else None
        if epoch != self._epoch:
            return self._fenced(epoch, text)
        return RunNotActiveError(self._run_id, text)

    def _final(self, **values: Any) -> bool:
        """A final CAS: False when gone or already ended; RunFencedError when lost."""
        if self._update_active(**values):
            return True
        refused = self._refused()
        if isinstance(refused, RunFencedError):
            raise refused
        return False

    def _checkpoint(self, cursor: bytes, delta_count: int) -> None:
        """CHECKPOINT: one fenced UPDATE of cursor, scanned_count and last progress."""
        self._check_held()
        room = and_(R.scanned_count <= INT64_MAX - delta_count)  # the int64 count never wraps
        stmt = (
            update(R)
            .where(self._held(), R.status.in_(_ACTIVE), room)
            .values(
                cursor=cursor,
                scanned_count=R.scanned_count + delta_count,
                last_progress_at=self._clock(),
            )
        )
        with self.db.session() as s:
            if _rowcount(s.execute(stmt)):
                return
            current = s.scalar(select(R.scanned_count).where(self._held(), R.status.in_(_ACTIVE)))
        if current is not None:
            check_scanned_total(int(current), delta_count)
        raise self._refused()

    def _set_string_param(self, key: str, value: str) -> None:
        """PARAM SET: read-modify-write of params_json under a row lock (value redacted)."""
        self._check_held()
        with self.db.session() as s:
            stored = s.scalar(
                select(R.params_json).where(self._held(), R.status.in_(_ACTIVE)).with_for_update()
            )
            if stored is None:
                raise self._refused()
            params = params_from_json(stored)
            if params.get(key) == value:
                return
            params[key] = value
            check_params_size(params_to_json(params))
            s.execute(
                update(R)
                .where(self._held(), R.status.in_(_ACTIVE))
                .values(params_json=params_to_json(params))
            )

    def _get_string_param(self, key: str) -> str | None:
        """PARAM GET: SELECT params_json."""
        with self.db.session() as s:
            stored = s.scalar(select(R.params_json).where(R.id == self._run_id))
        return params_from_json(stored).get(key)

    def _record_finding(self, finding: Finding, detail_json: str) -> None:
        """FINDING: fenced UPDATE of finding_count and the severity's counter, then INSERT.

        The UPDATE locks the run and proves it ours; it keeps the per-severity counts too,
        so reading them is one primary-key lookup (no extra statement per finding).
        """
        self._check_held()
        counter = SEVERITY_COUNTERS[finding.severity]
        with self.db.session() as s:
            bumped = s.execute(
                update(R)
                .where(self._held(), R.status.in_(_ACTIVE))
                .values({R.finding_count: R.finding_count + 1, counter: counter + 1})
            )
            if not _rowcount(bumped):
                raise self._refused()
            s.execute(
                insert(F).values(
                    id=finding.id,
                    run_id=finding.run_id,
                    kind=finding.kind,
                    severity=finding.severity.value,
                    resource_id=finding.resource_id,
                    detail_json=detail_json,
                    created_at=finding.created_at,
                )
            )

    def _seed_progress_params(self, total: int | None, kind: str) -> None:
        """SEED: fenced UPDATE of progress_total and progress_kind."""
        self._check_held()
        with self.db.session() as s:
            seeded = s.execute(
                update(R).where(self._held()).values(progress_total=total, progress_kind=kind)
            )
        if not _rowcount(seeded):
            refused = self._refused()
            if isinstance(refused, RunFencedError):
                raise refused

    def mark_completed(self) -> bool:
        """COMPLETE: CAS active -> Completed."""
        now = self._clock()
        return self._final(status=RunStatus.Completed.value, completed_at=now, last_progress_at=now)

    def _mark_paused(self, cursor: bytes | None, error_message: str | None) -> bool:
        """PAUSE: CAS active -> Paused at cursor (None: the last checkpoint stays)."""
        values: dict[str, Any] = {
            "status": RunStatus.Paused.value,
            "last_progress_at": self._clock(),
        }
        if cursor is not None:
            values["cursor"] = cursor
        if error_message is not None:
            values["error_message"] = error_message
        return self._final(**values)

    def _mark_failed(self, error_message: str) -> bool:
        """FAIL: CAS active -> Failed with a redacted, bounded message."""
        now = self._clock()
        return self._final(
            status=RunStatus.Failed.value,
            completed_at=now,
            last_progress_at=now,
            error_message=error_message,
        )


class SqlRunStoreProvider(CheckedRunStoreProvider):
    """Every run on one Database (SQLite or PostgreSQL); joins the ambient transaction."""

    def __init__(
        self,
        database: Database,
        clock: Clock = utcnow,
        outages: OutageMonitor | None = None,
        redactor: Redactor = BUILTIN,
    ) -> None:
        super().__init__(clock, outages, redactor)
        self.db = database

    def _bind(self, run_id: str, started_at: datetime, epoch: int) -> SqlRunStore:
        return SqlRunStore(self.db, run_id, started_at, self._clock, epoch, self.redactor)

    def _open_or_start(self, job_name: str, owner: str | None) -> OpenResult:
        """OPEN: read the non-terminal run, then resume it, report it, or insert a new one."""
        for _ in range(_OPEN_ATTEMPTS):
            opened = self._try_open(job_name, owner)
            if opened is not None:
                return opened
        raise ConcurrentUpdateError(f"runs of {job_name!r} kept changing while opening one")

    def _try_open(self, job_name: str, owner: str | None) -> OpenResult | None:
        """One attempt; None when a concurrent caller got there first (read again)."""
        now = self._clock()
        with self.db.session() as s:
            current = s.execute(
                select(R.id, R.status, R.cursor, R.started_at, R.lease_epoch)
                .where(R.job_name == job_name, R.status.in_(_NON_TERMINAL))
                .with_for_update()
            ).first()
            if current is None:
                run_id = new_id()
                try:
                    with s.begin_nested():  # the loser of the race keeps its transaction
                        s.execute(insert(R).values(**self._new_row(run_id, job_name, owner, now)))
                except IntegrityError:
                    return None
                return Fresh(self._bind(run_id, now, 1))
            status = RunStatus(current.status)
            if status is not RunStatus.Paused:
                return AlreadyActive(current.id, status)
            epoch = int(current.lease_epoch) + 1  # the new lease fences out the previous one
            resumed = s.execute(
                update(R)
                .where(
                    R.id == current.id,
                    R.status == RunStatus.Paused.value,
                    R.lease_epoch == current.lease_epoch,
                )
                .values(
                    status=RunStatus.Running.value,
                    owner=owner,
                    last_progress_at=now,
                    heartbeat_at=now,
                    error_message=None,
                    lease_epoch=epoch,
                )
            )
            if not _rowcount(resumed):
                return None
            store = self._bind(current.id, current.started_at, epoch)
            return Resumed(store, current.cursor or b"")

    def _new_row(
        self, run_id: str, job_name: str, owner: str | None, now: datetime
    ) -> dict[str, Any]:
        """Column values of a new Running run."""
        return {
            "id": run_id,
            "job_name": job_name,
            "status": RunStatus.Running.value,
            "owner": owner,
            "started_at": now,
            "last_progress_at": now,
            "scanned_count": 0,
            "finding_count": 0,
            "params_json": "{}",
            "lease_epoch": 1,
            "heartbeat_at": now,
        }

    def _boot_recovery_sweep(
        self, owner: str | None, stale_after: float | None, cutoff: datetime | None
    ) -> SweepResult:
        """SWEEP: one UPDATE … RETURNING: every active run, or this owner's and the stale ones.

        Stale = neither progress nor a heartbeat since the cut-off, and the ledger available
        for stale_after (the sweep's sighting, in the same transaction: a holder that could
        not reach the ledger is not swept; domain/availability.py). The lease epoch is
        bumped: whoever held a swept run can no longer write to it.
        """
        with self.db.session() as s:
            if stale_after and not self._available_for(stale_after):
                if owner is None:
                    return SweepResult()
                cutoff = None  # the owner's own runs are still this boot's to pause
            scopes = []
            if owner is not None:
                scopes.append(R.owner == owner)
            if cutoff is not None:
                silent = or_(R.heartbeat_at.is_(None), R.heartbeat_at < cutoff)
                scopes.append(and_(R.last_progress_at < cutoff, silent))
            stmt = update(R).where(R.status.in_(_ACTIVE))
            if scopes:
                stmt = stmt.where(or_(*scopes))
            error = SWEEP_ERROR if scopes else SERVER_RESTART_ERROR
            stmt = stmt.values(
                status=RunStatus.Paused.value, error_message=error, lease_epoch=R.lease_epoch + 1
            ).returning(R.id)
            return SweepResult(s.scalars(stmt))

    def _available_for(self, stale_after: float) -> bool:
        """Record the stale sweep's sighting; whether holders had stale_after to renew."""
        seen = sight_ledger(
            self.db, RUN_SWEEP, stale_sweep_gap(stale_after), self.outages.recovered_ago()
        )
        return seen.available_for(stale_after)

    def _heartbeat_runs(self, leases: dict[str, int]) -> set[str]:
        """HEARTBEAT: one UPDATE … WHERE (id, lease_epoch) pairs AND active … RETURNING id."""
        items = list(leases.items())
        if not items:
            return set()
        now = self._clock()
        held: set[str] = set()
        with self.db.session() as s:
            for start in range(0, len(items), _HEARTBEAT_CHUNK):
                pairs = [
                    and_(R.id == run_id, R.lease_epoch == epoch)
                    for run_id, epoch in items[start : start + _HEARTBEAT_CHUNK]
                ]
                stmt = (
                    update(R)
                    .where(R.status.in_(_ACTIVE), or_(*pairs))
                    .values(heartbeat_at=now)
                    .returning(R.id)
                )
                held.update(s.scalars(stmt))
        return held

    def _list_runs(self, job_name: str | None, limit: int) -> list[RunSummary]:
        """LIST: newest first."""
        stmt = select(R).order_by(R.started_at.desc(), R.id.desc()).limit(limit)
        if job_name is not None:
            stmt = stmt.where(R.job_name == job_name)
        with self.db.session() as s:
            return [to_summary(row) for row in s.scalars(stmt)]

    def _count_runs(self, job_name: str | None) -> int:
        """COUNT: runs (of one job name), with list_runs' filter."""
        stmt = select(func.count()).select_from(R)
        if job_name is not None:
            stmt = stmt.where(R.job_name == job_name)
        with self.db.session() as s:
            return int(s.scalar(stmt) or 0)

    def _get_run_by_id(self, run_id: str) -> RunSummary | None:
        """GET: one run by id."""
        with self.db.session() as s:
            row = s.get(R, run_id)
            return to_summary(row) if row is not None else None

    def _request_cancel(self, job_name: str) -> str | None:
        """CANCEL: CAS Running -> CancelRequested … RETURNING id."""
        stmt = (
            update(R)
            .where(R.job_name == job_name, R.status == RunStatus.Running.value)
            .values(status=RunStatus.CancelRequested.value)
            .returning(R.id)
        )
        with self.db.session() as s:
            return s.scalars(stmt).first()

    def _list_findings(
        self, run_id: str, limit: int, offset: int, after: str | None
    ) -> list[Finding]:
        """FINDINGS: one page, in the order recorded; after a finding id (keyset) if given.

        Ordered by (created_at, id) within the run, the order of the (run_id, created_at, id)
        index: the page is one index range read, never a sort.
        """
        stmt = select(F).where(F.run_id == run_id)
        if after is not None:
            stmt = stmt.where(past_cursor(F, "created_at", "id", after, descending=False))
        stmt = stmt.order_by(F.created_at, F.id).limit(limit).offset(offset)
        with self.db.session() as s:
            return [to_finding(row) for row in s.scalars(stmt)]

    def _finding_severity_counts(self, run_id: str) -> dict[str, int]:
        """COUNTS: the run row's per-severity counters (one primary-key read)."""
        stmt = select(*SEVERITY_COUNTERS.values()).where(R.id == run_id)
        with self.db.session() as s:
            row = s.execute(stmt).first()
        if row is None:
            return {}
        return present_severity_counts(
            {
                severity.value: int(count)
                for severity, count in zip(SEVERITY_COUNTERS, row, strict=True)
            }
        )

    def _purge_terminal_runs(self, cutoff: datetime) -> int:
        """PURGE: delete old terminal runs and their findings, batch by batch (short locks)."""
        total = 0
        while True:
            with self.db.session() as s:
                doomed = list(
                    s.scalars(
                        select(R.id)
                        .where(R.status.in_(_TERMINAL), R.completed_at < cutoff)
                        .limit(_PURGE_BATCH)
                    )
                )
                if not doomed:
                    return total
                # Findings first and explicitly, so this holds even where FKs are not enforced.
                s.execute(delete(F).where(F.run_id.in_(doomed)))
                total += _rowcount(s.execute(delete(R).where(R.id.in_(doomed))))
            if len(doomed) < _PURGE_BATCH:
                return total
