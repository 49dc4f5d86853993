"""A cluster whose shards are real `serve` processes: the CLI's `--cluster` and the Python
client's `open_cluster` route through them and merge their answers as one ledger answers (the
server's documents are the ones a shard opened from its root gives); one server down fails
fan-out reads naming it, `--partial` answers without it, and writes to the others go on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.cluster import Cluster, ShardsUnavailable, ShardUnavailable, shard_of
from server.client import open_cluster
from tests.cluster.conftest import (
    GROUPS,
    ClusterCli,
    Servers,
    command_stream,
    ndjson,
    without,
    write_cluster,
)
from tests.server.conftest import Server
from tests.support.cli import Cli, assert_one_line_error
from tests.support.clock import T0

PREFIX = "srv-"  # this module's groups and topics; other tests of the session use others
LINES = 300
END = T0 + 10 * LINES + 1


def _ours(doc: Any) -> Any:
    """The rows of this module's groups and topics."""
    return [d for d in doc if str(d.get("consumer_group") or d.get("topic")).startswith(PREFIX)]


class Fed:
    def __init__(self, servers: Servers, base: Path) -> None:
        self.lines = command_stream(21, LINES, prefix=PREFIX)
        self.one = Cli(base / "one")
        self.many = ClusterCli(servers.cluster)
        self.results = []
        for cli in (self.one, self.many):
            r = cli("apply", "-", input=ndjson(self.lines))
            assert r.exit_code == 0, r.stderr
            self.results.append([json.loads(line) for line in r.stdout.splitlines()])

    def both(self, *args: Any) -> tuple[Any, Any]:
        return self.one.json(*args), self.many.json(*args)


@pytest.fixture(scope="module")
def fed(served_cluster: Servers, tmp_path_factory: pytest.TempPathFactory) -> Fed:
    return Fed(served_cluster, tmp_path_factory.mktemp("fed"))


def test_apply_through_the_servers_answers_as_one_ledger(fed: Fed) -> None:
    one, many = fed.results
    assert without(many, "seq", "shard", "shards") == without(one, "seq")
    assert {r["shard"] for r in many if "shard" in r} == {0, 1, 2}


@pytest.mark.parametrize("args", [
    ("group", "list"),
    ("lag", "--at", str(END)),
    ("lag", "--at", str(END), "--summary"),
    ("lag", "--since", str(T0), "--until", str(END), "--every", "PT1S"),
    ("at", str(END)),
    ("queue", "list"),
    ("history", "--topic", f"{PREFIX}orders"),
    ("history", "--topic", f"{PREFIX}payments", "--limit", "9"),
], ids=" ".join)
def test_fan_out_reads_through_the_servers_answer_as_one_ledger(fed: Fed, args: tuple[str, ...]
                                                                ) -> None:
    one, many = fed.both(*args)
    assert without(_ours(many), "seq", "shard") == without(_ours(one), "seq")


@pytest.mark.parametrize("group", [GROUPS[0], GROUPS[7]])
def test_group_reads_through_the_servers_answer_as_one_ledger(fed: Fed, group: str) -> None:
    group = PREFIX + group  # billing, and %RETRY%billing (a `%` in a URL path)
    for args in (("lag", "--group", group, "--at", str(END)), ("at", str(END), "--group", group),
                 ("export", "--group", group), ("history", "--group", group),
                 ("generations", "--group", group), ("generations", "--group", group, "--topic",
                                                    f"{PREFIX}orders:0,1")):
        one, many = fed.both(*args)
        assert without(many, "seq", "shard") == without(one, "seq"), args


def test_sql_through_the_servers_runs_over_the_union(fed: Fed) -> None:
    query = ("SELECT kind, count(*) AS n, sum(\"offset\") AS s FROM events WHERE topic LIKE "
             f"'{PREFIX}%' GROUP BY kind ORDER BY kind")
    one, many = fed.both("sql", query)
    assert many == one


def test_the_client_routes_the_same_way(fed: Fed, served_cluster: Servers) -> None:
    with open_cluster(served_cluster.cluster) as cluster:
        assert _ours(cluster.groups()) == _ours(fed.many.json("group", "list"))
        assert _ours(cluster.state_at(ts=END)) == _ours(fed.many.json("at", str(END)))
        group = PREFIX + "my-group"
        assert cluster.lag(group=group, at_ms=END) == fed.many.json("lag", "--group", group,
                                                                     "--at", str(END))


