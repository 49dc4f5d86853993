"""A real `offset-ledger serve` process on loopback, started per test (or module) and stopped
with SIGTERM; its URL read from the `serving http://HOST:PORT` line it prints on stderr."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.client import LedgerClient
from tests.tools.crash_harness import _cli_command

SERVING = re.compile(r"serving (https?://\S+)")
START_TIMEOUT_S = 120


class Server:
    """A serve process: its URL, its stderr so far, and how to stop it."""

    def __init__(self, data: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.data = data
        self.proc = subprocess.Popen(
            [*_cli_command(), "--data-dir", str(data), "serve", "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        self.url = ""
        started = threading.Event()

        def drain() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append(line)
                m = SERVING.search(line)
                if m and not self.url:
                    self.url = m.group(1)
                    started.set()
            started.set()

        threading.Thread(target=drain, daemon=True).start()
        if not started.wait(START_TIMEOUT_S) or not self.url:
            self.proc.kill()
            raise AssertionError(f"serve did not start: {''.join(self.lines)[-2000:]}")

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def client(self, token: str | None = None) -> LedgerClient:
        return LedgerClient(self.url, token=token)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path / "data")
    try:
        yield s
    finally:
        s.kill()
