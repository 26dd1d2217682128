"""A planq executor for the benchmarks: sleep BENCH_JOB_SECONDS (the raw task does the same).

`PLANQ_DEFAULT_EXECUTOR=bench.executors:sleep` (set by `bench/throughput.py --job-seconds`).
"""

from __future__ import annotations

import os
import time
from typing import Any

JOB_SECONDS = float(os.environ.get("BENCH_JOB_SECONDS", "0") or 0)


def sleep(ctx: Any) -> None:
    """Stand-in for I/O-bound work of a fixed length (not cooperative: like the raw task)."""
    if JOB_SECONDS > 0:
        time.sleep(JOB_SECONDS)
