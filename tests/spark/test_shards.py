"""The Spark jobs over several roots (a cluster's shards) as one dataset, on the local session:
replay and audit answer as DuckDB does over the same roots (the union of the shards' answers),
each row in one read and tagged with its shard; findings name their shard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli import invoke
from ledger import Ledger
from ledger.errors import InvalidInput
from ledger.fold.events import Commit
from spark_compaction import audit, replay
from spark_compaction.session import read_events, snapshots
from tests.spark.conftest import KEY, append_raw, duckdb_counts, duckdb_state, shard_of, sharded_ledgers

pytestmark = pytest.mark.spark

SHARDS = 3


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> tuple[list[Path], list[int]]:
    # a space and a plus in the paths: Spark escapes them in a row's file path
    return sharded_ledgers(tmp_path_factory.mktemp("shards") / "a b+c", SHARDS, commands=400,
                           seed=11)


def test_one_read_tags_each_row_with_its_shard(spark, shards):
    roots, _ = shards
    df = read_events(roots)
    counts = {r["shard"]: r["n"] for r in
              df.groupBy("shard").count().withColumnRenamed("count", "n").collect()}
    expected = {}
    for i, root in enumerate(roots):
        with Ledger.open(root, readonly=True) as led:
            expected[i] = led.log.next_seq - led.log.start_seq
    assert counts == expected
    groups = df.where("consumer_group IS NOT NULL").select("shard", "consumer_group").distinct()
    assert all(shard_of(r["consumer_group"], SHARDS) == r["shard"] for r in groups.collect())
    # one scan of every manifest's files, not a union of per-root reads
    assert df._jdf.queryExecution().executedPlan().toString().count("FileScan parquet") == 1
    assert snapshots(roots)[2].shard == 2


def test_replay_over_shards_equals_duckdb(spark, shards):
    roots, times = shards
    for ts in (times[50], times[len(times) // 2], times[-1]):
        assert replay(roots, at_ts=ts) == duckdb_state(roots, ts), ts
    group = "GID_app-00"  # a broadcast group, on its own shard
    assert replay(roots, at_ts=times[-1], group=group) == [
        r for r in duckdb_state(roots, times[-1]) if r["consumer_group"] == group]


def test_replay_at_a_seq_needs_one_root(spark, shards):
    roots, _ = shards
    with pytest.raises(InvalidInput, match="seq 40 needs one root"):
        replay(roots, at_seq=40)
    with pytest.raises(InvalidInput, match="named twice"):
        replay([roots[0], roots[0]], at_ts=0)


def test_cli_replay_and_audit_over_roots(spark, shards, capsys, tmp_path):
    roots, times = shards
    args = [a for r in roots for a in ("--root", str(r))]
    assert invoke(["replay", "--at", str(times[-1]), *args, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(rows, key=lambda r: tuple(r[c] for c in KEY)) == duckdb_state(roots, times[-1])
    cluster = tmp_path / "cluster.toml"  # the same roots, as a cluster file lists its shards
    cluster.write_text("".join(f'[[shard]]\nroot = "{r}"\n' for r in roots))
    assert invoke(["--cluster", str(cluster), "audit", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["clean"] and out["roots"] == [str(r) for r in roots]
    assert [s["shard"] for s in out["checked"]["shards"]] == list(range(SHARDS))


def test_audit_of_shards_is_clean_and_counts_each_shard(spark, shards, tmp_path):
    roots, _ = shards
    result = audit(roots, report=tmp_path / "report.html")
    assert result["clean"], result["findings"][:5]
    keys, resets = duckdb_counts(roots)
    assert result["checked"]["view_keys"] == result["checked"]["replay_keys"] == keys
    assert result["resets_total"] == resets > 0
    for r in result["resets"]:
        assert shard_of(r["consumer_group"], SHARDS) == r["shard"]
    page = (tmp_path / "report.html").read_text()
    assert "shard 2: " in page and "class='chart lag-chart'" in page


def test_audit_names_the_shard_of_a_finding(spark, tmp_path):
    roots, times = sharded_ledgers(tmp_path, SHARDS, commands=150, seed=5)
    group = next(g for g in (f"GID_app-{i:02d}" for i in range(24)) if shard_of(g, SHARDS) == 1)
    with Ledger.open(roots[1], readonly=True) as led:
        committed = {(r["topic"], r["queue_id"]): r["committed_offset"]
                     for r in led.state_at(ts=times[-1]).to_pylist()
                     if r["consumer_group"] == group}
    (topic, queue), value = next((k, v) for k, v in committed.items() if v and v > 0)
    append_raw(roots[1], [  # a commit, then one below it with no reset between
        Commit(ts=times[-1] + 1, consumer_group=group, topic=topic, queue_id=queue,
               offset=value + 5, generation=0, client_id=None),
        Commit(ts=times[-1] + 2, consumer_group=group, topic=topic, queue_id=queue,
               offset=value - 1, generation=0, client_id=None)])
    with Ledger.open(roots[1]):  # the view catches up with the planted events
        pass
    result = audit(roots)
    regressions = [f for f in result["findings"] if f["kind"] == "commit_regression"]
    assert [(f["shard"], f["consumer_group"], f["offset"]) for f in regressions] == [
        (1, group, value - 1)]
    assert regressions[0]["message"].startswith(f"shard 1: {group} {topic}:{queue}")
    mismatches = [f for f in result["findings"] if f["kind"] == "view_mismatch"]
    assert {f["shard"] for f in mismatches} <= {1}
