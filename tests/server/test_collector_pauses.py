"""The garbage collector's pauses are the server's own histogram (a full collection stops every
thread): /metrics serves them by generation, so a tail can be told apart from the writer's."""

from __future__ import annotations

import re

from tests.server.conftest import Server, raw


def test_metrics_serve_the_collectors_pauses_by_generation(module_server: Server) -> None:
    with module_server.client() as c:
        for i in range(200):
            c.commit("pauses", "t", 0, i + 1)
        # 3,000 new keys stay in the state (a tracked key tuple each): young collections,
        # whatever each request frees again (a commit on a known key keeps nothing tracked)
        for n in range(3):
            c.commands([{"op": "commit", "group": "pauses", "topic": f"t{n}", "queue_id": q,
                         "offset": 1} for q in range(1000)])
    status, text = raw(module_server, "GET", "/metrics")
    assert status == 200, text
    counts = {int(g): float(n) for g, n in re.findall(
        r'offset_ledger_gc_pause_seconds_count\{generation="(\d)"\} (\S+)', text)}
    assert set(counts) == {0, 1, 2}, text[:2000]
    assert counts[0] > 0
