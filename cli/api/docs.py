"""The OpenAPI page at /docs, with Swagger UI 5 served from the fastapi-offline package.

FastAPI's default page loads Swagger UI from a CDN, which an offline host cannot reach.
fastapi-offline ships Swagger UI's files (1.7.7: Swagger UI 5.32, which reads the OpenAPI
3.1 document FastAPI emits); planq serves them from that package at /docs/assets rather
than through its FastAPIOffline factory, which would add /redoc and an OAuth2 redirect page
that planq's access table (access.py) does not name.
"""

from __future__ import annotations

from importlib.metadata import version
from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"
SWAGGER_UI = str(files("fastapi_offline") / "static")


def install_docs(app: FastAPI) -> None:
    """Serve /docs (Swagger UI on /openapi.json) and fastapi-offline's files it loads."""
    app.mount(ASSETS, StaticFiles(directory=SWAGGER_UI), name="swagger-ui")
    asset = f"?v={version('fastapi-offline')}"  # an upgrade's files, not a cached copy

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        """Swagger UI for this API."""
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title}: OpenAPI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js{asset}",
            swagger_css_url=f"{ASSETS}/swagger-ui.css{asset}",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
        )
