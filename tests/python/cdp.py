"""A small client of the Chrome DevTools Protocol for the tests that need one page kept open
over time in real headless Chromium (the live report: it redraws itself while the test
watches, so one page load with --dump-dom cannot show it). Starts Chromium with
--remote-debugging-port=0, opens one tab on a URL, evaluates scripts in it and takes
screenshots, over the browser's WebSocket (the `websockets` package)."""
import base64
import json
import re
import shutil
import subprocess
import time

import pytest


class Browser:
    def __init__(self, tmp_path, width=1400, height=1800):
        path = shutil.which("chromium")
        if path is None:
            pytest.skip("chromium is not installed (apt-get install chromium)")
        sync = pytest.importorskip("websockets.sync.client")
        self.proc = subprocess.Popen(
            [path, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-port=0", f"--user-data-dir={tmp_path / 'chromium'}",
             f"--window-size={width},{height}", "--no-first-run", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            url = m.group(1) if m else None
        assert url, "chromium did not start its DevTools endpoint"
        self._conn = sync.connect(url, max_size=None, open_timeout=60)
        self.ws = self._conn.__enter__()  # (as `with connect(...)` would: websockets asks it)
        self.next_id = 0
        self.session = None

    def call(self, method, session=True, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session and self.session:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv(timeout=120))
            if reply.get("id") == self.next_id:
                assert "error" not in reply, reply
                return reply.get("result", {})

    def open(self, url):
        target = self.call("Target.createTarget", session=False, url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", session=False, targetId=target,
                                 flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Page.navigate", url=url)

    def eval(self, expression):
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in res, res
        return res["result"].get("value")

    def wait_for(self, expression, timeout=120):
        deadline = time.monotonic() + timeout
        guarded = f"(function () {{ try {{ return ({expression}); }} catch (e) {{ return false; }} }})()"
        while time.monotonic() < deadline:
            value = self.eval(guarded)
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"the page never made {expression!r} true")

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        try:
            self._conn.__exit__(None, None, None)
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
