"""A webhook receiver down for 30 s gets the gate's notification once it is up (issue 33).

Its own file: the 30 s are the issue's own figure (a receiver that is down for a while),
a floor this test cannot lower, and beside the rest of test_webhooks.py they would take
that file past the suite's 60 s per file. PostgreSQL: the fleet's ledger.
"""

from __future__ import annotations

from datetime import timedelta

from planq.domain.clock import utcnow
from planq.domain.plans import PipelineState
from tests.celery_support import embedded_runtime
from tests.integration import test_webhooks as webhook_tests
from tests.integration.test_webhooks import Receiver, app_for, gated_plan, reaches
from tests.support import wait_for

postgres_url = webhook_tests.postgres_url  # the fixture: an emptied PostgreSQL ledger


def test_a_receiver_down_for_30_s_gets_the_gate_after_once(
    redis_url: str, postgres_url: str
) -> None:
    """Refused for 30 s (the issue's figure: > 10 s on purpose), it stays due; then one POST."""
    down = Receiver()  # its port is reserved, nothing listens on it yet
    app = app_for(
        redis_url, postgres_url, [down.url], webhook_backoff_max=2.0, webhook_max_attempts=40
    )
    with embedded_runtime(app) as rt:
        plan = gated_plan(rt)
        reaches(rt, plan.plan_id, PipelineState.awaiting_approval)
        deadline = utcnow() + timedelta(seconds=30)

        def tried_and_failed() -> bool:
            rows = rt.plans.list_deliveries(plan.plan_id)
            return bool(rows) and rows[0].attempts >= 3 and "refused" in (rows[0].last_error or "")

        wait_for(tried_and_failed, timeout=30, what="three refused tries")
        wait_for(lambda: utcnow() >= deadline, timeout=31, what="30 s down")
        [row] = rt.plans.list_deliveries(plan.plan_id)
        assert row.next_at is not None  # still due: not given up
        down.start()
        try:
            wait_for(lambda: down.accepted_types() == ["gate.waiting"], timeout=15, what="it")
            wait_for(lambda: not rt.plans.list_deliveries(plan.plan_id), what="an empty outbox")
            stays = rt.plans.list_deliveries(plan.plan_id)
        finally:
            down.stop()
    assert stays == []
    assert len(down.requests) == 1  # exactly once, though it was tried many times
