"""The one service object of a process: what every surface calls to act on planq.

`service_for(app)` (tasks/runtime.py) gives it; the CLI, the HTTP API, the Python client,
beat's sweeps and the embedded worker call its facets, and each raises domain errors that
the surface translates (exit codes, HTTP statuses):

- `jobs`: cancel, retry, cancel a plan, the stuck sweep, the TTL cleanup, the relay;
- `plans`: create, queue, run a pipeline, approve, reject, the trail;
- `runs`: trigger, cancel and purge recoverable runs;
- `publish`: the publish door (its dispatch stamps flushed on close);
- `redactor`: the one redactor every text of this process passes through.

Reads go through the ledger's stores (`Runtime.jobs`, `.plans`, `.runs`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

from planq.domain.redaction import Redactor
from planq.tasks.job_service import JobService
from planq.tasks.plan_service import PlanService
from planq.tasks.publisher import JobPublisher
from planq.tasks.run_service import RunService


class PlanqService:
    """jobs, plans, runs, publish, redactor: one object, built once per process."""

    def __init__(
        self,
        jobs: JobService,
        plans: PlanService,
        runs: Callable[[], RunService],
        publish: JobPublisher,
        redactor: Redactor,
    ) -> None:
        self.jobs = jobs
        self.plans = plans
        self._runs = runs
        self.publish = publish
        self.redactor = redactor

    @cached_property
    def runs(self) -> RunService:
        """Recoverable runs (their store is opened on first use)."""
        return self._runs()
