"""compact, replay and audit with `--master spark://...` on a real standalone cluster (a Master
and two Workers of one core, `spark_cluster`), over 8 shard roots: the answers equal DuckDB's
over the same roots.

The three commands run through the CLI in one driver process (`cli.invoke`, the session reused
between them, as a script would), so the suite pays the driver's start once; the pytest process
keeps its own local session for the other tests (one JVM holds one master).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ledger import Ledger
from spark_compaction.session import driver_host
from tests.spark.conftest import KEY, duckdb_counts, duckdb_state, shard_of, sharded_ledgers
from tests.support.spark_cluster import StandaloneCluster

pytestmark = pytest.mark.spark

SHARDS = 8

DRIVER = textwrap.dedent("""
    import contextlib, io, json, sys, time
    from cli import invoke
    steps, out = json.loads(sys.argv[1]), []
    for args in steps:
        buf, err, t = io.StringIO(), io.StringIO(), time.perf_counter()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            code = invoke(args)
        out.append({"code": code, "stdout": buf.getvalue(), "stderr": err.getvalue(),
                    "seconds": round(time.perf_counter() - t, 3)})
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)
""")


def run_driver(cluster: StandaloneCluster, steps: list[list[str]], result: Path) -> list[dict]:
    """The CLI commands `steps` in one driver process against the cluster."""
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(steps), str(result)],
                          env=cluster.env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(result.read_text())


@pytest.fixture(scope="module")
def cluster_run(spark_cluster, tmp_path_factory) -> dict[str, Any]:
    """8 shard roots; DuckDB's answers before; then compact, replay and audit over all of them
    on the cluster, in that order."""
    base = tmp_path_factory.mktemp("cluster")
    roots, times = sharded_ledgers(base, SHARDS, commands=500, seed=26, segment_events_max=40)
    at = times[len(times) * 2 // 3]
    segments = []
    for root in roots:
        with Ledger.open(root, readonly=True) as led:
            segments.append(len(led.log.segments()))
    assert min(segments) >= 2, segments  # every shard has segments to merge
    before = {"state_at": duckdb_state(roots, at), "state_end": duckdb_state(roots, times[-1]),
              "counts": duckdb_counts(roots), "segments": segments, "end_ts": times[-1]}
    master = ["--master", spark_cluster.master_url]
    each = [a for r in roots for a in ("--root", str(r))]
    steps = [
        ["compact", *each, "--target-events", "400", *master, "--json"],
        ["replay", "--at", str(at), *each, *master, "--json"],
        ["audit", *each, *master, "--json"],
    ]
    out = run_driver(spark_cluster, steps, base / "driver.json")
    return {"roots": roots, "before": before, "out": out, "cluster": spark_cluster}


def test_the_jobs_ran_on_the_cluster_workers(cluster_run):
    cluster = cluster_run["cluster"]
    assert [o["code"] for o in cluster_run["out"]] == [0, 0, 0], cluster_run["out"]
    for i in range(2):  # each Worker launched an executor of the driver's application,
        log = (cluster.workdir / f"worker-{i}.log").read_text()  # which called the driver back
        assert "Asked to launch executor" in log
        assert "CoarseGrainedScheduler@127.0.0.1:" in log  # at the address the master sees
    assert "Registered app offset-ledger" in (cluster.workdir / "master.log").read_text()


def test_compact_on_the_cluster_merges_every_shard_and_keeps_every_event(cluster_run):
    compacted = json.loads(cluster_run["out"][0]["stdout"])
    roots, before = cluster_run["roots"], cluster_run["before"]
    assert [r["root"] for r in compacted["roots"]] == [str(r) for r in roots]
    for result, segments in zip(compacted["roots"], before["segments"], strict=True):
        assert result["runs"] and result["segments_after"] < result["segments_before"] == segments
    assert duckdb_state(roots, before["end_ts"]) == before["state_end"]  # DuckDB reads them
    assert duckdb_counts(roots) == before["counts"]


def test_replay_on_the_cluster_equals_duckdb_over_the_shards(cluster_run):
    rows = json.loads(cluster_run["out"][1]["stdout"])
    assert sorted(rows, key=lambda r: tuple(r[c] for c in KEY)) == cluster_run["before"]["state_at"]
    assert {shard_of(r["consumer_group"], SHARDS) for r in rows} == set(range(SHARDS))


def test_audit_on_the_cluster_is_clean_and_counts_what_duckdb_counts(cluster_run):
    # the audit's full replay of every shard equals its DuckDB view
    result = json.loads(cluster_run["out"][2]["stdout"])
    keys, resets = cluster_run["before"]["counts"]
    assert result["clean"], result["findings"][:5]
    assert result["checked"]["view_keys"] == result["checked"]["replay_keys"] == keys
    assert result["resets_total"] == resets
    assert [s["shard"] for s in result["checked"]["shards"]] == list(range(SHARDS))
    assert {r["shard"] for r in result["resets"]} <= set(range(SHARDS))


def test_the_driver_binds_to_its_address_on_the_route_to_the_master():
    assert driver_host("local[2]") == "127.0.0.1"
    assert driver_host("spark://127.0.0.1:7077") == "127.0.0.1"
    assert driver_host("spark://localhost:7077,127.0.0.2:7077") in ("127.0.0.1", "::1")
    assert driver_host("spark://no-such-host.invalid:7077") is None  # Spark's own choice
    assert driver_host("yarn") is None
