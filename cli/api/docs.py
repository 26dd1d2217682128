"""The OpenAPI page at /docs, with Swagger UI served from the installed package.

FastAPI's default page loads Swagger UI from a CDN, which an offline host cannot reach.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"


def install_docs(app: FastAPI) -> None:
    """Serve /docs (Swagger UI on /openapi.json) and its files from swagger-ui-bundle."""
    from swagger_ui_bundle import swagger_ui_path

    app.mount(ASSETS, StaticFiles(directory=swagger_ui_path), name="swagger-ui")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        """Swagger UI for this API."""
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title}: OpenAPI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )
