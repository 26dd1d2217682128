"""`planq api`: serve the admin API and dashboard with uvicorn, on the workers' PLANQ_* settings."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

import typer

from planq.cli.output import boundary, warn

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """Whether host only reaches this machine (localhost, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def choose_bind(host: str, settings: Any) -> tuple[str, str | None]:
    """(host to bind, warning): without auth (no token asked) the API binds to loopback only."""
    from planq.cli.api.auth import auth_on

    if auth_on(settings):
        return host, None
    if is_loopback(host):
        return host, f"PLANQ_API_TOKEN is not set: no auth, listening on loopback ({host}) only"
    return LOOPBACK, (
        f"PLANQ_API_TOKEN is not set: no auth, so listening on {LOOPBACK} only, "
        f"not {host} (set PLANQ_API_TOKEN to serve other hosts)"
    )


@boundary
def api_command(
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = LOOPBACK,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = 8000,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
) -> None:
    """Serve the admin HTTP API (OpenAPI at /docs) and the dashboard (at /)."""
    import uvicorn

    from planq.cli.api.app import create_api
    from planq.cli.context import load_settings

    settings = load_settings()
    bind, note = choose_bind(host, settings)
    if note:
        warn(note)
    reads = "open" if settings.api_open_reads else "need the token"
    auth = "no token" if note else f"a principal's bearer token for writes; reads {reads}"
    typer.echo(f"planq api on http://{bind}:{port}/ ({auth}); OpenAPI at /docs", err=True)
    uvicorn.run(create_api(settings=settings), host=bind, port=port, log_level=log_level)
