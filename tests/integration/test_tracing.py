"""One trace per plan: the producer, each phase job with its ledger statements, the gate.

In process: a real in-process Celery worker (threads) on Redis, the ledger on SQLite, the
SDK exporting to its in-memory exporter. Across processes: a real prefork `celery worker`
exporting over OTLP/HTTP to a receiver on loopback that decodes the protobuf.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from planq.domain.jobs import AsyncJobStatus
from planq.domain.plans import PipelineState, Plan, PlanPhase
from planq.tasks import tracing
from planq.tasks.ledger_consistency import JOB_NAME as LEDGER_CONSISTENCY
from planq.tasks.run_service import task_name
from planq.tasks.runtime import Runtime, reset_runtime, runtime_for
from tests.celery_support import (
    WorkerProcess,
    embedded_runtime,
    make_app,
    wait_for_status,
    worker_env,
)
from tests.support import wait_for

PHASES = ("strategize", "execute", "apply")
_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def sdk() -> Iterator[InMemorySpanExporter]:
    """The process's SDK provider, once (the API allows one per process), exporting in memory.

    If another test module installed a provider first, ours joins it as one more processor.
    The provider stays for the rest of this xdist worker (the API cannot uninstall it): the
    exporter is shut down after the module, so later modules' spans are not kept.
    """
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    yield _EXPORTER
    _EXPORTER.shutdown()


@pytest.fixture
def spans(sdk: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    sdk.clear()
    yield sdk
    sdk.clear()


@pytest.fixture
def runtime(redis_url: str, tmp_path: Path) -> Iterator[Runtime]:
    app = make_app(redis_url, f"sqlite:///{tmp_path / 'trace.db'}", auto_migrate=True)
    with embedded_runtime(app) as rt:
        yield rt


def of_plan(exporter: InMemorySpanExporter, plan_id: str) -> list[ReadableSpan]:
    trace_id = tracing.plan_trace_id(plan_id)
    return [s for s in exporter.get_finished_spans() if s.context.trace_id == trace_id]


def named(found: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in found if s.name == name]


def children(found: list[ReadableSpan], parent: ReadableSpan) -> list[str]:
    return sorted(s.name for s in found if s.parent and s.parent.span_id == parent.context.span_id)


def pipeline_reaches(rt: Runtime, plan_id: str, state: PipelineState) -> Plan:
    def reached() -> Plan | None:
        plan = rt.plans.get(plan_id)
        return plan if plan is not None and plan.pipeline_state is state else None

    found: Plan = wait_for(reached, timeout=30, what=f"pipeline of {plan_id} to be {state}")
    return found


def jobs_ended(exporter: InMemorySpanExporter, plan_id: str, count: int) -> list[ReadableSpan]:
    def ended() -> list[ReadableSpan] | None:
        found = of_plan(exporter, plan_id)
        jobs = [s for s in found if s.name.startswith("planq.job ")]
        return found if len(jobs) >= count else None

    found: list[ReadableSpan] = wait_for(ended, timeout=30, what=f"{count} job spans")
    return found


def test_a_gated_three_phase_pipeline_is_one_trace(
    runtime: Runtime, spans: InMemorySpanExporter
) -> None:
    plan = runtime.lifecycle.create_plan([{"name": "a", "seconds": 0.05}], name="traced")
    runtime.app.tasks["planq.run_plan"].delay(plan.plan_id, through="apply", approve_before="apply")
    pipeline_reaches(runtime, plan.plan_id, PipelineState.awaiting_approval)
    runtime.lifecycle.approve_plan(plan.plan_id, actor="alice", note="ok")
    pipeline_reaches(runtime, plan.plan_id, PipelineState.done)

    found = jobs_ended(spans, plan.plan_id, 3)
    # every span of the plan shares its trace id; nothing of this plan went elsewhere
    assert tracing.planq_trace_id(plan.plan_id) == f"{tracing.plan_trace_id(plan.plan_id):032x}"
    (producer,) = named(found, tracing.SPAN_RUN_PLAN)
    assert producer.kind is trace.SpanKind.PRODUCER
    assert producer.attributes is not None
    assert producer.attributes[tracing.PLAN_ID] == plan.plan_id

    jobs = {phase: named(found, f"planq.job {phase}") for phase in PHASES}
    assert all(len(spans_) == 1 for spans_ in jobs.values()), jobs
    rows = {j.phase.value: j for j in runtime.jobs.list_by_plan(plan.plan_id)}
    for phase, (span,) in jobs.items():
        attrs = dict(span.attributes or {})
        assert attrs[tracing.PLAN_ID] == plan.plan_id
        assert attrs[tracing.JOB_ID] == rows[phase].job_id
        assert attrs[tracing.PHASE] == phase
        assert attrs[tracing.ATTEMPT] == 1
        assert attrs[tracing.STATUS] == "succeeded"
        assert attrs[tracing.WORKER] == rows[phase].worker_id
        assert attrs[tracing.QUEUE]
        # the ledger's statements of that job are its children
        assert {"planq.ledger claim", "planq.ledger finish"} <= set(children(found, span))
        assert "planq.ledger progress" in children(found, span)

    # the first job hangs from the producer; the second from the first's finish (it queued
    # it), the third from the gate's span, which holds the approver
    strategize, execute, apply = (jobs[p][0] for p in PHASES)
    assert strategize.parent is not None and strategize.parent.span_id == producer.context.span_id
    finish = [
        s
        for s in named(found, "planq.ledger finish")
        if s.parent is not None and s.parent.span_id == strategize.context.span_id
    ]
    assert execute.parent is not None and execute.parent.span_id == finish[0].context.span_id
    (gate,) = named(found, tracing.SPAN_GATE)
    gate_attrs = dict(gate.attributes or {})
    assert gate_attrs[tracing.APPROVER] == "alice"
    assert gate_attrs[tracing.DECISION] == "approved"
    assert gate_attrs[tracing.GATE_PHASE] == "apply"
    assert apply.parent is not None and apply.parent.span_id == gate.context.span_id
    assert gate.start_time is not None and execute.end_time is not None
    assert gate.start_time <= execute.end_time  # the wait began as execute finished


def test_a_cancelled_jobs_span_carries_the_cancel_and_its_status(
    runtime: Runtime, spans: InMemorySpanExporter
) -> None:
    plan = runtime.lifecycle.create_plan([{"name": f"s{i}", "seconds": 0.5} for i in range(20)])
    queued = runtime.lifecycle.strategize_plan(plan.plan_id)
    assert queued.job is not None
    job_id = queued.job.job_id
    wait_for_status(runtime.jobs, job_id, AsyncJobStatus.running)
    assert runtime.worker.cancel_job(job_id, actor="bob")
    wait_for_status(runtime.jobs, job_id, AsyncJobStatus.cancelled)

    (span,) = [s for s in jobs_ended(spans, plan.plan_id, 1) if s.name.startswith("planq.job")]
    attrs = dict(span.attributes or {})
    assert (attrs[tracing.STATUS], attrs[tracing.RESULT]) == ("cancelled", "cancelled")
    events = {e.name: dict(e.attributes or {}) for e in span.events}
    assert events[tracing.EVENT_CANCEL_REQUESTED][tracing.CANCEL_VIA] == "local"
    assert events[tracing.EVENT_TOKEN_TRIPPED][tracing.CANCEL_REASON] == "cancel requested"
    (producer,) = named(of_plan(spans, plan.plan_id), "planq.queue strategize")
    assert span.parent is not None and span.parent.span_id == producer.context.span_id


def test_no_secret_reaches_a_span(runtime: Runtime, spans: InMemorySpanExporter) -> None:
    secret = "password=hunter2-do-not-show"
    plan = runtime.lifecycle.create_plan([{"name": "a", "seconds": 0.01, "fail": secret}])
    queued = runtime.lifecycle.strategize_plan(plan.plan_id)
    assert queued.job is not None
    wait_for_status(runtime.jobs, queued.job.job_id, AsyncJobStatus.failed)
    found = jobs_ended(spans, plan.plan_id, 1)
    (span,) = [s for s in found if s.name.startswith("planq.job")]
    assert span.status.status_code is trace.StatusCode.ERROR
    assert dict(span.attributes or {})[tracing.STATUS] == "failed"
    text = repr([(s.attributes, [(e.name, e.attributes) for e in s.events]) for s in found])
    assert "hunter2" not in text and "hunter2" not in str(span.status.description)


def test_a_retry_is_a_child_of_the_failed_attempt_which_says_so(
    redis_url: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    app = make_app(
        redis_url, f"sqlite:///{tmp_path / 'retry.db'}", auto_migrate=True, max_attempts=2
    )
    with embedded_runtime(app) as rt:
        plan = rt.lifecycle.create_plan([{"name": "a", "seconds": 0.01, "fail": "boom"}])
        rt.lifecycle.strategize_plan(plan.plan_id)
        found = jobs_ended(spans, plan.plan_id, 2)
    first, second = sorted(
        (s for s in found if s.name == "planq.job strategize"),
        key=lambda s: dict(s.attributes or {})[tracing.ATTEMPT],  # type: ignore[arg-type,return-value]
    )
    retries = [e for e in first.events if e.name == tracing.EVENT_RETRY]
    second_attrs = dict(second.attributes or {})
    assert [dict(e.attributes or {})[tracing.NEW_JOB_ID] for e in retries] == [
        second_attrs[tracing.JOB_ID]
    ]
    assert second_attrs[tracing.ATTEMPT] == 2
    assert second_attrs[tracing.RETRY_OF] == dict(first.attributes or {})[tracing.JOB_ID]
    assert second.parent is not None and second.parent.span_id == first.context.span_id


# -- across processes: a prefork worker exporting over OTLP/HTTP -------------------------------
class Receiver:
    """An OTLP/HTTP trace receiver on loopback: decodes each export, keeps the spans."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver.lock:
                    for resource in request.resource_spans:
                        for scope in resource.scope_spans:
                            receiver.spans.extend(scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def of_trace(self, trace_id: int) -> list[Any]:
        wanted = trace_id.to_bytes(16, "big")
        with self.lock:
            return [s for s in self.spans if s.trace_id == wanted]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.processes
def test_a_prefork_worker_exports_the_plans_spans_over_otlp(
    redis_url: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    receiver = Receiver()
    database_url = f"sqlite:///{tmp_path / 'otlp.db'}"
    producer = make_app(redis_url, database_url, auto_migrate=True)
    rt = runtime_for(producer)  # migrates the SQLite ledger before the worker opens it
    env = worker_env(redis_url, database_url)
    env.update(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
            "OTEL_SERVICE_NAME": "planq-test-worker",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
    )
    worker = WorkerProcess(env, "otlp", log_path=tmp_path / "worker.log")
    try:
        worker.wait_ready(producer)
        plan = rt.lifecycle.create_plan([{"name": "a", "seconds": 0.05}])
        producer.tasks["planq.run_plan"].delay(plan.plan_id, through="apply")
        pipeline_reaches(rt, plan.plan_id, PipelineState.done)
        trace_id = tracing.plan_trace_id(plan.plan_id)

        def exported() -> list[Any] | None:
            found = receiver.of_trace(trace_id)
            return found if sum(s.name.startswith("planq.job ") for s in found) >= 3 else None

        found = wait_for(exported, timeout=30, what="the worker's job spans over OTLP")
        names = sorted(s.name for s in found)
        assert [n for n in names if n.startswith("planq.job ")] == sorted(
            f"planq.job {p}" for p in PHASES
        )
        by_id = {s.span_id: s for s in found}
        ledger = [s for s in found if s.name.startswith("planq.ledger ")]
        assert all(by_id[s.parent_span_id].name.startswith("planq.job ") for s in ledger)
        assert {s.name for s in ledger} >= {"planq.ledger claim", "planq.ledger finish"}
        # the producer's span (this process, in memory) is the first job's parent
        (run_plan,) = named(of_plan(spans, plan.plan_id), tracing.SPAN_RUN_PLAN)
        first = next(s for s in found if s.name == "planq.job strategize")
        assert first.parent_span_id == run_plan.context.span_id.to_bytes(8, "big")
        workers = {
            a.value.string_value for s in found for a in s.attributes if a.key == tracing.WORKER
        }
        assert len(workers) >= 1 and all("otlp@" in w for w in workers)
    finally:
        worker.terminate()
        worker.close()
        reset_runtime(producer)
        receiver.close()


def test_a_recoverable_run_is_a_span_with_its_checkpoints_as_events(
    redis_url: str, tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    app = make_app(redis_url, f"sqlite:///{tmp_path / 'runs.db'}", auto_migrate=True)
    try:
        rt = runtime_for(app)
        plans = [rt.lifecycle.create_plan(["a"], name=f"p{i}").plan_id for i in range(30)]
        rt.lifecycle.queue_phases(plans, PlanPhase.strategize)  # 30 job rows to scan
        # the trigger task's body, called here (Celery runs a direct call in this process)
        outcome = app.tasks[task_name(LEDGER_CONSISTENCY)](
            args={"batch_size": "10", "checkpoint_rows": "5"}
        )
        assert outcome["completed"] is True, outcome
        (span,) = named(spans.get_finished_spans(), f"planq.run {LEDGER_CONSISTENCY}")
        attrs = dict(span.attributes or {})
        assert (attrs[tracing.RUN_ID], attrs[tracing.RUN_STATUS]) == (
            outcome["run_id"],
            "Completed",
        )
        assert attrs[tracing.SCANNED] == outcome["scanned_count"]
        checkpoints = [e for e in span.events if e.name == tracing.EVENT_CHECKPOINT]
        assert (
            checkpoints
            and sum(
                int((e.attributes or {})[tracing.SCANNED])
                for e in checkpoints  # type: ignore[call-overload]
            )
            == outcome["scanned_count"]
        )
    finally:
        reset_runtime(app)


def test_a_job_is_counted_in_queue_wait_and_running_while_it_runs(runtime: Runtime) -> None:
    """The operator's metrics beside the traces: queue wait observed, running up then down."""

    def sample(name: str, phase: str) -> float:
        return REGISTRY.get_sample_value(name, {"phase": phase}) or 0.0

    waits = sample("planq_job_queue_wait_seconds_count", "strategize")
    plan = runtime.lifecycle.create_plan([{"name": f"s{i}", "seconds": 0.3} for i in range(10)])
    queued = runtime.lifecycle.strategize_plan(plan.plan_id)
    assert queued.job is not None
    wait_for_status(runtime.jobs, queued.job.job_id, AsyncJobStatus.running)
    wait_for(
        lambda: sample("planq_jobs_running", "strategize") >= 1, timeout=10, what="running gauge"
    )
    assert sample("planq_job_queue_wait_seconds_count", "strategize") == waits + 1
    assert runtime.worker.cancel_job(queued.job.job_id)
    wait_for_status(runtime.jobs, queued.job.job_id, AsyncJobStatus.cancelled)
    wait_for(
        lambda: sample("planq_jobs_running", "strategize") == 0, timeout=10, what="gauge back at 0"
    )
