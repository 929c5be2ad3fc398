"""A headless Chromium driven over the DevTools protocol, for the tests that look at a report in a real browser.

Debian's chromium package (install-system-deps.sh installs it; Playwright's browser download is not reachable
here), started with ``--remote-debugging-pipe``: the protocol's JSON messages, each ending with a NUL byte, go to
the browser on its file descriptor 3 and come back on 4, so no websocket library is needed. ``Browser.open(url)``
loads a page with the console and exceptions recorded from before the first script runs; ``evaluate`` runs an
expression in the page; ``mouse`` moves, presses and releases the real mouse (hover, drags).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(AssertionError):
    pass


class Browser:
    def __init__(self, profile: Path, width: int = 1300, height: int = 1000) -> None:
        if CHROMIUM is None:
            raise BrowserError("chromium is not installed (make test installs it: apt-get install chromium)")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds() -> None:  # in the child: the protocol's pipes as its descriptors 3 and 4
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        profile.mkdir(parents=True, exist_ok=True)
        self._log_path = profile.parent / f"{profile.name}-chromium.log"
        self._log = open(self._log_path, "wb")  # noqa: SIM115 - closed in close(); a pipe could fill and block it
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log, preexec_fn=fds,
            close_fds=False)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None
        self._size = (width, height)

    # ------------------------------------------------------------ the protocol
    def _send(self, method: str, params: dict[str, Any] | None = None, session: bool = True) -> int:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        return self._next

    def _read(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError(f"chromium closed the protocol pipe (exit {self.proc.poll()}): {self._stderr()}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict[str, Any] | None = None, session: bool = True,
             timeout: float = 30) -> dict[str, Any]:
        want = self._send(method, params, session)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._read(deadline - time.monotonic())
            if msg is None:
                break
            if msg.get("id") == want:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)
        raise BrowserError(f"{method}: no answer within {timeout} s")

    def wait_event(self, method: str, timeout: float = 30) -> dict[str, Any]:
        for e in self.events:
            if e["method"] == method:
                return e
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._read(deadline - time.monotonic())
            if msg is None:
                break
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == method:
                    return msg
        raise BrowserError(f"no {method} within {timeout} s")

    # ------------------------------------------------------------ pages
    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")
        w, h = self._size
        self.call("Emulation.setDeviceMetricsOverride", {"width": w, "height": h, "deviceScaleFactor": 1,
                                                         "mobile": False})
        self.events.clear()
        self.call("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise BrowserError(f"{expression[:200]}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def mouse(self, kind: str, x: float, y: float) -> None:
        """kind: mouseMoved, mousePressed or mouseReleased (the left button), at page coordinates."""
        params: dict[str, Any] = {"type": kind, "x": x, "y": y}
        if kind != "mouseMoved":
            params.update(button="left", clickCount=1)
        self.call("Input.dispatchMouseEvent", params)

    def problems(self) -> list[str]:
        """What the page reported wrong: exceptions, console errors and warnings, failed loads."""
        self.call("Runtime.evaluate", {"expression": "1"})  # flush the events sent so far
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append(f"exception: {p.get('exceptionDetails', {}).get('exception', {}).get('description')}")
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
                out.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p.get('args', [])]}")
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
                out.append(f"log {p['entry']['level']}: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def _stderr(self) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def close(self) -> None:
        try:
            self.call("Browser.close", session=False, timeout=5)
        except BrowserError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._log.close()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
