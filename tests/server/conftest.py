"""A real `offset-ledger serve` process on loopback, started per test (or module) and stopped
with SIGTERM; its URL read from the `serving http://HOST:PORT` line it prints on stderr.

granian runs the app in a worker process under its main process: the server is started in a
session of its own, so `kill()` can SIGKILL both at once (a kill -9 of the main alone would
leave the worker holding the writer lock)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from ledger import Ledger
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
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
            env={**os.environ, **(env or {})}, start_new_session=True)
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
            self.kill()
            raise AssertionError(f"serve did not start: {''.join(self.lines)[-2000:]}")

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    @property
    def port(self) -> int:
        return int(urlsplit(self.url).port or 0)

    def client(self, token: str | None = None, **kw: Any) -> LedgerClient:
        return LedgerClient(self.url, token=token, **kw)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        wait_for(lambda: not _group_alive(self.proc.pid), 30, "granian's worker to exit")
        return code

    def kill(self) -> None:
        """SIGKILL granian's main and worker together (the whole process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        wait_for(lambda: not _group_alive(self.proc.pid), 30, "the killed server to be gone")

    def next_seq(self) -> int:
        """The durable log's end, read by a reader of the data directory (no lock)."""
        led = Ledger.open(self.data, readonly=True)
        try:
            led.catch_up()
            return led.log.next_seq
        finally:
            led.close()


def child_pid(data: Path, module: str) -> int | None:
    """The pid of the server's child running `module` for `data` (its command line names
    both: server.writer_process, server.reader_process), or None."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if module.encode() in argv and str(data).encode() in argv:
            return int(pid)
    return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str,
             every_s: float = 0.05) -> Any:
    """Poll `condition` until it is truthy (its value is returned) or fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(every_s)


def add_token(tokens: Path, name: str, *roles: str, groups: tuple[str, ...] = ()) -> str:
    """`offset-ledger token add NAME --role R... [--groups G...] --tokens FILE`: the token."""
    args = [*_cli_command(), "token", "add", name, "--tokens", str(tokens)]
    args += [a for r in roles for a in ("--role", r)]
    args += [a for g in groups for a in ("--groups", g)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert token and "\n" not in token, done.stdout
    return token


def raw(server: Server, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """One request over a fresh connection, as sent (no client library in between): the
    status and the decoded JSON body (or the raw text when it is not JSON). A body is sent as
    application/json unless `headers` say otherwise."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    sent = dict(headers or {})
    if body is not None and not any(k.lower() == "content-type" for k in sent):
        sent["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, data.decode(errors="replace")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path / "data")
    try:
        yield s
    finally:
        s.kill()


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for a module whose tests use keys of their own."""
    s = Server(tmp_path_factory.mktemp("served") / "data")
    try:
        yield s
    finally:
        s.kill()


def commits_refused(server: Server, group: str, reason: str, token: str | None = None) -> float:
    """offset_ledger_commits_refused_total of `group` and `reason` on the server's /metrics
    (`token`: one that may read them, where the server checks tokens)."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    status, text = raw(server, "GET", "/metrics", None, headers)
    assert status == 200, text
    m = re.search(rf'offset_ledger_commits_refused_total\{{consumer_group="{re.escape(group)}",'
                  rf'reason="{reason}"\}} (\S+)', text)
    return float(m.group(1)) if m else 0.0
