"""A local OTLP/HTTP trace receiver for bench/throughput.py's `planq+otel` row.

It takes each export (HTTP POST of a protobuf ExportTraceServiceRequest), counts the
bytes and answers 200, as a collector on the same host would; decoding is the
collector's cost, not planq's, so it is not paid here. Run as its own process (its CPU is
not the producer's): `python -m bench.otlp_sink PORT`; SIGTERM prints the totals.
"""

from __future__ import annotations

import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOTALS = {"requests": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    """Reads an export and answers 200 with an empty ExportTraceServiceResponse."""

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length", 0))
        self.rfile.read(size)
        TOTALS["requests"] += 1
        TOTALS["bytes"] += size
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink)

    def stop(*_: Any) -> None:
        print(f"otlp sink: {TOTALS['requests']} exports, {TOTALS['bytes']} bytes", flush=True)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
