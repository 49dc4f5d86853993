"""Debian's Chromium, headless, driven by Playwright: how the console's browser tests and its
benchmark open pages (Playwright's own browser download cannot run here; the distribution's
browser is installed by apt-get, as .ci/run does)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
#: Flags that work in a container without a GPU, a sandbox or a network.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
VIEWPORT = {"width": 1400, "height": 1000}


def launch_chromium(playwright: Any, profile: Path) -> Any:
    """A fresh headless Chromium (its own profile folder) as a Playwright browser context."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} not found: apt-get install chromium chromium-driver "
                           "(.ci/run does; make test checks)")
    return playwright.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
        viewport=VIEWPORT)


def wait_listening(url: str, timeout_s: float = 30) -> None:
    """Return once `url`'s host and port accept connections (`offset-ledger serve` prints its
    URL as its worker starts, a moment before it listens)."""
    import socket
    import time
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
