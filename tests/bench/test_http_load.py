"""The load driver runs wrk and the fixed-rate sender against a tiny local server and reads them right."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec
import pytest

from bench import http_load
from bench.http_stacks.group_commit import CommitRequest


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    status = 200
    bodies: list[bytes]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as wrk expects

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server: _Server = self.server  # type: ignore[assignment]
        server.bodies.append(body)
        out = b'{"accepted":true}'
        self.send_response(server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.bodies = []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(srv: _Server) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}/v1/commit"


def _need_wrk() -> None:
    try:
        http_load.wrk_path()
    except http_load.WrkMissing as exc:
        pytest.fail(str(exc))  # fail, never skip: the benchmarks need wrk


def test_missing_wrk_names_the_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_load.shutil, "which", lambda name: None)
    with pytest.raises(http_load.WrkMissing, match="apt-get install wrk"):
        http_load.run_wrk("http://127.0.0.1:9/v1/commit", 1, 1)


def test_wrk_posts_valid_commits_over_varying_keys(server: _Server) -> None:
    _need_wrk()
    res = http_load.run_wrk(_url(server), 1, 4)
    assert res.requests > 0 and res.requests_per_s > 0
    assert res.errors == 0 and res.non_2xx == 0
    assert 0 < res.p50_ms <= res.p99_ms <= res.max_ms
    # wrk counts requests answered within the duration; a few more may have been sent
    assert len(server.bodies) >= res.requests
    commits = [msgspec.json.decode(b, type=CommitRequest) for b in server.bodies]
    assert len({(c.group, c.topic, c.queue_id) for c in commits}) > 1


def test_wrk_counts_answers_outside_2xx(server: _Server) -> None:
    _need_wrk()
    server.status = 409
    res = http_load.run_wrk(_url(server), 1, 2)
    assert res.requests > 0
    assert res.non_2xx == res.requests


def test_parse_wrk_output_reads_the_done_line() -> None:
    text = ("Running 1s test @ http://x\n" + http_load._RESULT_TAG +
            json.dumps({"requests": 500, "duration_us": 2_000_000, "p50_us": 1500, "p90_us": 2500,
                        "p99_us": 9000, "max_us": 12000, "connect": 1, "read": 2, "write": 0,
                        "timeout": 3, "status": 4}) + "\nRequests/sec: 250\n")
    res = http_load.parse_wrk_output(text)
    assert res.requests_per_s == 250
    assert (res.p50_ms, res.p99_ms, res.max_ms) == (1.5, 9.0, 12.0)
    assert res.errors == 6 and res.non_2xx == 4


def test_parse_wrk_output_without_the_done_line_raises() -> None:
    with pytest.raises(ValueError, match="WRK_JSON"):
        http_load.parse_wrk_output("Running 1s test\n")


def test_fixed_rate_sends_the_offered_number_of_requests(server: _Server) -> None:
    res = http_load.run_fixed_rate(_url(server), rate=200, duration_s=1.0, connections=4)
    assert res.requests == 200 == len(server.bodies)
    assert res.errors == 0 and res.non_2xx == 0
    assert 0 < res.p50_ms <= res.p99_ms <= res.max_ms


def test_commit_bodies_only_raise_a_keys_offset() -> None:
    last: dict[tuple[str, str, int], int] = {}
    for i in range(3 * http_load.KEYS_PER_SENDER):
        c = msgspec.json.decode(http_load.commit_body(i, 0, 1_000_000), type=CommitRequest)
        key = (c.group, c.topic, c.queue_id)
        assert c.offset > last.get(key, -1)
        last[key] = c.offset
    assert len(last) == http_load.KEYS_PER_SENDER
