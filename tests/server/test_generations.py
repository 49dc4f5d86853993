"""The consumer's cheap periodic question, `POST /v1/groups/{group}/generations`, against a real
serve process with tokens: who may ask (the consume role of the group, audit), what it answers,
bad bodies; the client's batched pulls and commits (typed, a forbidden group raised); and the
refused-commit counter on /metrics (refusals append nothing to the log)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from server.client import BadRequest, Forbidden, LedgerClient
from tests.server.conftest import Server, add_token, commits_refused, raw

G, OTHER, T = "billing-kafka", "ads", "orders"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str]]]:
    root = tmp_path_factory.mktemp("generations")
    tokens_file = root / "tokens.toml"
    tokens = {name: add_token(tokens_file, name, *roles, groups=groups) for name, roles, groups
              in (("worker", ("consume",), ("billing-*",)), ("ads-worker", ("consume",), (OTHER,)),
                  ("producer", ("produce",), ()), ("ops", ("operate",), ()),
                  ("auditor", ("audit",), ()))}
    s = Server(root / "data", "--tokens", str(tokens_file))
    try:
        with s.client(tokens["producer"]) as c:
            for q in range(3):
                c.request("POST", "/v1/queues/append", {"topic": T, "queue": q, "count": 100})
        with s.client(tokens["ops"]) as c:
            c.request("PUT", f"/v1/groups/{G}", {"initial": "earliest"})
        yield s, tokens
    finally:
        s.kill()


def _client(served: tuple[Server, dict[str, str]], who: str) -> LedgerClient:
    return served[0].client(served[1][who])


def test_generations_answer_each_queue_asked_with_its_owner_and_a_pending_reset(
        served: tuple[Server, dict[str, str]]) -> None:
    with _client(served, "worker") as c, _client(served, "ops") as ops:
        pulls = c.pulls(G, [(T, 0), (T, 1)], client="k1", max=0)
        assert [(p.next_offset, p.generation, p.count) for p in pulls] == [(0, 0, 0), (0, 0, 0)]
        [done] = c.commits(G, [(T, 1, 40, 0)], client="k1", owner_only=True)
        assert done.accepted
        ops.reset(G, topic=T, queue_id=1, to_offset=10, execute=True, reason="replay")
        rows = c.generations(G, [(T, 1), (T, 0), (T, 2)])
        assert [(r.queue_id, r.generation, r.pending, r.committed_offset, r.last_client)
                for r in rows] == [(1, 1, True, 10, "k1"), (0, 0, False, 0, "k1"),
                                   (2, 0, False, None, None)]
        assert [r.queue_id for r in c.generations(G)] == [0, 1]  # every queue of the group
        [again] = c.pulls(G, [(T, 1)], client="k1", max=0)
        assert (again.next_offset, again.generation) == (10, 1)
        assert not c.generations(G, [(T, 1)])[0].pending


def test_generations_are_for_the_groups_consumers_and_auditors_only(
        served: tuple[Server, dict[str, str]]) -> None:
    server, tokens = served
    body = b'{"queues": [{"topic": "orders", "queue_id": 0}]}'
    for who, status in (("worker", 200), ("auditor", 200), ("ads-worker", 403),
                        ("producer", 403), ("ops", 403)):
        got, doc = raw(server, "POST", f"/v1/groups/{G}/generations", body,
                       {"Authorization": f"Bearer {tokens[who]}",
                        "Content-Type": "application/json"})
        assert got == status, (who, doc)
    with _client(served, "ads-worker") as c:
        with pytest.raises(Forbidden, match="ads-worker may not read group"):
            c.generations(G, [(T, 0)])
        with pytest.raises(Forbidden, match="ads-worker may not pull group"):
            c.pulls(G, [(T, 0)], client="k9", max=0)
        with pytest.raises(Forbidden, match="ads-worker may not commit group"):
            c.commits(G, [(T, 0, 1, 0)], client="k9")


@pytest.mark.parametrize(("body", "message"), [
    (b'{"queues": [{"topic": "orders"}]}', "queue_id"),
    (b'{"queues": [{"topic": "orders", "queue_id": -1}]}', ">= 0"),
    (b'{"queues": [{"topic": "a b", "queue_id": 0}]}', "invalid topic 'a b'"),
    (b'{"partitions": []}', "partitions"),
    (b"[1", "generations takes"),
])
def test_a_bad_generations_body_is_400_naming_what_is_wrong(
        served: tuple[Server, dict[str, str]], body: bytes, message: str) -> None:
    server, tokens = served
    before = server.next_seq()
    status, doc = raw(server, "POST", f"/v1/groups/{G}/generations", body,
                      {"Authorization": f"Bearer {tokens['worker']}",
                       "Content-Type": "application/json"})
    assert status == 400 and message in doc["error"], doc
    assert server.next_seq() == before
    with _client(served, "worker") as c, pytest.raises(BadRequest, match="invalid topic"):
        c.generations(G, [("a b", 0)])


def test_refused_commits_are_counted_per_group_and_reason_on_metrics(
        served: tuple[Server, dict[str, str]]) -> None:
    server, audit = served[0], served[1]["auditor"]
    before = {r: commits_refused(server, G, r, audit) for r in ("fenced", "stale")}
    with _client(served, "worker") as c:
        c.pulls(G, [(T, 2)], client="owner", max=0)
        results = c.commits(G, [(T, 2, 5, 0), (T, 2, 6, 0), (T, 2, 3, 0)], client="zombie",
                            owner_only=True)
        assert [r.reason for r in results] == ["fenced", "fenced", "fenced"]
        assert [r.reason for r in c.commits(G, [(T, 2, 7, 0), (T, 2, 2, 0)], client="owner",
                                            owner_only=True)] == [None, "stale"]
    assert commits_refused(server, G, "fenced", audit) - before["fenced"] == 3
    assert commits_refused(server, G, "stale", audit) - before["stale"] == 1
