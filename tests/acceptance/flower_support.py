"""Flower as the fleet runs it: the command line, and an HTTP client for a running one."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
import requests

from tests.celery_support import CeleryProcess

#: Test-only credentials for a Flower bound to 127.0.0.1 for one test.
FLOWER_USER, FLOWER_PASSWORD = "operator", "flower-test-only"


def flower_args(port: int) -> list[str]:
    """`celery -A worker_config` arguments that start Flower (tornado wants --name=value)."""
    return ["flower", f"--port={port}", "--address=127.0.0.1"]


def flower_command(port: int) -> list[str]:
    """The whole Flower command line this test runs."""
    return [sys.executable, "-m", "celery", "-A", "planq.worker_config", *flower_args(port)]


class FlowerServer:
    """A running Flower process and an HTTP client for it."""

    def __init__(self, process: CeleryProcess, port: int, basic_auth: bool) -> None:
        self.process = process
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.auth = (FLOWER_USER, FLOWER_PASSWORD) if basic_auth else None

    def get(self, path: str, auth: bool = True, **params: Any) -> requests.Response:
        """GET path (with the basic-auth credentials unless auth=False)."""
        if self.process.proc.poll() is not None:
            pytest.fail(f"Flower exited with {self.process.proc.returncode}:\n{self.log()}")
        return requests.get(
            self.url + path, params=params, auth=self.auth if auth else None, timeout=10
        )

    def api(self, path: str, **params: Any) -> Any:
        """GET an /api/ path and return its JSON."""
        response = self.get(path, **params)
        response.raise_for_status()
        return response.json()

    def log(self) -> str:
        """The end of Flower's log, for failure messages."""
        return self.process.log_tail(60)

    def answers(self) -> bool:
        """Whether /healthcheck says OK yet."""
        try:
            return self.get("/healthcheck", auth=False).text == "OK"
        except requests.ConnectionError:
            return False


StartFlower = Callable[..., FlowerServer]
