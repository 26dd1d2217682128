"""Every method of every store port refuses a bad argument before its backend sees the call.

The ports' methods are read from the protocols themselves (domain/ports.py,
domain/runs/ports.py), so a method added to a port without a check in the checked layer
(store/checked.py, store/runs_checked.py) fails here. Each parameter of each method in
turn gets a value of no valid type; the call must raise a typed error naming that parameter,
on memory, SQLite and PostgreSQL alike, with nothing written: no SQL statement at all, and
the memory ledger unchanged.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import event

from planq.domain.clock import utcnow
from planq.domain.errors import BoundsError
from planq.domain.ids import new_id
from planq.domain.jobs import AsyncJob, AsyncJobStatus
from planq.domain.pipeline import EventKind, PlanEvent
from planq.domain.plans import Plan, PlanPhase
from planq.domain.ports import Finish, JobStore, PlanStore
from planq.domain.runs.ports import Fresh, RunStore, RunStoreProvider
from planq.domain.webhooks import Delivery
from planq.store import (
    Database,
    InMemoryJobStore,
    InMemoryPlanStore,
    InMemoryRunStoreProvider,
    SqlJobStore,
    SqlPlanStore,
    SqlRunStoreProvider,
    in_memory_ledger,
    sql_ledger,
)
from planq.store.runs_memory import InMemoryRunStore
from planq.store.runs_sql import SqlRunStore

PORTS: dict[str, type[Any]] = {
    "JobStore": JobStore,
    "PlanStore": PlanStore,
    "RunStoreProvider": RunStoreProvider,
    "RunStore": RunStore,
}
#: Methods with no argument to refuse; a new one is a conscious addition here.
NO_ARGUMENTS = {
    ("JobStore", "transaction"),
    ("PlanStore", "transaction"),
    ("RunStore", "status"),
    ("RunStore", "mark_completed"),
    ("RunStore", "mark_lease_lost"),
}
#: Which field a refusal names, where it is not the parameter's own name.
FIELD = {
    "error": "error_message",
    "traceback": "error_traceback",
    "key": "param key",
    "value": "param value",
    ("seed_progress_params", "kind"): "progress kind",
}


def _valid() -> dict[Any, Callable[[], object]]:
    """A valid value per parameter (or per (method, parameter)); built fresh per call."""
    return {
        "job": lambda: AsyncJob(plan_id=new_id(), phase=PlanPhase.strategize),
        "jobs": lambda: [AsyncJob(plan_id=new_id(), phase=PlanPhase.strategize)],
        "plan": Plan,
        "plans": lambda: [Plan()],
        "event": lambda: PlanEvent(plan_id=new_id(), kind=EventKind.approved, actor="ann"),
        "job_id": new_id,
        "plan_id": new_id,
        "run_id": new_id,
        "job_ids": lambda: [new_id()],
        "worker_id": lambda: "worker-a",
        "now": utcnow,
        "cutoff": utcnow,
        "never_sent_before": utcnow,
        "resent_before": utcnow,
        "status": lambda: AsyncJobStatus.failed,
        "error": lambda: "boom",
        "traceback": lambda: "Traceback (most recent call last):\nValueError: boom\n",
        "follow_plan": lambda: False,
        "finishes": lambda: [Finish(new_id(), AsyncJobStatus.failed, "boom", None, "worker-a")],
        "progress": lambda: 0.5,
        "checkpoint_json": lambda: "{}",
        "sweep": lambda: "jobs",
        "max_gap": lambda: 45.0,
        "recovered_ago": lambda: None,
        "limit": lambda: 10,
        "offset": lambda: 0,
        "after": lambda: None,
        "at_most": lambda: None,
        "batch_size": lambda: 10,
        "job_name": lambda: "scan",
        "owner": lambda: None,
        "stale_after": lambda: 60.0,
        "leases": dict,
        "retention_days": lambda: 30.0,
        "cursor": lambda: b"c",
        "delta_count": lambda: 1,
        "key": lambda: "k",
        "value": lambda: "v",
        "kind": lambda: "seen",
        ("seed_progress_params", "kind"): lambda: "count",
        "severity": lambda: "anomaly",
        "resource_id": lambda: None,
        "detail": lambda: None,
        "total": lambda: None,
        "error_message": lambda: None,
        "message": lambda: "boom",
        "deliveries": lambda: [
            Delivery(event_id=new_id(), plan_id=new_id(), url="https://h.example/x", body="{}")
        ],
        "lease_until": utcnow,
        "delivery_id": new_id,
        "retry_at": lambda: None,
    }


def port_methods(port: type[Any]) -> dict[str, list[inspect.Parameter]]:
    """The port's public methods (no properties) and their parameters, self left out."""
    return {
        name: [p for p in inspect.signature(member).parameters.values() if p.name != "self"]
        for name, member in vars(port).items()
        if not name.startswith("_") and callable(member) and not isinstance(member, property)
    }


@dataclass
class Backend:
    """One backend's four port objects, with nothing written but the run a RunStore needs."""

    jobs: JobStore
    plans: PlanStore
    runs: RunStoreProvider
    run: RunStore
    db: Database | None

    def target(self, port: str) -> object:
        return {"JobStore": self.jobs, "PlanStore": self.plans, "RunStoreProvider": self.runs}.get(
            port, self.run
        )

    def state(self) -> object:
        """What the ledger holds, read through the stores' own listings."""
        runs = self.runs.list_runs(limit=100)
        return (
            [j.model_dump() for j in self.jobs.list_all()],
            [p.model_dump() for p in self.plans.list_all()],
            runs,
            [self.runs.list_findings(r.id) for r in runs],
            self.run.get_string_param("k"),
        )

    @contextmanager
    def statements(self) -> Iterator[list[str]]:
        """The SQL statements sent while inside (none on memory)."""
        sent: list[str] = []

        def on_statement(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            sent.append(statement)

        engines = self.db.engines if self.db is not None else ()
        for engine in engines:
            event.listen(engine, "before_cursor_execute", on_statement)
        try:
            yield sent
        finally:
            for engine in engines:
                event.remove(engine, "before_cursor_execute", on_statement)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Backend:
    db: Database | None = None
    if request.param == "memory":
        jobs, plans = in_memory_ledger()
        runs: RunStoreProvider = InMemoryRunStoreProvider()
    else:
        db = request.getfixturevalue(f"{'sqlite' if request.param == 'sqlite' else 'pg'}_database")
        jobs, plans = sql_ledger(db)
        runs = SqlRunStoreProvider(db)
    opened = runs.open_or_start("scan")
    assert isinstance(opened, Fresh)
    return Backend(jobs, plans, runs, opened.store, db)


def test_the_ports_methods_are_all_accounted_for() -> None:
    """Each method takes an argument to refuse, or is listed as taking none."""
    for port_name, port in PORTS.items():
        for name, params in port_methods(port).items():
            assert bool(params) is ((port_name, name) not in NO_ARGUMENTS), (port_name, name)
    assert all(name in port_methods(PORTS[port]) for port, name in NO_ARGUMENTS)


@pytest.mark.parametrize(
    ("backend_class", "port"),
    [
        (InMemoryJobStore, JobStore),
        (SqlJobStore, JobStore),
        (InMemoryPlanStore, PlanStore),
        (SqlPlanStore, PlanStore),
        (InMemoryRunStoreProvider, RunStoreProvider),
        (SqlRunStoreProvider, RunStoreProvider),
        (InMemoryRunStore, RunStore),
        (SqlRunStore, RunStore),
    ],
)
def test_backends_implement_only_what_the_checked_layer_calls(
    backend_class: type[Any], port: type[Any]
) -> None:
    """A backend defines no public method that takes arguments: it cannot bypass the checks."""
    own = {
        name
        for name, params in port_methods(port).items()
        if params and name in vars(backend_class)
    }
    assert own == set(), f"{backend_class.__name__} defines {sorted(own)} itself"


@pytest.mark.parametrize("port_name", list(PORTS))
def test_every_method_refuses_a_bad_argument_and_writes_nothing(
    backend: Backend, port_name: str
) -> None:
    valid = _valid()
    target = backend.target(port_name)
    before = backend.state()
    for name, params in port_methods(PORTS[port_name]).items():
        for bad in params:
            kwargs: dict[str, object] = {}
            for param in params:
                key: Any = (name, param.name) if (name, param.name) in valid else param.name
                assert key in valid, f"{port_name}.{name}: no valid value for {param.name!r}"
                kwargs[param.name] = valid[key]()
            kwargs[bad.name] = object()
            field = FIELD.get((name, bad.name), FIELD.get(bad.name, bad.name))
            where = f"{port_name}.{name}({bad.name}=object())"
            with backend.statements() as sent:
                try:
                    getattr(target, name)(**kwargs)
                except (TypeError, ValueError) as exc:
                    error = exc
                else:
                    pytest.fail(f"{where} was accepted")
            if isinstance(error, BoundsError):
                assert error.field == field, (where, error)
            else:  # the sweep kind's own ValueError names it first
                assert str(error).startswith(field), (where, error)
            assert sent == [], (where, sent)
    assert backend.state() == before
