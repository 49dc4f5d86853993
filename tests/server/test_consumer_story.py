"""The consumer story over HTTP against a real `serve` process: append, pull, commit, a stale
commit refused (409), a reset planned then executed, a fenced commit (409), the next pull
starting at the reset, and history saying who and why (with tokens, tests/server/test_auth.py
tells the same story with the token's name as the actor)."""

from __future__ import annotations

import pytest

from server.client import BadRequest
from tests.server.conftest import Server

G, T = "billing", "orders"


def test_the_consumer_story_over_http(server: Server) -> None:
    with server.client() as c:
        assert c.request("POST", "/v1/queues/append", {"topic": T, "queue": 0, "count": 100})
        c.request("PUT", f"/v1/groups/{G}", {"initial": "earliest"})
        p = c.pull(G, T, 0, client="w1", max=10)
        assert (p.next_offset, p.count, p.generation) == (0, 10, 0)
        assert c.commit(G, T, 0, 10, client="w1", generation=p.generation).accepted
        stale = c.commit(G, T, 0, 5, client="w1")
        assert (stale.accepted, stale.reason, stale.offset) == (False, "stale", 10)
        plan = c.reset(G, topic=T, to_offset=2, reason="replay INC-1")
        assert not plan.executed and plan.plan[0]["from_offset"] == 10
        done = c.reset(G, topic=T, to_offset=2, reason="replay INC-1", execute=True,
                       actor="alice")  # without tokens (loopback only) the body names who
        assert done.executed and done.seq is not None
        fenced = c.commit(G, T, 0, 12, client="w1", generation=0)
        assert (fenced.accepted, fenced.reason) == (False, "fenced")
        again = c.pull(G, T, 0, client="w1", max=10)
        assert (again.next_offset, again.generation) == (2, 1)
        assert c.commit(G, T, 0, 12, client="w1", generation=1).accepted
        resets = c.history(group=G, kind="reset")
        assert [(e["prev_offset"], e["offset"], e["generation"]) for e in resets] == [(10, 2, 1)]
        assert '"reason":"replay INC-1"' in resets[0]["detail"] and resets[0]["actor"] == "alice"
        assert c.history(group=G, kind="commit")[-1]["offset"] == 12
        assert c.progress(G)[0]["committed_offset"] == 12
        with pytest.raises(BadRequest, match="invalid offset -1"):
            c.commit(G, T, 0, -1, client="w1")
    assert server.stop() == 0