def test_a_consumer_loop_through_the_router(served_cluster: Servers) -> None:
    with open_cluster(served_cluster.cluster) as c:
        c.submit_one({"op": "queue_append", "topic": "loop", "queue_id": 0, "count": 500})
        for g in ("loop-a", "loop-b", "loop-c"):
            c.submit_one({"op": "group_set", "group": g, "initial": "earliest"})
            p = c.pull(g, "loop", 0, client="w1", max=100)
            assert (p.next_offset, p.count) == (0, 100)
            assert c.commit(g, "loop", 0, 100, client="w1", generation=p.generation).accepted
        plan = c.run_reset({"op": "reset", "group": "loop-b", "topic": "loop", "to_offset": 40,
                            "execute": True, "reason": "replay"})
        assert plan.executed
        fenced = c.commit("loop-b", "loop", 0, 150, client="w1", generation=0)
        assert (fenced.accepted, fenced.reason) == (False, "fenced")
        assert c.pull("loop-b", "loop", 0, client="w1").next_offset == 40
        results = c.commands([{"op": "commit", "group": g, "topic": "loop", "queue_id": 0,
                               "offset": 120} for g in ("loop-a", "loop-c")] + [{"op": "x"}])
        assert [r.get("shard") for r in results[:2]] == [shard_of("loop-a", 3),
                                                         shard_of("loop-c", 3)]
        assert results[2]["error"].startswith("unknown op")
        assert {r["consumer_group"]: r["committed_offset"] for r in c.state_at(ts="now")
                if r["topic"] == "loop"} == {"loop-a": 120, "loop-b": 40, "loop-c": 120}


@pytest.fixture
def one_down(served_cluster: Servers, tmp_path: Path) -> Iterator[tuple[Path, Server]]:
    """A cluster of the session's shards 0 and 2 and a server of its own as shard 1, to kill."""
    doomed = Server(tmp_path / "shard-1")
    try:
        urls = [served_cluster.servers[0].url, doomed.url, served_cluster.servers[2].url]
        roots = [str(served_cluster.roots[0]), str(doomed.data), str(served_cluster.roots[2])]
        yield write_cluster(tmp_path / "cluster.toml", roots, urls), doomed
    finally:
        doomed.kill()


def test_a_server_down_fails_fan_out_reads_unless_partial(one_down: tuple[Path, Server]
                                                          ) -> None:
    file, doomed = one_down
    cli = ClusterCli(file)
    assert cli("commit", "--group", "down-a", "--topic", "down", "--queue", "0", "--offset",
               "1").exit_code == 0  # down-a lives on shard 1
    doomed.kill()
    assert_one_line_error(cli("group", "list"), 2, f"shard 1 ({doomed.url}) is unavailable",
                          "--partial")
    assert_one_line_error(cli("sql", "SELECT count(*) FROM offsets"), 2, "shard 1")
    assert_one_line_error(cli("lag", "--group", "down-a"), 2, "shard 1", doomed.url)
    r = ClusterCli(file, partial=True)("history", "--topic", "down", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.stderr.startswith(f"partial answer: shard 1 ({doomed.url}) is unavailable")
    # writes to the other shards go on; the down shard's are refused naming it
    r = cli("apply", "-", input=ndjson([
        {"op": "commit", "group": "down-b", "topic": "down", "queue_id": 0, "offset": 5},
        {"op": "commit", "group": "down-a", "topic": "down", "queue_id": 0, "offset": 5}]))
    first, second = (json.loads(line) for line in r.stdout.splitlines())
    assert first["accepted"] and first["shard"] == shard_of("down-b", 3) != 1
    assert second["shard"] == 1 and doomed.url in second["error"]
    with open_cluster(file, partial=True) as c:
        assert {g["consumer_group"] for g in c.groups()} >= {"down-b"}
        assert [e.spec.index for e in c.missing] == [1]
        with pytest.raises(ShardUnavailable, match="shard 1"):
            c.commit("down-a", "down", 0, 9)
    with open_cluster(file) as c, pytest.raises(ShardsUnavailable, match="--partial"):
        c.groups()


def test_a_cluster_with_served_shards_needs_a_client(served_cluster: Servers) -> None:
    with Cluster.open(served_cluster.cluster) as c, pytest.raises(Exception,
                                                                 match="open_cluster"):
        c.groups()
