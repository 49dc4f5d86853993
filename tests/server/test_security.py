"""Hardening of the server (issue 21, part A), each class through a real serve process, with
`offset-ledger verify` clean after the bad input: the clock a client cannot poison, who may
sync and how far back, cross-site requests on the tokenless server, path segments decoded
once, dry runs judged as their execute, HEAD and repeated query parameters."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import Server, add_token, raw
from tests.tools.crash_harness import _cli_command

T = "orders"
YEAR_2999 = "2999-01-01T00:00:00Z"


def verify_clean(data: Path) -> None:
    """`offset-ledger verify` on the data directory (the view itself is the server's)."""
    done = subprocess.run([*_cli_command(), "--data-dir", str(data), "verify", "--json"],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and json.loads(done.stdout)["problems"] == [], done.stdout


@dataclass
class Site:
    server: Server
    tokens: dict[str, str]

    def call(self, who: str | None, method: str, path: str, body: object = None,
             **headers: str) -> tuple[int, Any]:
        sent = {k.replace("_", "-"): v for k, v in headers.items()}
        if who is not None:
            sent["Authorization"] = f"Bearer {self.tokens[who]}"
        return raw(self.server, method, path,
                   None if body is None else json.dumps(body).encode(), sent)

    def history(self, **query: Any) -> list[dict[str, Any]]:
        q = "&".join(f"{k}={v}" for k, v in query.items())
        status, doc = self.call("auditor", "GET", f"/v1/history?{q}")
        assert status == 200, doc
        return doc


POLICY = """
[[allow]]
actors = ["alice-ops"]
groups = ["*"]

[limits]
max_rewind_messages = 10
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A server with tokens; `billing` committed at 40 on orders:0 by its own consumer."""
    root = tmp_path_factory.mktemp("site")
    tokens_file = root / "tokens.toml"
    roles = {"eve": (("consume",), ("eve-*",)), "billing-worker": (("consume",), ("billing",)),
             "producer": (("produce",), ()), "alice-ops": (("operate",), ()),
             "bob-ops": (("operate",), ()), "auditor": (("audit",), ()),
             "mirror": (("sync",), ()), "replayer": (("consume", "backfill"), ())}
    tokens = {name: add_token(tokens_file, name, *r, groups=g) for name, (r, g) in roles.items()}
    (root / "data").mkdir()
    (root / "data" / "reset-policy.toml").write_text(POLICY)
    s = Server(root / "data", "--tokens", str(tokens_file))
    site = Site(s, tokens)
    try:
        assert site.call("producer", "POST", "/v1/queues/append",
                         {"topic": T, "queue_id": 0, "count": 100})[0] == 200
        assert site.call("alice-ops", "PUT", "/v1/groups/billing", {"initial": "earliest"})[0] == 200
        assert site.call("billing-worker", "POST", "/v1/commit",
                         {"group": "billing", "topic": T, "queue_id": 0, "offset": 40})[0] == 200
        yield site
    finally:
        s.kill()


# ---------------------------------------------------------------- 1. the clock
def test_a_consume_token_cannot_poison_the_clock_to_expire_another_groups_offset(site: Site
                                                                                 ) -> None:
    """The issue's attack: eve (consume, eve-*) stamps a command 2999; the clock never goes
    back, so billing's next pull found its offset idle for 973 years and expired it."""
    before = site.server.next_seq()
    status, doc = site.call("eve", "POST", "/v1/commit", {
        "group": "eve-1", "topic": T, "queue_id": 0, "offset": 1, "ts": YEAR_2999})
    assert status == 400 and YEAR_2999 in doc["error"] and "clock_skew_ms" in doc["error"], doc
    status, doc = site.call("eve", "POST", "/v1/commands", [
        {"op": "pull", "group": "eve-1", "topic": T, "queue_id": 0, "client": "e",
         "ts": 32503680000000}])
    assert status == 200 and "32503680000000" in doc[0]["error"], doc
    assert site.server.next_seq() == before
    status, pulled = site.call("billing-worker", "POST", "/v1/pull", {
        "group": "billing", "topic": T, "queue_id": 0, "client": "c1"})
    assert status == 200 and pulled["next_offset"] == 40, pulled
    assert site.history(group="billing", kind="expire") == []
    newest = site.history(limit=1)[0]
    assert newest["ts_ms"] < time.time() * 1000 + 60_000
    verify_clean(site.server.data)


def test_a_ts_within_the_skew_is_taken_and_the_past_is_the_ledgers_last_time(site: Site
                                                                               ) -> None:
    now = int(time.time() * 1000)
    status, doc = site.call("eve", "POST", "/v1/commands", [
        {"op": "commit", "group": "eve-2", "topic": T, "queue_id": 0, "offset": 1,
         "ts": now + 2_000},
        {"op": "commit", "group": "eve-2", "topic": T, "queue_id": 0, "offset": 2, "ts": 1}])
    assert status == 200 and [r.get("error") for r in doc] == [None, None], doc
    [first, second] = site.history(group="eve-2")
    assert first["ts_ms"] == now + 2_000 and second["ts_ms"] >= first["ts_ms"]


def test_only_a_backfill_token_sends_a_time_beyond_the_skew(tmp_path: Path) -> None:
    """Its own server: a backfill moves the clock forward for good."""
    tokens_file = tmp_path / "tokens.toml"
    tokens = {"replayer": add_token(tokens_file, "replayer", "consume", "backfill"),
              "worker": add_token(tokens_file, "worker", "consume")}
    s = Server(tmp_path / "data", "--tokens", str(tokens_file))
    try:
        site = Site(s, tokens)
        later = int(time.time() * 1000) + 3_600_000
        body = {"group": "g", "topic": T, "queue_id": 0, "offset": 0, "ts": later}
        status, doc = site.call("worker", "POST", "/v1/commit", body)
        assert status == 400 and str(later) in doc["error"], doc
        status, doc = site.call("replayer", "POST", "/v1/commit", body)
        assert status == 200 and doc["accepted"], doc
    finally:
        s.kill()


# ---------------------------------------------------------------- 4. who may sync
def test_a_consumer_may_not_sync_and_a_sync_token_may_send_only_syncs_and_bounds(site: Site
                                                                                  ) -> None:
    sync = {"op": "sync", "group": "billing", "topic": T, "queue_id": 0, "offset": 0,
            "source": "mirror"}
    status, doc = site.call("billing-worker", "POST", "/v1/commands", [sync])
    assert status == 200 and doc[0]["refused"] == "role", doc  # a rewind without a reset
    status, doc = site.call("mirror", "POST", "/v1/commands", [
        {"op": "sync", "group": "mirrored", "topic": T, "queue_id": 0, "offset": 30,
         "source": "dc2"},
        {"op": "queue_bounds", "topic": T, "queue_id": 1, "max_offset": 50, "source": "dc2"},
        {"op": "queue_append", "topic": T, "queue_id": 1, "count": 1},
        {"op": "queue_truncate", "topic": T, "queue_id": 1, "min_offset": 1},
        {"op": "commit", "group": "mirrored", "topic": T, "queue_id": 0, "offset": 31},
        {"op": "group_set", "group": "mirrored", "initial": "earliest"}])
    assert status == 200
    assert [r.get("refused") for r in doc] == [None, None, None, None, "role", "role"], doc
    status, doc = site.call("mirror", "POST", "/v1/groups/mirrored/reset",
                            {"topic": T, "to_offset": 0})
    assert status == 403, doc
    status, doc = site.call("alice-ops", "POST", "/v1/commands", [
        {"op": "sync", "group": "mirrored", "topic": T, "queue_id": 1, "offset": 5,
         "source": "ops"}])
    assert status == 200 and "error" not in doc[0], doc  # an operator may sync
    verify_clean(site.server.data)


def test_a_sync_back_beyond_the_reset_policy_is_refused_and_recorded(site: Site) -> None:
    def sync(offset: int) -> dict[str, Any]:
        status, doc = site.call("mirror", "POST", "/v1/commands", [
            {"op": "sync", "group": "rewound", "topic": T, "queue_id": 0, "offset": offset,
             "source": "dc2"}])
        assert status == 200
        return doc[0]

    assert "error" not in sync(90) and "error" not in sync(95)  # forward: always
    assert "error" not in sync(85)  # back 10: within max_rewind_messages
    refused = sync(20)
    assert refused["refused"] == "policy" and "max_rewind_messages 10" in refused["error"]
    assert "rewinds 65 messages" in refused["error"], refused
    [record] = site.history(group="rewound", kind="reset_refused")
    detail = json.loads(record["detail"])
    assert record["actor"] == "mirror" and detail["refused_by"] == "max_rewind"
    assert (detail["mode"], detail["from_offset"], detail["to_offset"]) == ("sync", 85, 20)
    status, rows = site.call("auditor", "GET", "/v1/groups/rewound/progress")
    assert rows[0]["committed_offset"] == 85
    verify_clean(site.server.data)


# ---------------------------------------------------------------- 7. a dry run judges its actor
def test_a_dry_run_warns_exactly_when_its_execute_would_be_refused(site: Site) -> None:
    """The policy allows alice-ops only; the dry run used to judge actor None and warn her."""
    body = {"topics": [f"{T}:0"], "shift_by": -5}
    status, plan = site.call("alice-ops", "POST", "/v1/groups/billing/reset", body)
    assert status == 200 and "policy" not in plan and plan["plan"][0]["to_offset"] == 35, plan
    status, plan = site.call("bob-ops", "POST", "/v1/groups/billing/reset", body)
    assert status == 200 and "actor 'bob-ops' may not reset" in plan["policy"], plan
    status, doc = site.call("bob-ops", "POST", "/v1/groups/billing/reset",
                            {**body, "execute": True})
    assert status == 409 and "bob-ops" in doc["error"], doc
    status, doc = site.call("alice-ops", "POST", "/v1/groups/billing/reset",
                            {**body, "execute": True, "reason": "replay"})
    assert status == 200 and doc["executed"], doc
    [reset] = site.history(group="billing", kind="reset")
    assert reset["actor"] == "alice-ops"


# ---------------------------------------------------------------- 2. cross-site requests
@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A server without tokens: `billing` committed at 40 on orders:0."""
    s = Server(tmp_path_factory.mktemp("loopback") / "data")
    site = Site(s, {})
    try:
        for path, body in (("/v1/queues/append", {"topic": T, "queue_id": 0, "count": 100}),
                           ("/v1/commit", {"group": "billing", "topic": T, "queue_id": 0,
                                           "offset": 40})):
            assert site.call(None, "POST", path, body)[0] == 200
        yield site
    finally:
        s.kill()


RESET = {"topic": T, "to_offset": 0, "execute": True}


@pytest.mark.parametrize(("headers", "status"), [
    ({"Origin": "http://evil.example", "Content-Type": "text/plain"}, 403),
    ({"Origin": "http://evil.example", "Content-Type": "application/json"}, 403),
    ({"Origin": "null", "Content-Type": "application/json"}, 403),
    ({"Origin": "http://127.0.0.1:1", "Content-Type": "application/json"}, 403),
    ({"Content-Type": "text/plain"}, 415),
    ({"Content-Type": "application/x-www-form-urlencoded"}, 415),
    ({"Content-Type": "multipart/form-data; boundary=x"}, 415),
    ({"Host": "evil.example", "Content-Type": "application/json"}, 421),
    ({"Host": "rebound.example:9888", "Content-Type": "application/json"}, 421),
], ids=["foreign-origin-text", "foreign-origin-json", "null-origin", "other-port-origin",
        "text-plain", "form", "multipart", "foreign-host", "foreign-host-port"])
def test_a_cross_site_reset_on_the_tokenless_server_is_refused(loopback: Site,
                                                               headers: dict[str, str],
                                                               status: int) -> None:
    before = loopback.server.next_seq()
    got, doc = raw(loopback.server, "POST", "/v1/groups/billing/reset",
                   json.dumps(RESET).encode(), headers)
    assert got == status and "error" in doc, doc
    assert loopback.server.next_seq() == before
    verify_clean(loopback.server.data)


def test_a_body_without_a_content_type_is_415(loopback: Site) -> None:
    conn_body = json.dumps({"group": "billing", "topic": T, "queue_id": 0, "offset": 41})
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", loopback.server.port, timeout=60)
    try:
        conn.putrequest("POST", "/v1/commit")
        conn.putheader("Content-Length", str(len(conn_body)))
        conn.endheaders(conn_body.encode())
        response = conn.getresponse()
        assert response.status == 415 and b"Content-Type none" in response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("path", ["/v1/groups", "/healthz", "/", "/console/api.js"])
def test_a_foreign_host_is_421_on_every_route(loopback: Site, path: str) -> None:
    status, doc = raw(loopback.server, "GET", path, None, {"Host": "attacker.example"})
    assert status == 421 and "attacker.example" in doc["error"], doc
    status, _ = raw(loopback.server, "GET", path, None,
                    {"Host": f"localhost:{loopback.server.port}",
                     "Origin": f"http://localhost:{loopback.server.port}"})
    assert status == 200


def test_its_own_pages_reset_and_the_reset_names_the_loopback_sender(loopback: Site) -> None:
    own = f"http://127.0.0.1:{loopback.server.port}"
    status, doc = loopback.call(None, "POST", "/v1/groups/billing/reset",
                                {"topic": T, "shift_by": -5, "execute": True},
                                Origin=own, Content_Type="application/json; charset=utf-8")
    assert status == 200 and doc["executed"], doc
    status, doc = loopback.call(None, "POST", "/v1/groups/billing/reset",
                                {"topic": T, "shift_by": -5, "execute": True, "actor": "carol"})
    assert status == 200 and doc["executed"], doc
    status, events = loopback.call(None, "GET", "/v1/history?group=billing&kind=reset")
    assert [e["actor"] for e in events] == ["loopback", "carol"]


def test_ndjson_is_a_body_type_of_the_commands_route(loopback: Site) -> None:
    lines = b"".join(json.dumps(c).encode() + b"\n" for c in (
        {"op": "queue_append", "topic": T, "queue_id": 5, "count": 2},
        {"op": "queue_append", "topic": T, "queue_id": 5, "count": 3}))
    status, doc = raw(loopback.server, "POST", "/v1/commands", lines,
                      {"Content-Type": "application/x-ndjson"})
    assert status == 200 and [r["max_offset"] for r in doc] == [2, 5], doc


# ---------------------------------------------------------------- 3. decoded once
def test_a_percent_in_a_group_name_is_decoded_once(loopback: Site) -> None:
    """`/v1/groups/a%2541/reset` names group `a%41`: it used to reset `aA`."""
    for group in ("a%41", "aA"):
        assert loopback.call(None, "POST", "/v1/commit", {
            "group": group, "topic": T, "queue_id": 0, "offset": 50})[0] == 200
    status, doc = loopback.call(None, "POST", "/v1/groups/a%2541/reset", RESET)
    assert status == 200 and doc["consumer_group"] == "a%41", doc
    for path, offset in (("/v1/groups/a%2541/progress", 0), ("/v1/groups/aA/progress", 50)):
        status, rows = loopback.call(None, "GET", path)
        assert status == 200 and rows[0]["committed_offset"] == offset, rows
    status, doc = loopback.call(None, "PUT", "/v1/groups/50%25", {})
    assert status == 200 and doc["consumer_group"] == "50%", doc


# ---------------------------------------------------------------- 8. rough edges
@pytest.mark.parametrize("path", ["/v1/groups", "/v1/groups/billing/progress", "/healthz",
                                  "/openapi.json", "/console/api.js"])
def test_head_answers_as_get_without_a_body(loopback: Site, path: str) -> None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", loopback.server.port, timeout=60)
    try:
        conn.request("GET", path)
        got = conn.getresponse()
        got.read()
        conn.request("HEAD", path)
        head = conn.getresponse()
        assert (head.status, head.read()) == (got.status, b"") and got.status == 200
        assert head.getheader("content-type") == got.getheader("content-type")
    finally:
        conn.close()


def test_a_repeated_query_parameter_is_400_naming_it(loopback: Site) -> None:
    status, doc = loopback.call(None, "GET", "/v1/history?group=billing&group=aA")
    assert status == 400 and "'group' is given 2 times" in doc["error"], doc


@pytest.mark.parametrize(("query", "words"), [
    ("INSTALL httpfs", "not an INSTALL statement"),
    ("ATTACH 'x.db'", "not an ATTACH statement"),
    ("LOAD httpfs", "not a LOAD statement")])
def test_sql_names_the_statement_it_refuses(loopback: Site, query: str, words: str) -> None:
    status, doc = loopback.call(None, "POST", "/v1/sql", {"query": query})
    assert status == 400 and words in doc["error"], doc
