"""A headless Chromium the tests can drive: the DevTools protocol over --remote-debugging-pipe.

`--dump-dom` and `--screenshot` only load a page; clicking a button and reading what it did
needs the protocol. Over the pipe (fd 3 in, fd 4 out, messages ended by a NUL byte) it needs
no websocket client and no port.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

#: Chromium's answer to a command whose page went away under it (code -32000).
NAVIGATED = "Inspected target navigated or closed"


def installed_chromium() -> Path:
    """Debian's Chromium, installed with apt-get when missing (a failed install fails)."""
    if CHROMIUM.exists():
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None:
        pytest.fail(f"{CHROMIUM} is missing and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "-q", "chromium"]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:  # a stale or missing package list: update once and retry
        subprocess.run([apt, "update", "-q"], env=env, capture_output=True, timeout=600)
        done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or not CHROMIUM.exists():
        pytest.fail(f"apt-get install chromium failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return CHROMIUM


def headless(chromium: Path, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium with no network beyond the page asked for."""
    command = [
        str(chromium),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--window-size=1400,900",
        "--virtual-time-budget=10000",  # let the page's AJAX fill the table first
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


class Navigated(Exception):
    """The tab navigated while a command ran in its page: ask again in the new one."""


class Browser:
    """One headless Chromium process with one tab."""

    def __init__(self, chromium: Path, *flags: str) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="planq-chromium-")
        to_browser, self._out = os.pipe()
        self._in, from_browser = os.pipe()
        high = [os.dup(fd) for fd in (to_browser, from_browser)]  # never fds 3/4 themselves

        def wire() -> None:  # in the child, before exec: the pipe ends on fds 3 and 4
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        command = [
            str(chromium),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1400,1100",
            f"--user-data-dir={self._profile.name}",
            "--remote-debugging-pipe",
            *flags,
            "about:blank",
        ]
        self.process = subprocess.Popen(
            command,
            pass_fds=(3, 4, *high),  # 3 and 4 kept open: they are set in the child
            preexec_fn=wire,
            start_new_session=True,  # its helpers (renderer, crashpad) in one group to end
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for fd in (to_browser, from_browser, *high):
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        attached = self.call("Target.attachToTarget", targetId=target, flatten=True)
        self._session: str | None = attached["sessionId"]

    def call(self, method: str, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        """Send one command (to the tab once attached) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if getattr(self, "_session", None):
            message["sessionId"] = self._session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self._buffer:
                if time.monotonic() > deadline:
                    pytest.fail(f"Chromium did not answer {method} within {timeout}s")
                chunk = os.read(self._in, 1 << 16)
                if not chunk:
                    pytest.fail(f"Chromium closed the pipe during {method}")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next_id:
                if "error" in reply and NAVIGATED in str(reply["error"].get("message")):
                    raise Navigated(method)
                if "error" in reply:
                    pytest.fail(f"{method} failed: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the tab (promises awaited).

        A tab that navigates while the expression runs (a click just followed, a page
        loading) drops the evaluation; it is asked again in the page the tab now shows, so
        an expression here only reads (a click is `click`, never repeated).
        """
        deadline = time.monotonic() + 30
        while True:
            try:
                result = self.call(
                    "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
                )
                break
            except Navigated:
                if time.monotonic() > deadline:
                    pytest.fail(f"the tab kept navigating while evaluating {expression!r}")
                time.sleep(0.05)
        if "exceptionDetails" in result:
            pytest.fail(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """Click the element selector names, once: never repeated, even if the tab navigates.

        A click that navigates may take its page away before Chromium answers; it happened,
        and clicking again (in the next page) would act twice.
        """
        try:
            result = self.call(
                "Runtime.evaluate",
                expression=f"document.querySelector({selector!r}).click()",
                returnByValue=True,
            )
        except Navigated:
            return
        if "exceptionDetails" in result:
            pytest.fail(f"clicking {selector!r} raised: {result['exceptionDetails']}")

    def open(self, url: str) -> None:
        """Navigate the tab to url."""
        self.call("Page.navigate", url=url)

    def screenshot(self, path: Path) -> bytes:
        """Save a PNG of the tab to path and return it."""
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        return data

    def close(self) -> None:
        """End the browser and every helper process it started, then remove its profile.

        Chromium's helpers can outlive the main process for a moment and still write into
        the profile ("Directory not empty: 'Default'" on a loaded machine), so the whole
        process group is ended and waited for before the profile goes.
        """
        os.close(self._out)
        os.close(self._in)
        group = self.process.pid
        self._signal_group(group, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=20)
        deadline = time.monotonic() + 10
        while self._signal_group(group, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._signal_group(group, signal.SIGKILL)
        self._profile.cleanup()

    @staticmethod
    def _signal_group(group: int, sig: int) -> bool:
        """Send sig to the process group; False once no process of it is left."""
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return False
        return True
