"""A real headless browser for the console's tests and screenshot: Debian's
chromium driven by its chromedriver over the W3C WebDriver protocol (JSON
over HTTP, spoken here with urllib: no client library needed).

    with Browser() as b:
        b.open("http://127.0.0.1:9000/console")
        b.click("#token-save")
        b.run("return document.title")
"""

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

CHROMIUM = os.environ.get("RL_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("RL_CHROMEDRIVER", "/usr/bin/chromedriver")
# WebDriver's name for an element reference in JSON
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"


class BrowserError(AssertionError):
    pass


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    def __init__(self, width=1280, height=1000, timeout=30.0):
        self.width, self.height, self.timeout = width, height, timeout
        self.dir = tempfile.mkdtemp(prefix="rl-browser-")
        self.port = _free_port()
        self.driver = None
        self.session = None

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *a):
        self.close()

    def start(self):
        for path in (CHROMIUM, CHROMEDRIVER):
            if not os.access(path, os.X_OK):
                raise BrowserError("%s missing: install chromium and chromium-driver "
                                   "(scripts/lib.sh lists them)" % path)
        log = open(os.path.join(self.dir, "chromedriver.log"), "w")
        self.driver = subprocess.Popen(
            [CHROMEDRIVER, "--port=%d" % self.port, "--allowed-ips=127.0.0.1"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if self._call("GET", "/status")["ready"]:
                    break
            except (OSError, BrowserError):
                pass
            if time.monotonic() > deadline or self.driver.poll() is not None:
                raise BrowserError("chromedriver did not start: %s" % self.driver_log())
            time.sleep(0.05)
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-extensions", "--disable-background-networking",
                "--user-data-dir=" + os.path.join(self.dir, "profile"),
                "--window-size=%d,%d" % (self.width, self.height)]
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def driver_log(self):
        try:
            with open(os.path.join(self.dir, "chromedriver.log")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def close(self):
        if self.session:
            try:
                self._call("DELETE", "/session/" + self.session, timeout=10)
            except (OSError, BrowserError):
                pass
            self.session = None
        if self.driver:
            if self.driver.poll() is None:
                try:
                    os.killpg(self.driver.pid, 9)  # the browser with it
                except OSError:
                    pass
            self.driver.wait(10)
            self.driver = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def _call(self, method, path, body=None, timeout=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=data,
                                     method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as r:
                reply = json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise BrowserError("webdriver %s %s: %s" % (method, path, e.read()[:500]))
        return reply.get("value")

    def _s(self, path, method="POST", body=None):
        return self._call(method, "/session/%s%s" % (self.session, path),
                          {} if body is None and method == "POST" else body)

    def open(self, url):
        self._s("/url", body={"url": url})

    def run(self, script, *args):
        """The value a script (a function body) returns in the page."""
        return self._s("/execute/sync", body={"script": script, "args": list(args)})

    def find(self, css):
        return self._s("/element", body={"using": "css selector", "value": css})[ELEMENT]

    def click(self, css):
        self._s("/element/%s/click" % self.find(css))

    def type(self, css, text):
        el = self.find(css)
        self._s("/element/%s/clear" % el)
        self._s("/element/%s/value" % el, body={"text": text})

    def text(self, css):
        return self._s("/element/%s/text" % self.find(css), method="GET")

    def screenshot(self):
        """The page as the browser draws it: PNG bytes."""
        return base64.b64decode(self._s("/screenshot", method="GET"))

    def wait(self, script, timeout=15.0, what=None, *args):
        """Until the script returns something true; returns that."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.run(script, *args)
            if last:
                return last
            time.sleep(0.05)
        raise BrowserError("timed out after %.0f s waiting for %s (last: %r)" %
                           (timeout, what or script, last))


def png_size(data):
    """(width, height) of PNG bytes; BrowserError when they are no PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise BrowserError("not a PNG")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
