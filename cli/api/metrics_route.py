"""GET /metrics on the admin API: the approval gate as Prometheus sees it.

Approvals and rejections taken over HTTP end a gate's wait in this process, so the wait
histogram they feed is served here (a worker serves the expiries beat's sweep decides);
the gauges of plans waiting now are read from the ledger at each scrape, whichever process
decides. Behind the same read guard as every other GET.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from planq.cli.api.state import session
from planq.cli.context import Planq
from planq.tasks.metrics import exposition

router = APIRouter()


@router.get("/metrics", tags=["health"])
def metrics(planq: Annotated[Planq, Depends(session)]) -> Response:
    """Prometheus text: this process's planq metrics and the ledger's approval gate."""
    body, content_type = exposition(planq.ledger.plans.gate_summary)
    return Response(body, media_type=content_type)
