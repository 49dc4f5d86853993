"""sync (RocketMQ consumerOffset.json as brokers write it, Kafka CSV) and apply (NDJSON)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger import InvalidInput
from ledger.importers.kafka_csv import parse_kafka_csv
from ledger.importers.rocketmq_offsets import parse_rocketmq_offsets, quote_bare_keys
from tests.cli.conftest import G, T
from tests.support.cli import Cli, assert_one_line_error

# fastjson's pretty output: unquoted integer queue ids, tabs, a retry topic, a broadcast group
FASTJSON = """{
\t"dataVersion":{
\t\t"counter":3,
\t\t"timestamp":1700000000000
\t},
\t"offsetTable":{
\t\t"T1@G1":{0:250,1:248
\t\t},
\t\t"%RETRY%G1@G1":{0:0
\t\t},
\t\t"T1@B1@broadcast":{3:17
\t\t}
\t}
}
"""


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_quote_bare_keys_touches_only_keys_outside_strings() -> None:
    raw = b'{"a,1:b":{0:1, 12 :2},"n":[1,2],"s":"{3:4}"}'
    assert quote_bare_keys(raw) == b'{"a,1:b":{"0":1, "12" :2},"n":[1,2],"s":"{3:4}"}'


def test_sync_rocketmq_fastjson_file(cli: Cli, tmp_path: Path) -> None:
    path = _write(tmp_path, "consumerOffset.json", FASTJSON)
    changes = cli.json("sync", "rocketmq", path, "--source", "broker-a")
    assert changes == [
        {"consumer_group": "G1", "topic": "T1", "queue_id": 0, "from_offset": None,
         "to_offset": 250},
        {"consumer_group": "G1", "topic": "T1", "queue_id": 1, "from_offset": None,
         "to_offset": 248},
        {"consumer_group": "G1", "topic": "%RETRY%G1", "queue_id": 0, "from_offset": None,
         "to_offset": 0},
        {"consumer_group": "B1", "topic": "T1", "queue_id": 3, "from_offset": None,
         "to_offset": 17},
    ]
    modes = {g["consumer_group"]: g["mode"] for g in cli.json("group", "list")}
    assert modes == {"B1": "broadcast", "G1": "clustering"}
    syncs = cli.json("history", "--kind", "sync", "--group", "G1")
    assert {e["actor"] for e in syncs} == {"sync:broker-a"}
    # a second sync of the same snapshot changes nothing and appends nothing
    before = cli.events()
    assert cli.json("sync", "rocketmq", path) == []
    assert cli.events() == before
    # a newer snapshot with quoted keys records from -> to
    newer = FASTJSON.replace("{0:250,1:248", '{"0":260,"1":248')
    assert cli.json("sync", "rocketmq", _write(tmp_path, "newer.json", newer)) == [
        {"consumer_group": "G1", "topic": "T1", "queue_id": 0, "from_offset": 250,
         "to_offset": 260}]


@pytest.mark.parametrize(("broken", "fragments"), [
    (FASTJSON.replace("1:248", "1:-248"), ["line 7", "'T1@G1'", "'1'", "-248"]),
    (FASTJSON.replace("1:248", "1:abc"), ["line 7"]),
    (FASTJSON.replace("{0:0", "{x:0"), ["line 9"]),
    (FASTJSON.replace('"T1@G1"', '"T1-G1"'), ["line 7", "'T1-G1'", "topic@group"]),
    (FASTJSON.replace("{3:17", '{3:"17"'), ["line 11", "'T1@B1@broadcast'", "'17'"]),
    (FASTJSON.replace('"offsetTable"', '"offsets"'), ["offsetTable"]),
    ("", ["empty"]),
])
def test_a_corrupt_consumer_offset_file_appends_nothing_and_names_the_fault(
        committed: Cli, tmp_path: Path, broken: str, fragments: list[str]) -> None:
    before = committed.events()
    assert_one_line_error(committed("sync", "rocketmq", _write(tmp_path, "bad.json", broken), "--json"),
                 2, *fragments)
    assert committed.events() == before


def test_parse_rocketmq_returns_rows_and_broadcast_groups() -> None:
    snap = parse_rocketmq_offsets(FASTJSON)
    assert snap.rows[0] == ("G1", "T1", 0, 250)
    assert snap.broadcast_groups == ("B1",)
    assert snap.data_version == {"counter": 3, "timestamp": 1700000000000}


def test_sync_kafka_csv(committed: Cli, tmp_path: Path) -> None:
    path = _write(tmp_path, "offsets.csv", f"{T},0,150\n{T},1,100\n")
    assert committed.json("sync", "kafka-csv", path, "--group", G) == [
        {"consumer_group": G, "topic": T, "queue_id": 0, "from_offset": 100, "to_offset": 150}]
    four = _write(tmp_path, "four.csv", f"other,{T},0,7\n")
    assert committed.json("sync", "kafka-csv", four)[0]["consumer_group"] == "other"


@pytest.mark.parametrize(("text", "fragments"), [
    (f"{T},0,5\n{T},1\n", ["line 2", "2 fields"]),
    (f"{T},0,5\n{T},x,5\n", ["line 2", "'x'"]),
    (f"{T},0,-5\n", ["line 1", "'-5'"]),
])
def test_a_malformed_kafka_csv_names_the_line(committed: Cli, tmp_path: Path, text: str,
                                              fragments: list[str]) -> None:
    before = committed.events()
    assert_one_line_error(committed("sync", "kafka-csv", _write(tmp_path, "bad.csv", text), "--group", G),
                 2, *fragments)
    assert committed.events() == before


def test_kafka_csv_without_group_needs_one() -> None:
    with pytest.raises(InvalidInput, match="line 1"):
        parse_kafka_csv(f"{T},0,5\n")


def test_apply_one_result_per_line_malformed_lines_get_their_own_error(
        committed: Cli, tmp_path: Path) -> None:
    lines = [
        {"op": "commit", "group": G, "topic": T, "queue_id": 0, "offset": 120},
        "{not json",
        {"op": "commit", "group": G, "topic": T, "queue_id": 0, "offset": 110},
        {"op": "fly", "group": G},
        {"op": "commit", "group": G, "topic": T, "queue_id": 1, "offset": -1},
        {"op": "reset", "group": G, "topic": T, "queue_id": 1, "to_offset": 10, "execute": True},
        {"op": "pull", "group": G, "topic": T, "queue_id": 1, "client": "c2", "max": 5},
    ]
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    before = committed.events()
    r = committed("apply", _write(tmp_path, "cmds.ndjson", text))
    assert r.exit_code == 0, r.stderr
    results = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["line"] for x in results] == list(range(1, 8))
    assert [("error" in x) for x in results] == [False, True, True, True, True, False, False]
    assert "line 2" in results[1]["error"]
    assert results[2]["reason"] == "stale" and results[2]["accepted"] is False
    assert "unknown op" in results[3]["error"]
    assert "invalid offset -1" in results[4]["error"]
    assert results[5]["executed"] is True
    assert results[5]["plan"][0]["to_offset"] == 10
    assert (results[6]["next_offset"], results[6]["generation"]) == (10, 1)
    # the good lines appended their events, the bad ones nothing
    appended = committed.json("sql", f"SELECT kind FROM events WHERE seq >= {before} ORDER BY seq")
    assert [e["kind"] for e in appended] == ["commit", "reset", "pull"]
    assert committed.json("progress", "--group", G)[0]["committed_offset"] == 120
    assert "applied 7 line(s), 4 with an error" in r.stderr


def test_apply_from_stdin_prints_ndjson_even_without_json(committed: Cli) -> None:
    text = json.dumps({"op": "queue_append", "topic": T, "queue_id": 5, "count": 3}) + "\n\n"
    r = committed("apply", input=text)
    assert r.exit_code == 0
    results = [json.loads(x) for x in r.stdout.splitlines()]
    assert results[0]["max_offset"] == 3
    assert results[1] == {"line": 2}  # a blank line: nothing to do, and no error


def test_apply_of_a_missing_file_is_exit_2(committed: Cli) -> None:
    before = committed.events()
    assert_one_line_error(committed("apply", "/nonexistent/cmds.ndjson"), 2, "/nonexistent/cmds.ndjson")
    assert committed.events() == before


def test_apply_of_a_parquet_table_prints_what_the_ndjson_form_prints(tmp_path: Path) -> None:
    """The same commands as NDJSON and as a Parquet table (column-wise): the same results."""
    import pyarrow.parquet as pq

    from bench.workload import commands_table

    table = commands_table(3_000, seed=11, groups=4, topics=2, queues=2)
    lines = [{k: v for k, v in row.items() if v is not None} for row in table.to_pylist()]
    pq.write_table(table, tmp_path / "cmds.parquet")
    ndjson = _write(tmp_path, "cmds.ndjson", "".join(json.dumps(x) + "\n" for x in lines))
    by_lines = Cli(tmp_path / "a")("apply", ndjson)
    by_table = Cli(tmp_path / "b")("apply", str(tmp_path / "cmds.parquet"))
    assert by_lines.exit_code == by_table.exit_code == 0, by_table.stderr
    assert by_table.stdout == by_lines.stdout
    assert len(by_table.stdout.splitlines()) == 3_000
    assert "applied 3000 line(s)" in by_table.stderr


def test_apply_of_an_unreadable_parquet_file_is_exit_2(committed: Cli, tmp_path: Path) -> None:
    before = committed.events()
    bad = _write(tmp_path, "cmds.parquet", "not parquet at all\n")
    assert_one_line_error(committed("apply", bad), 2, "unreadable Parquet file", "cmds.parquet")
    assert committed.events() == before
