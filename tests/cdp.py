"""A headless Chromium driven over the DevTools protocol, stdlib only.

`--remote-debugging-pipe` speaks CDP as NUL-terminated JSON on fds 3 (in)
and 4 (out), so no websocket library is needed. Enough for the live-page
test: open a URL, evaluate JS, collect console errors and exceptions, take
a screenshot.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import selectors
import subprocess
import time


def find_chromium() -> str | None:
    from requires import find_tool

    return find_tool("chromium")


def chromium_or_skip(purpose: str = "to run the live page in a real browser") -> str:
    """The browser for a page test, or the test skipped with how to get one
    (failed instead under CI=true: tests/requires.py)."""
    from requires import require_tool

    return require_tool("chromium", purpose)


class Chrome:
    def __init__(self, exe: str, profile_dir, width: int = 1400, height: int = 1000):
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def wire():  # in the child: its CDP ends must be exactly fds 3 and 4
            a = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        # Root in a container has no user namespace for the sandbox.
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--disable-extensions", f"--user-data-dir={profile_dir}",
             f"--window-size={width},{height}", "about:blank"],
            preexec_fn=wire, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf, self._id, self.events, self.session = b"", 0, [], None
        # epoll, not select(): select() refuses a descriptor numbered 1024 or
        # more, and a test process that has opened many embedded stores holds
        # that many (chDB keeps each store's threads, three /proc fds apiece).
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._r, selectors.EVENT_READ)

    def _read(self, timeout_s: float) -> dict | None:
        while b"\0" not in self._buf:
            if not self._sel.select(timeout_s):
                return None
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, timeout_s: float = 20, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            reply = self._read(max(deadline - time.monotonic(), 0.01))
            if reply is None:
                break
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)
        raise TimeoutError(f"{method}: no reply in {timeout_s}s")

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            self.call(f"{domain}.enable")
        self.call("Page.navigate", url=url)

    def eval(self, expr: str):
        res = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expr[:60]}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait(self, expr: str, timeout_s: float = 20):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                value = self.eval(expr)
            except RuntimeError:  # mid-navigation: no document yet
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout_s}s waiting for {expr}")

    def errors(self) -> list[str]:
        """Uncaught exceptions, console.error calls and error log entries (failed loads) so far."""
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p["exceptionDetails"])[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args"))[:500])
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(f"{p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out

    def screenshot(self, clip: dict | None = None) -> bytes:
        """PNG of the viewport, or of `clip` (CSS px: x, y, width, height) even past its edge."""
        extra = {"clip": {**clip, "scale": 1}, "captureBeyondViewport": True} if clip else {}
        return base64.b64decode(self.call("Page.captureScreenshot", format="png", **extra)["data"])

    def close(self) -> None:
        try:
            os.write(self._w, json.dumps({"id": 0, "method": "Browser.close", "params": {}}).encode() + b"\0")
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self._sel.close()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError:
                pass
