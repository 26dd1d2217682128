"""planq's own app with Celery task events off, for `bench/throughput.py --attribution`.

`celery -A bench.planq_noevents worker ...` runs exactly planq's worker (same tasks,
signals and ledger code); only worker_send_task_events / task_send_sent_event /
task_track_started are False, so the benchmark can tell the events' cost from the
ledger's. Not used by planq.
"""

from __future__ import annotations

from planq.worker_config import app

app.conf.update(worker_send_task_events=False, task_send_sent_event=False, task_track_started=False)

__all__ = ["app"]
