"""`offset-ledger --cluster cluster.toml COMMAND` over shards opened from their roots: the same
stream of commands through a cluster of 3 and through one ledger answers the same, line by
line and read by read (merged as one ledger answers), while each group's events live on its
shard only and queue events on every shard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli import app
from ledger import Ledger
from ledger.cluster import shard_of
from tests.cluster.conftest import (
    GROUPS,
    ClusterCli,
    command_stream,
    ndjson,
    without,
    write_cluster,
)
from tests.support.cli import Cli, assert_one_line_error
from tests.support.clock import T0

SHARDS = 3
LINES = 400
#: Every time the stream's reads ask about: inside it, and after it.
AT = T0 + 10 * LINES // 2
END = T0 + 10 * LINES + 1


class Pair:
    """One ledger and a cluster of SHARDS, fed the same stream."""

    def __init__(self, base: Path, lines: list[dict[str, Any]]) -> None:
        self.base = base
        self.roots = [base / f"s{i}" for i in range(SHARDS)]
        self.one = Cli(base / "one")
        self.many = ClusterCli(write_cluster(base / "cluster.toml",
                                             [r.name for r in self.roots]))
        assert self.many("init", "--segment-events", "100").exit_code == 0
        self.one_results = self.apply(self.one, lines)
        self.many_results = self.apply(self.many, lines)

    @staticmethod
    def apply(cli: Cli | ClusterCli, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        r = cli("apply", "-", input=ndjson(lines))
        assert r.exit_code == 0, r.stderr
        return [json.loads(line) for line in r.stdout.splitlines()]

    def both(self, *args: Any) -> tuple[Any, Any]:
        return self.one.json(*args), self.many.json(*args)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    return Pair(tmp_path_factory.mktemp("pair"), command_stream(7, LINES))


def test_apply_answers_every_line_as_one_ledger_with_its_shard(pair: Pair) -> None:
    assert len(pair.many_results) == LINES
    assert without(pair.many_results, "seq", "shard", "shards") == \
        without(pair.one_results, "seq")
    for line, result in zip(command_stream(7, LINES), pair.many_results, strict=True):
        group = line.get("group")
        if "error" in result and "op" not in result:
            continue  # a line that could not be read reached no shard
        if group is None:
            assert result["shards"] == list(range(SHARDS))
        else:
            assert result["shard"] == shard_of(group, SHARDS)


def test_each_group_lives_on_its_shard_and_queues_on_every_shard(pair: Pair) -> None:
    for i, root in enumerate(pair.roots):
        with Ledger.open(root, readonly=True) as led:
            groups = {r["consumer_group"] for r in led.sql(
                "SELECT DISTINCT consumer_group FROM events WHERE consumer_group IS NOT NULL"
            ).to_pylist()}
            appends = led.sql("SELECT count(*) AS n FROM events WHERE kind = 'queue_append'"
                              ).to_pylist()[0]["n"]
        assert groups and all(shard_of(g, SHARDS) == i for g in groups), (i, groups)
        assert appends == sum(1 for line in command_stream(7, LINES)
                              if line["op"] == "queue_append")


@pytest.mark.parametrize("args", [
    ("group", "list"),
    ("lag", "--at", str(AT)),
    ("lag", "--at", str(END), "--window", "3", "--allowed-lag", "5"),
    ("lag", "--at", str(END), "--summary"),
    ("lag", "--topic", "orders:1", "--at", str(END)),
    ("lag", "--since", str(T0), "--until", str(END), "--every", "PT1S"),
    ("at", str(AT)),
    ("at", str(END)),
    ("queue", "list"),
    ("lookup", "--topic", "orders", "--datetime", str(T0)),
], ids=" ".join)
def test_a_fan_out_read_answers_as_one_ledger(pair: Pair, args: tuple[str, ...]) -> None:
    one, many = pair.both(*args)
    assert many == one


@pytest.mark.parametrize("args", [
    (),
    ("--limit", "7"),
    ("--limit", "0"),
    ("--topic", "payments", "--queue", "2"),
    ("--kind", "queue_append"),
    ("--kind", "reset", "--since", str(AT)),
    ("--until", str(AT), "--limit", "30"),
], ids=" ".join)
def test_history_of_every_group_is_merged_oldest_first(pair: Pair, args: tuple[str, ...]
                                                      ) -> None:
    one, many = pair.both("history", *args)
    assert without(many, "seq", "shard") == without(one, "seq")


@pytest.mark.parametrize("group", [GROUPS[1], GROUPS[0], GROUPS[3], GROUPS[7]])  # shards 0-2
def test_a_group_read_is_answered_by_its_shard_alone(pair: Pair, group: str) -> None:
    for args in (("progress", "--group", group), ("lag", "--group", group, "--at", str(END)),
                 ("at", str(END), "--group", group), ("export", "--group", group),
                 ("generations", "--group", group)):
        one, many = pair.both(*args)
        assert without(many, "lag_ms") == without(one, "lag_ms"), args  # progress: now
    one, many = pair.both("history", "--group", group)
    assert {e["shard"] for e in many} <= {shard_of(group, SHARDS)}
    assert without(many, "seq", "shard") == without(one, "seq")


@pytest.mark.parametrize("query", [
    "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY kind",
    "SELECT consumer_group, topic, queue_id, committed_offset, generation FROM offsets "
    "ORDER BY ALL",
    "SELECT * FROM queues ORDER BY ALL",
    "SELECT topic, count(*) AS appends, max(\"offset\") AS top FROM events_raw "
    "WHERE kind = 'queue_append' GROUP BY ALL ORDER BY ALL",
    "SELECT e.consumer_group, count(*) AS n FROM events e JOIN groups g "
    "ON e.consumer_group = g.consumer_group "
    "GROUP BY ALL ORDER BY n DESC, 1 LIMIT 3",
    "SELECT consumer_group, sum(lag) AS lag FROM progress GROUP BY ALL ORDER BY ALL",
    "WITH q AS (SELECT * FROM appends) SELECT count(*) AS n FROM q",
])
def test_sql_runs_over_the_union_of_the_shards_tables(pair: Pair, query: str) -> None:
    one, many = pair.both("sql", query)
    assert without(many, "shard") == one  # `SELECT *` shows the shard column too


def test_sql_tables_carry_their_shard(pair: Pair) -> None:
    rows = pair.many.json("sql", "SELECT shard, count(DISTINCT consumer_group) AS groups "
                                 "FROM offsets GROUP BY shard ORDER BY shard")
    assert [r["shard"] for r in rows] == [0, 1, 2]


def test_sql_over_a_cluster_refuses_lag_series_and_writes(pair: Pair) -> None:
    assert_one_line_error(pair.many("sql", "SELECT * FROM lag_series(0, 1, 1)"), 2,
                          "lag_series", "lag --since --until --every")
    assert_one_line_error(pair.many("sql", "DELETE FROM offsets"), 2, "read-only")


def test_reset_plans_and_executes_on_the_groups_shard(tmp_path: Path) -> None:
    pair = Pair(tmp_path, command_stream(11, 120))
    args = ("reset", "--group", "billing", "--topic", "orders", "--to-offset", "3")
    one, many = pair.both(*args)
    assert many == one and not many["executed"]
    one, many = pair.both(*args, "--execute", "--reason", "replay", "--actor", "alice")
    assert without(many, "seq") == without(one, "seq") and many["executed"]
    shard = shard_of("billing", SHARDS)
    with Ledger.open(pair.roots[shard], readonly=True) as led:
        assert {r["offset"] for r in led.sql(
            "SELECT \"offset\" FROM events WHERE kind = 'reset' AND actor = 'alice'"
        ).to_pylist()} == {3}


def test_syncs_and_imports_go_to_each_groups_shard(tmp_path: Path) -> None:
    pair = Pair(tmp_path, command_stream(3, 60))
    csv = tmp_path / "offsets.csv"
    csv.write_text("".join(f"{g},orders,{q},{10 + q}\n" for g in GROUPS for q in QUEUES_OF))
    one, many = pair.both("sync", "kafka-csv", str(csv), "--source", "dc3")
    assert many == one
    describe = tmp_path / "describe.txt"
    describe.write_text(
        "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG\n"
        + "".join(f"{g:<15} payments        {q}          {20 + q:<15} {300:<15} {280 - q}\n"
                  for g in ("billing", "g1", "my-group") for q in QUEUES_OF))
    one, many = pair.both("sync", "kafka-describe", str(describe))
    assert many == one and many["bounds_raised"] == 3 and many["changed"] == 9
    one, many = pair.both("group", "list")
    assert without(many, "last_update") == without(one, "last_update")  # synced now


QUEUES_OF = (0, 1, 2)


def test_one_shard_missing_fails_fan_out_reads_unless_partial(pair: Pair,
                                                             tmp_path: Path) -> None:
    roots = [str(r) for r in pair.roots]
    roots[1] = str(tmp_path / "gone")  # shard 1's disk is not there
    file = write_cluster(tmp_path / "cluster.toml", roots)
    assert_one_line_error(ClusterCli(file)("group", "list"), 2, "shard 1", "gone",
                          "is unavailable", "--partial")
    r = ClusterCli(file, partial=True)("group", "list", "--json")
    assert r.exit_code == 0, r.stderr
    assert "partial answer: shard 1" in r.stderr
    alive = {g for g in GROUPS if shard_of(g, SHARDS) != 1}
    assert {g["consumer_group"] for g in json.loads(r.stdout)} == alive & {
        g["consumer_group"] for g in pair.one.json("group", "list")}
    # a group on another shard is read as ever; one on shard 1 fails naming it
    assert ClusterCli(file)("progress", "--group", "my-group").exit_code == 0
    assert_one_line_error(ClusterCli(file)("progress", "--group", "billing"), 2, "shard 1",
                          "no ledger at")


def test_writes_to_the_other_shards_go_on_while_one_is_missing(tmp_path: Path) -> None:
    pair = Pair(tmp_path, command_stream(5, 40))
    pair.roots[1].rename(tmp_path / "away")
    lines = [{"op": "commit", "group": g, "topic": "orders", "queue_id": 0, "offset": 99}
             for g in ("my-group", "billing", "g1")]
    lines.append({"op": "queue_append", "topic": "orders", "queue_id": 0, "count": 1})
    results = pair.apply(pair.many, lines)
    assert results[0]["shard"] == 0 and "error" not in results[0]
    assert "shard 1" in results[1]["error"] and "is unavailable" in results[1]["error"]
    assert results[2]["shard"] == 2 and "error" not in results[2]
    assert "written to shards 0, 2 only" in results[3]["error"]
    assert "queue_bounds" in results[3]["error"]
    assert_one_line_error(pair.many("commit", "--group", "billing", "--topic", "orders",
                                    "--queue", "0", "--offset", "99"), 2, "shard 1")


@pytest.mark.parametrize("args", [
    ("serve",), ("rebuild",), ("verify",), ("demo",),
    ("token", "add", "x", "--role", "audit"),  # replay and audit: tests/spark/test_shards.py
    ("follow", "kafka", "--bootstrap-server", "127.0.0.1:1"),
], ids=" ".join)
def test_commands_of_one_data_directory_refuse_a_cluster(pair: Pair, args: tuple[str, ...]
                                                        ) -> None:
    r = pair.many(*args)
    expected = {"demo": "--cluster", "follow": "one ledger"}.get(args[0], "one data directory")
    assert_one_line_error(r, 2, expected)


def test_a_cluster_and_a_data_dir_are_not_both_given(pair: Pair) -> None:
    r = pair.many.runner.invoke(app, ["--data-dir", "x", "--cluster", str(pair.many.cluster),
                                      "group", "list"])
    assert_one_line_error(r, 2, "either --data-dir or --cluster")
    r = pair.one.runner.invoke(app, ["--partial", "group", "list"])
    assert_one_line_error(r, 2, "--partial", "needs --cluster")


def test_writes_need_the_shards_made_by_init(tmp_path: Path) -> None:
    cli = ClusterCli(write_cluster(tmp_path / "cluster.toml", ["a", "b"]))
    assert_one_line_error(cli("queue", "append", "--topic", "t", "--queue", "0"), 2,
                          "no ledger at", "init")
    assert not (tmp_path / "a").exists()
    assert [s["shard"] for s in cli.json("init")] == [0, 1]
    assert cli.json("queue", "append", "--topic", "t", "--queue", "0")["max_offset"] == 1
    retention = cli.json("retention")
    assert [r["shard"] for r in retention] == [0, 1]
