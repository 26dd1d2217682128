"""The OpenAPI page at /docs, with Swagger UI 5 served from files shipped in this package.

FastAPI's default page loads Swagger UI from a CDN, which an offline host cannot reach; the
PyPI bundle planq used before carried Swagger UI 4, which cannot read the OpenAPI 3.1
document FastAPI emits ("does not specify a valid version field"). The files are vendored
from the npm package swagger-ui-dist (`swagger_ui/README.md` says which and how to update).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"
SWAGGER_UI = Path(__file__).with_name("swagger_ui")
SWAGGER_UI_VERSION = "5.32.15"


def install_docs(app: FastAPI) -> None:
    """Serve /docs (Swagger UI on /openapi.json) and its files from the package's own copy."""
    app.mount(ASSETS, StaticFiles(directory=SWAGGER_UI), name="swagger-ui")
    asset = f"?v={SWAGGER_UI_VERSION}"  # a browser that cached 4.x fetches 5.x

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        """Swagger UI for this API."""
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title}: OpenAPI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js{asset}",
            swagger_css_url=f"{ASSETS}/swagger-ui.css{asset}",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )
