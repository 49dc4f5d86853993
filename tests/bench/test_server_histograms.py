"""The bench reads the server's own histograms over a span: the deltas of a real serve
process's /metrics count exactly the requests of that span."""

from __future__ import annotations

from pathlib import Path

from bench import server_histograms
from tests.server.conftest import Server


def test_deltas_count_the_spans_requests_with_their_bounds(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    try:
        with server.client() as c:
            c.commit("h", "t", 0, 1)  # before the span
            before = server_histograms.scrape(server.url)
            for i in range(50):
                c.commit("h", "t", 0, i + 2)
            after = server_histograms.scrape(server.url)
    finally:
        server.kill()
    got = server_histograms.delta(before, after)
    requests = got["request_seconds[/v1/commit]"]
    assert requests["count"] == 50
    assert 0 < requests["p50_le_ms"] <= requests["p99_le_ms"] <= requests["max_le_ms"]
    assert got["batch_seconds"]["count"] == 50  # one client: one commit a batch
    assert {"gc_pause_seconds[0]", "gc_pause_seconds[1]", "gc_pause_seconds[2]"} <= set(got)
