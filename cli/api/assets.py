"""The dashboard's script and stylesheet: static files served by the API itself (no CDN)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

#: cli/api/static: dashboard.js and dashboard.css, shipped as package data.
STATIC = Path(__file__).with_name("static")
#: Where the page loads them from (same origin).
ASSETS = "/dashboard/assets"


def install_assets(app: FastAPI) -> None:
    """Serve the dashboard's files; public like the page shell, since they carry no ledger data.

    A mount, not a route: the app-wide `authorize` dependency and the access table see only
    routes, and the same-origin guard (a middleware) still stands in front.
    """
    app.mount(ASSETS, StaticFiles(directory=STATIC), name="dashboard-assets")
