"""A producer process for the fleet test: `python -m tests.acceptance.fleet_producer N`.

It uses planq exactly as an application would: settings from PLANQ_* and
`from worker_config import strategize_plan`. It prints the job ids as one JSON list.
"""

from __future__ import annotations

import json
import sys

from planq.tasks.runtime import runtime_for
from planq.worker_config import app, strategize_plan


def main() -> int:
    """Create N plans and queue each one's strategize phase."""
    count = int(sys.argv[1])
    lifecycle = runtime_for(app).lifecycle
    job_ids = []
    for index in range(count):
        plan = lifecycle.create_plan([f"step-{index}"], name=f"fleet-{index}")
        job_ids.append(strategize_plan.delay(plan.plan_id).id)
    print(json.dumps(job_ids))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
