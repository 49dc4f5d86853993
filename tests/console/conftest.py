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

from bench.browser import launch_chromium, wait_listening
from ledger.demo import DEMO_GROUP, DEMO_TOPIC, demo_commands, demo_start
from tests.server.conftest import Server


def demo_story(now_ms: int) -> list[dict]:
    """The demo's day ending just now (three groups: billing OK, shipping STOP, analytics
    WARN), as commands with their own ledger times."""
    return demo_commands(demo_start(now_ms))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = launch_chromium(p, tmp_path_factory.mktemp("chromium-profile"))
        try:
            yield context
        finally:
            context.close()  # type: ignore[attr-defined]


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


LAG_BLUE = (31, 95, 168)  # OLCharts.COLORS.lag, the lag line
_COUNT_PIXELS = """([selector, r, g, b]) => {
  const c = document.querySelector(selector);
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) {
    if (Math.abs(d[i] - r) < 24 && Math.abs(d[i + 1] - g) < 24 && Math.abs(d[i + 2] - b) < 24
        && d[i + 3] > 200) n++;
  }
  return n;
}"""


def count_pixels(page: object, canvas: str, rgb: tuple[int, int, int]) -> int:
    """Pixels of a canvas close to a colour (anti-aliasing blends a line's edges): how a test
    sees that a chart drew its data rather than an empty frame."""
    return page.evaluate(_COUNT_PIXELS, [canvas, *rgb])  # type: ignore[attr-defined]


def open_page(page: object, url: str) -> None:
    """Load a console page and wait until it has rendered its answers (body[data-ready])."""
    page.goto(url)  # type: ignore[attr-defined]
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)  # type: ignore[attr-defined]


__all__ = ["DEMO_GROUP", "DEMO_TOPIC", "Shots", "open_page"]
