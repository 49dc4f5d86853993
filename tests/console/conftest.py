"""The console in a real browser: headless Chromium (Debian's `chromium`) driven by Playwright
against a real `offset-ledger serve` over the demo's groups, sent through the API.

Screenshots go to a folder under the test's tmp_path; `CONSOLE_SCREENSHOTS=DIR` also copies
them there (how docs/console-*.png were made)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.demo import DEMO_GROUP, DEMO_MINUTES, DEMO_TOPIC, demo_commands
from tests.server.conftest import Server

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
#: Flags that work in a container without a GPU, a sandbox or a network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
VIEWPORT = {"width": 1400, "height": 1000}


def demo_story(now_ms: int) -> list[dict]:
    """The demo's day ending just now (three groups: billing OK, shipping STOP, analytics
    WARN), as commands with their own ledger times."""
    start = (now_ms - (DEMO_MINUTES + 2) * 60_000) // 60_000 * 60_000
    return demo_commands(start)


def launch_chromium(playwright: object, profile: Path) -> object:
    """A fresh headless Chromium (its own profile folder) as a Playwright browser context."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} not found: apt-get install chromium (make test checks)")
    return playwright.chromium.launch_persistent_context(  # type: ignore[attr-defined]
        str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
        viewport=VIEWPORT)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = launch_chromium(p, tmp_path_factory.mktemp("chromium-profile"))
        try:
            yield context
        finally:
            context.close()  # type: ignore[attr-defined]


def wait_listening(url: str, timeout_s: float = 30) -> None:
    """Return once `url`'s host and port accept connections."""
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(url)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((address.hostname, address.port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def started(server: Server) -> Server:
    """The server once it accepts connections: `serving` is printed as the worker starts,
    a moment before granian listens."""
    wait_listening(server.url)
    return server


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server without tokens over the demo's groups (every test sees the same story; the
    reset test resets `billing`, which no other test reads)."""
    s = started(Server(tmp_path_factory.mktemp("console") / "data"))
    try:
        with s.client() as c:
            results = c.commands(demo_story(int(time.time() * 1000)))
            assert not [r for r in results if "error" in r]
        yield s
    finally:
        s.kill()


class Shots:
    """Screenshots of a test: under its tmp_path, and copied to $CONSOLE_SCREENSHOTS if set."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def take(self, page: object, name: str, **kw: object) -> Path:
        path = self.folder / f"{name}.png"
        page.screenshot(path=str(path), **kw)  # type: ignore[attr-defined]
        assert path.stat().st_size > 10_000  # a rendered page, not a blank one
        extra = os.environ.get("CONSOLE_SCREENSHOTS")
        if extra:
            Path(extra).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(extra) / path.name)
        return path


@pytest.fixture
def shots(tmp_path: Path) -> Shots:
    return Shots(tmp_path / "screenshots")


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    p = browser.new_page()  # type: ignore[attr-defined]
    errors: list[str] = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield p
    finally:
        p.close()
    assert not errors, errors  # no JavaScript error on any page a test opened


def open_page(page: object, url: str) -> None:
    """Load a console page and wait until it has rendered its answers (body[data-ready])."""
    page.goto(url)  # type: ignore[attr-defined]
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)  # type: ignore[attr-defined]


__all__ = ["DEMO_GROUP", "DEMO_TOPIC", "Shots", "open_page"]
