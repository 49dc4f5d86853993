"""Tokens against a real serve process: a tokens file made by `offset-ledger token add`, every
role boundary, 401 without a (known) token, 403 outside a role or its groups, the actor of every
event the token's name whatever the body claims, a refused reset recorded for auditors; and no
serving beyond loopback without tokens."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from server.routes import ROUTES, Route
from tests.server.conftest import Server, add_token, raw
from tests.tools.crash_harness import _cli_command

G, OTHER, T = "billing-eu", "ads", "orders"


@dataclass
class Served:
    server: Server
    tokens: dict[str, str]  # name -> token

    def call(self, who: str | None, method: str, path: str, body: object = None
             ) -> tuple[int, object]:
        headers = {"Content-Type": "application/json"}
        if who is not None:
            headers["Authorization"] = f"Bearer {self.tokens.get(who, who)}"
        data = None if body is None else json.dumps(body).encode()
        return raw(self.server, method, path, data, headers)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("auth")
    tokens_file = root / "tokens.toml"
    tokens = {
        "billing-worker": add_token(tokens_file, "billing-worker", "consume",
                                    groups=("billing-*",)),
        "producer": add_token(tokens_file, "producer", "produce"),
        "alice-ops": add_token(tokens_file, "alice-ops", "operate"),
        "auditor": add_token(tokens_file, "auditor", "audit"),
        "ads-worker": add_token(tokens_file, "ads-worker", "consume", groups=(OTHER,)),
    }
    assert "sha256" in tokens_file.read_text() and tokens["auditor"] not in tokens_file.read_text()
    s = Server(root / "data", "--tokens", str(tokens_file))
    try:
        yield Served(s, tokens)
    finally:
        s.kill()


@pytest.fixture(scope="module")
def ready(served: Served) -> Served:
    """Queues with messages, both groups with a committed offset on them."""
    for q in (0, 1):
        assert served.call("producer", "POST", "/v1/queues/append",
                           {"topic": T, "queue": q, "count": 100})[0] == 200
    for group in (G, OTHER):
        assert served.call("alice-ops", "PUT", f"/v1/groups/{group}",
                           {"initial": "earliest"})[0] == 200
    assert served.call("billing-worker", "POST", "/v1/commit",
                       {"group": G, "topic": T, "queue_id": 0, "offset": 10})[0] == 200
    status, results = served.call("ads-worker", "POST", "/v1/commands", [
        {"op": "commit", "group": OTHER, "topic": T, "queue_id": 0, "offset": 10}])
    assert status == 200 and "error" not in results[0], results  # type: ignore[index]
    return served


def test_no_token_or_an_unknown_one_is_401(served: Served) -> None:
    for who, headers in ((None, None), ("not-a-token", None),
                         (None, {"Authorization": "Basic YWxpY2U6c2VjcmV0"}),
                         (None, {"Authorization": "Bearer "})):
        if headers is None:
            status, doc = served.call(who, "GET", "/v1/history")
        else:
            status, doc = raw(served.server, "GET", "/v1/history", None, headers)
        assert status == 401, doc
        assert isinstance(doc, dict) and doc["error"], doc
    assert served.call(None, "GET", "/metrics")[0] == 401


@pytest.mark.parametrize("route", [r for r in ROUTES if not r.public],
                         ids=[f"{r.method} {r.pattern}" for r in ROUTES if not r.public])
def test_every_route_but_the_public_ones_needs_a_token(served: Served, route: Route) -> None:
    path = route.pattern.replace("{group}", G)
    before = served.server.next_seq()
    status, doc = served.call(None, route.method, path, {} if route.body else None)
    assert status == 401, doc
    status, doc = served.call("not-a-token", route.method, path, {} if route.body else None)
    assert status == 401, doc
    assert served.server.next_seq() == before


def test_health_and_the_openapi_document_need_no_token(served: Served) -> None:
    assert served.call(None, "GET", "/healthz")[0] == 200
    status, doc = served.call(None, "GET", "/openapi.json")
    assert status == 200 and isinstance(doc, dict)
    bearer = doc["components"]["securitySchemes"]["bearer"]
    assert (bearer["type"], bearer["scheme"]) == ("http", "bearer")
    assert "sync (sync, and queue append, truncate and bounds" in bearer["description"]


PULL = {"group": G, "topic": T, "queue_id": 1, "client": "w1", "max": 5}
APPEND = {"topic": T, "queue": 1, "count": 1}
RESET_DRY = {"topic": T, "to_earliest": True}

#: who, method, path, body, status: every role at every boundary.
MATRIX = [
    # consume: pull, commit, sync, and progress/lag of its groups only
    ("billing-worker", "POST", "/v1/pull", PULL, 200),
    ("billing-worker", "POST", "/v1/commit", {**PULL, "offset": 3, "max": None}, 200),
    ("billing-worker", "POST", "/v1/pull", {**PULL, "group": OTHER}, 403),
    ("billing-worker", "POST", "/v1/commit", {"group": OTHER, "topic": T, "queue_id": 0,
                                              "offset": 20}, 403),
    ("billing-worker", "GET", f"/v1/groups/{G}/progress", None, 200),
    ("billing-worker", "GET", f"/v1/groups/{G}/lag", None, 200),
    ("billing-worker", "GET", f"/v1/groups/{OTHER}/progress", None, 403),
    ("billing-worker", "GET", f"/v1/groups/{OTHER}/lag", None, 403),
    ("billing-worker", "POST", "/v1/queues/append", APPEND, 403),
    ("billing-worker", "POST", f"/v1/groups/{G}/reset", RESET_DRY, 403),
    ("billing-worker", "PUT", f"/v1/groups/{G}", {}, 403),
    ("billing-worker", "DELETE", f"/v1/groups/{G}", None, 403),
    ("billing-worker", "GET", "/v1/groups", None, 403),
    ("billing-worker", "GET", "/v1/queues", None, 403),
    ("billing-worker", "GET", "/v1/history", None, 403),
    ("billing-worker", "GET", "/v1/state?at=now", None, 403),
    ("billing-worker", "GET", f"/v1/lookup?topic={T}&datetime=now", None, 403),
    ("billing-worker", "POST", "/v1/sql", {"query": "SELECT 1"}, 403),
    ("billing-worker", "GET", "/metrics", None, 403),
    # produce: queue append and truncate
    ("producer", "POST", "/v1/queues/append", APPEND, 200),
    ("producer", "POST", "/v1/queues/truncate", {"topic": T, "queue": 1, "min_offset": 1}, 200),
    ("producer", "GET", "/v1/queues", None, 200),
    ("producer", "POST", "/v1/pull", PULL, 403),
    ("producer", "POST", "/v1/commit", {**PULL, "offset": 4, "max": None}, 403),
    ("producer", "POST", f"/v1/groups/{G}/reset", RESET_DRY, 403),
    ("producer", "PUT", f"/v1/groups/{G}", {}, 403),
    ("producer", "GET", f"/v1/groups/{G}/progress", None, 403),
    ("producer", "GET", "/v1/history", None, 403),
    ("producer", "POST", "/v1/sql", {"query": "SELECT 1"}, 403),
    ("producer", "GET", "/metrics", None, 403),
    # operate: resets, group set and delete
    ("alice-ops", "POST", f"/v1/groups/{G}/reset", RESET_DRY, 200),
    ("alice-ops", "PUT", "/v1/groups/scratch", {"mode": "broadcast"}, 200),
    ("alice-ops", "DELETE", "/v1/groups/scratch", None, 200),
    ("alice-ops", "POST", "/v1/pull", PULL, 403),
    ("alice-ops", "POST", "/v1/commit", {**PULL, "offset": 4, "max": None}, 403),
    ("alice-ops", "POST", "/v1/queues/append", APPEND, 403),
    ("alice-ops", "GET", "/v1/history", None, 403),
    ("alice-ops", "GET", f"/v1/groups/{G}/progress", None, 403),
    ("alice-ops", "GET", "/metrics", None, 403),
    # audit: every read, SQL included, and nothing else
    ("auditor", "GET", "/v1/history", None, 200),
    ("auditor", "GET", "/v1/state?at=now", None, 200),
    ("auditor", "GET", f"/v1/lookup?topic={T}&datetime=now", None, 200),
    ("auditor", "POST", "/v1/sql", {"query": "SELECT count(*) AS n FROM events"}, 200),
    ("auditor", "GET", "/v1/groups", None, 200),
    ("auditor", "GET", "/v1/queues", None, 200),
    ("auditor", "GET", f"/v1/groups/{OTHER}/progress", None, 200),
    ("auditor", "GET", f"/v1/groups/{OTHER}/lag", None, 200),
    ("auditor", "GET", "/metrics", None, 200),
    ("auditor", "POST", "/v1/pull", PULL, 403),
    ("auditor", "POST", "/v1/commit", {**PULL, "offset": 4, "max": None}, 403),
    ("auditor", "POST", "/v1/queues/append", APPEND, 403),
    ("auditor", "POST", f"/v1/groups/{G}/reset", RESET_DRY, 403),
    ("auditor", "PUT", f"/v1/groups/{G}", {}, 403),
]


@pytest.mark.parametrize(("who", "method", "path", "body", "status"), MATRIX,
                         ids=[f"{w}-{m}-{p.split('?')[0]}-{s}" for w, m, p, _, s in MATRIX])
def test_each_role_may_do_its_part_and_nothing_else(ready: Served, who: str, method: str,
                                                    path: str, body: object, status: int) -> None:
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if v is not None}
    before = ready.server.next_seq()
    got, doc = ready.call(who, method, path, body)
    assert got == status, doc
    if status == 403:
        assert isinstance(doc, dict) and "forbidden" in doc["error"] and who in doc["error"], doc
        assert ready.server.next_seq() == before  # a refusal writes nothing (but a reset's)


def test_commands_in_a_batch_are_judged_one_by_one(ready: Served) -> None:
    status, doc = ready.call("billing-worker", "POST", "/v1/commands", [
        {"op": "commit", "group": G, "topic": T, "queue_id": 0, "offset": 12},
        {"op": "commit", "group": OTHER, "topic": T, "queue_id": 0, "offset": 12},
        {"op": "queue_append", "topic": T, "queue_id": 0, "count": 1},
        {"op": "sync", "group": G, "topic": T, "queue_id": 0, "offset": 12, "source": "mirror"}])
    assert status == 200
    assert [r.get("refused") for r in doc] == [None, "group", "role", "role"], doc  # type: ignore[union-attr]


def _events(served: Served, **query: str) -> list[dict]:
    q = "&".join(f"{k}={v}" for k, v in query.items())
    status, doc = served.call("auditor", "GET", f"/v1/history?{q}")
    assert status == 200, doc
    return doc  # type: ignore[return-value]


def test_a_consumers_reset_is_refused_and_recorded_with_its_name_and_rule(ready: Served) -> None:
    before = ready.server.next_seq()
    status, doc = ready.call("billing-worker", "POST", f"/v1/groups/{G}/reset",
                             {"topic": T, "to_earliest": True, "execute": True,
                              "reason": "skip the backlog"})
    assert status == 403, doc
    assert ready.server.next_seq() == before + 1  # the refusal, and nothing else
    [refused] = _events(ready, group=G, kind="reset_refused")
    assert refused["actor"] == "billing-worker"
    detail = json.loads(refused["detail"])
    assert (detail["refused_by"], detail["reason"]) == ("role", "skip the backlog")
    assert _events(ready, group=G, kind="reset") == []


def test_the_actor_is_the_tokens_name_whatever_the_body_claims(ready: Served) -> None:
    status, doc = ready.call("alice-ops", "POST", f"/v1/groups/{OTHER}/reset",
                             {"topic": T, "queue_id": 0, "to_offset": 2, "execute": True,
                              "reason": "replay INC-7", "actor": "mallory"})
    assert status == 200, doc
    status, _ = ready.call("alice-ops", "PUT", f"/v1/groups/{OTHER}",
                           {"client_timeout": 60_000, "actor": "mallory"})
    assert status == 200
    status, _ = ready.call("alice-ops", "POST", "/v1/commands", [
        {"op": "group_set", "group": OTHER, "mode": "clustering", "actor": "mallory"}])
    assert status == 200
    [reset] = _events(ready, group=OTHER, kind="reset")
    assert (reset["actor"], reset["prev_offset"], reset["offset"]) == ("alice-ops", 10, 2)
    assert json.loads(reset["detail"])["reason"] == "replay INC-7"
    configs = _events(ready, group=OTHER, kind="group_config")
    assert configs and {e["actor"] for e in configs} == {"alice-ops"}
    everything = _events(ready)
    assert "mallory" not in {e["actor"] for e in everything}
    commits = [e for e in everything if e["kind"] == "commit" and e["consumer_group"] == G]
    assert commits and {e["actor"] for e in commits} == {"billing-worker"}


def test_the_consumer_story_with_tokens_says_who_and_why(ready: Served) -> None:
    key = {"group": G, "topic": T, "queue_id": 0}
    pulled = ready.call("billing-worker", "POST", "/v1/pull", {**key, "client": "w9", "max": 5})
    assert pulled[0] == 200
    status, plan = ready.call("alice-ops", "POST", f"/v1/groups/{G}/reset",
                              {"topic": T, "queue_id": 0, "to_offset": 1, "reason": "INC-9"})
    assert status == 200 and plan["executed"] is False  # type: ignore[index]
    status, done = ready.call("alice-ops", "POST", f"/v1/groups/{G}/reset",
                              {"topic": T, "queue_id": 0, "to_offset": 1, "reason": "INC-9",
                               "execute": True})
    assert status == 200 and done["executed"] is True  # type: ignore[index]
    status, fenced = ready.call("billing-worker", "POST", "/v1/commit",
                                {**key, "offset": 15, "client": "w9"})
    assert status == 409 and fenced["reason"] == "fenced"  # type: ignore[index]
    status, again = ready.call("billing-worker", "POST", "/v1/pull",
                               {**key, "client": "w9", "max": 5})
    assert status == 200 and again["next_offset"] == 1  # type: ignore[index]
    [reset] = [e for e in _events(ready, group=G, kind="reset") if e["queue_id"] == 0]
    assert reset["actor"] == "alice-ops" and json.loads(reset["detail"])["reason"] == "INC-9"


def test_the_token_server_stops_cleanly(served: Served) -> None:
    assert served.server.stop() == 0
    assert "Traceback" not in served.server.stderr, served.server.stderr


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_serving_beyond_loopback_without_tokens_exits_2_saying_why(tmp_path: Path,
                                                                   host: str) -> None:
    done = subprocess.run([*_cli_command(), "--data-dir", str(tmp_path / "data"), "serve",
                           "--host", host, "--port", "0"], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"refusing to serve on {host} without --tokens" in lines[0], lines
