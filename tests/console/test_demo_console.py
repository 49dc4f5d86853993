"""`make demo` (`offset-ledger demo --serve`) ends by printing the console's URL and serving
it over the demo's data until Ctrl-C; then its temporary data directory goes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import msgspec
import urllib3

from bench.browser import wait_listening
from tests.console.conftest import open_page
from tests.tools.crash_harness import _cli_command

URL = re.compile(r"^(http://127\.0\.0\.1:\d+/)$")


def test_the_demo_ends_by_serving_the_console_over_its_data(tmp_path: Path, page: object) -> None:
    env = {**os.environ, "OFFSET_LEDGER_DEMO_SPARK": "0", "COLUMNS": "200"}
    proc = subprocess.Popen([*_cli_command(), "demo", "--serve"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if URL.match(lines[-1]):
                found.set()
        found.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert found.wait(180), "".join(lines)[-2000:]
        url = URL.match(lines[-1]).group(1)  # type: ignore[union-attr]
        assert "The web console over the demo's data" in lines[-2]
        data_dir = re.search(r"export OFFSET_LEDGER_DATA_DIR=(\S+)\)", "\n".join(lines)).group(1)  # type: ignore[union-attr]
        wait_listening(url)
        groups = msgspec.json.decode(urllib3.request("GET", url + "v1/lag").data)
        assert {g["consumer_group"]: g["status"] for g in groups} == {
            "analytics": "WARN", "billing": "OK", "shipping": "ERR"}
        open_page(page, url)
        assert page.locator("#groups tbody tr").count() == 3  # type: ignore[attr-defined]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        assert not Path(data_dir).exists()  # the temporary data directory is gone
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
