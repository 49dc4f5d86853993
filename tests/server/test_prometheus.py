"""A real Prometheus (Debian's `prometheus`) scraping a real serve process with a bearer token
every second; the lag is read back through Prometheus's HTTP query API, before and after a
commit moves it."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from server import free_port
from tests.server.conftest import Server, add_token, wait_for

G, T = "billing", "orders"
SCRAPE_WAIT_S = 90


class Prometheus:
    """A prometheus process with its config and storage in a temporary directory."""

    def __init__(self, root: Path, target_port: int, token: str) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is missing: apt-get install -y prometheus"
        self.port = free_port("127.0.0.1")
        config = root / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: offset-ledger\n    scrape_interval: 1s\n"
            "    scrape_timeout: 1s\n    metrics_path: /metrics\n"
            f"    authorization:\n      type: Bearer\n      credentials: {token}\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n")
        self.log = root / "prometheus.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={root / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(self._ready, SCRAPE_WAIT_S, f"prometheus to be ready ({self.log})", 0.2)

    def _get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
                return r.status, r.read()
        except OSError:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            return 0, b""

    def _ready(self) -> bool:
        return self._get("/-/ready")[0] == 200

    def query(self, promql: str) -> list[dict]:
        status, body = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if status != 200:
            return []
        doc = json.loads(body)
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def value(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


@pytest.fixture
def scraped(tmp_path: Path) -> Iterator[tuple[Server, Prometheus, dict[str, str]]]:
    tokens_file = tmp_path / "tokens.toml"
    tokens = {"prometheus": add_token(tokens_file, "prometheus", "audit"),
              "worker": add_token(tokens_file, "worker", "consume", "produce", "operate")}
    server = Server(tmp_path / "data", "--tokens", str(tokens_file))
    prometheus = None
    try:
        prometheus = Prometheus(tmp_path, server.port, tokens["prometheus"])
        yield server, prometheus, tokens
    finally:
        if prometheus is not None:
            prometheus.stop()
        server.kill()


def test_prometheus_scrapes_the_lag_and_reads_it_back(
        scraped: tuple[Server, Prometheus, dict[str, str]]) -> None:
    server, prometheus, tokens = scraped
    with server.client(token=tokens["worker"]) as c:
        c.request("POST", "/v1/queues/append", {"topic": T, "queue": 0, "count": 100})
        c.request("PUT", f"/v1/groups/{G}", {"initial": "earliest"})
        assert c.commit(G, T, 0, 30).accepted
    lag = f'offset_ledger_lag_messages{{consumer_group="{G}",topic="{T}",queue_id="0"}}'
    wait_for(lambda: prometheus.value(lag) == 70, SCRAPE_WAIT_S,
             f"prometheus to read a lag of 70 ({prometheus.log})", 0.25)
    assert prometheus.value('up{job="offset-ledger"}') == 1
    assert prometheus.value(f'offset_ledger_max_offset{{topic="{T}",queue_id="0"}}') == 100
    assert prometheus.value(f'offset_ledger_group_status{{consumer_group="{G}"}}') in (1, 2, 3)
    with server.client(token=tokens["worker"]) as c:
        assert c.commit(G, T, 0, 95).accepted
    wait_for(lambda: prometheus.value(lag) == 5, SCRAPE_WAIT_S,
             "prometheus to read the lag the commit left (5)", 0.25)
    committed = f'offset_ledger_committed_offset{{consumer_group="{G}",topic="{T}",queue_id="0"}}'
    assert prometheus.value(committed) == 95
    assert prometheus.value("sum(offset_ledger_batch_commands_count)") >= 2  # type: ignore[operator]
