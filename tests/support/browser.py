"""A real headless Chromium for tests of the pages capjudge writes (the item report, the leaderboard's HTML).

    def test_page(open_page, tmp_path):                # the fixture in conftest.py
        visit = open_page(tmp_path / "report.html")
        assert visit.broken_images() == []              # every <img> decoded (naturalWidth > 0)
        assert visit.offsite_requests() == []           # nothing but file: and data: was asked for
        visit.page.click("#some-button")                # visit.page is a Playwright Page

The browser is Debian's `chromium` (/usr/bin/chromium, or $CAPJUDGE_CHROMIUM), driven through Playwright's
Python API; Playwright's own browser downloads are never used. Tests that need it FAIL when it is missing
(`BrowserMissing`): a page nobody opened is a page nobody checked.

Every request the page makes is recorded (`visit.requests`), and any that is not file: or data: is aborted
before it leaves, so a test sees the attempt without the machine depending on the network. Chromium's own
background traffic (updates, sync, QUIC probes) is switched off by flags: this machine's closed network refuses
it, and with it on, start-up stalls. Each launch gets a fresh user-data-dir so no profile carries state between
tests. Each opened page is screenshotted into the test's tmp dir when the test ends (the path is printed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_CHROMIUM = "/usr/bin/chromium"
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")
CHROMIUM_FLAGS = (
    "--no-sandbox",  # tests run as root in containers, where Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
)
INSTALL_HINT = (
    "install Debian's chromium (as root: apt-get install -y chromium; `make setup` does it when it can) "
    "or point CAPJUDGE_CHROMIUM at a Chromium binary"
)


class BrowserMissing(RuntimeError):
    """No Chromium (or no Playwright) to run the browser tests with."""


def chromium_path() -> Path:
    """The Chromium binary the tests launch; raises BrowserMissing naming what to install."""
    configured = os.environ.get("CAPJUDGE_CHROMIUM")
    candidate = Path(configured) if configured else Path(DEFAULT_CHROMIUM)
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = None if configured else shutil.which("chromium")
    if found:
        return Path(found)
    raise BrowserMissing(f"no Chromium at {candidate}: {INSTALL_HINT}")


@dataclass
class PageVisit:
    """One page open in the browser, with everything it asked for and every script error it raised."""

    page: Any  # playwright.sync_api.Page
    path: Path
    requests: list[str] = field(default_factory=list)
    script_errors: list[str] = field(default_factory=list)

    def offsite_requests(self) -> list[str]:
        """Requests for anything but local files and inline data (each was aborted before it left)."""
        return [url for url in self.requests if not url.startswith(LOCAL_SCHEMES)]

    def broken_images(self) -> list[str]:
        """The src (cut to 80 characters) of every <img> that has not decoded to a picture."""
        return self.page.evaluate(
            """() => Array.from(document.images)
                   .filter(img => !img.complete || img.naturalWidth === 0)
                   .map(img => (img.getAttribute('src') || '(no src)').slice(0, 80))"""
        )

    def image_count(self) -> int:
        return self.page.evaluate("() => document.images.length")

    def visible(self, selector: str) -> list[Any]:
        """The elements matching `selector` that are rendered (not display:none, not inside a hidden parent)."""
        return [element for element in self.page.query_selector_all(selector) if element.is_visible()]

    def screenshot(self, target: Path) -> Path:
        self.page.screenshot(path=str(target), full_page=True)
        print(f"screenshot: {target}")
        return target


class Browser:
    """One headless Chromium for a test session, with a profile of its own; `open(path)` opens a new tab."""

    def __init__(self) -> None:
        executable = chromium_path()
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as error:
            raise BrowserMissing(
                f"the Python package playwright is missing ({error}): install the dev extra (pip install -e '.[dev]')"
            ) from error
        self._profile = tempfile.mkdtemp(prefix="capjudge-chromium-")
        self._playwright = sync_playwright().start()
        try:
            # A persistent context is the only way to hand Chromium a user-data-dir of our own.
            self._context = self._playwright.chromium.launch_persistent_context(
                self._profile, executable_path=str(executable), headless=True, args=list(CHROMIUM_FLAGS),
                viewport={"width": 1366, "height": 900},
            )
        except Exception:
            self._playwright.stop()
            shutil.rmtree(self._profile, ignore_errors=True)
            raise
        self._context.route("**/*", self._keep_local)

    @staticmethod
    def _keep_local(route: Any) -> None:
        if route.request.url.startswith(LOCAL_SCHEMES):
            route.continue_()
        else:
            route.abort("blockedbyclient")

    def open(self, path: Path, fragment: str = "") -> PageVisit:
        """Open a local file (with `#fragment` when given) in a new tab and wait for its load event."""
        page = self._context.new_page()
        visit = PageVisit(page=page, path=path)
        page.on("request", lambda request: visit.requests.append(request.url))
        page.on("websocket", lambda socket: visit.requests.append(socket.url))
        page.on("pageerror", lambda error: visit.script_errors.append(str(error)))
        page.goto(path.resolve().as_uri() + (f"#{fragment}" if fragment else ""), wait_until="load")
        return visit

    def close(self) -> None:
        try:
            self._context.close()
        finally:
            self._playwright.stop()
            shutil.rmtree(self._profile, ignore_errors=True)


@contextmanager
def browser() -> Iterator[Browser]:
    running = Browser()
    try:
        yield running
    finally:
        running.close()
