"""Spark audit of 8 shard roots on a standalone cluster against `local[2]`, start-up and work
apart.

Why: on a cluster a Spark job pays more before it does anything (a driver that registers with a
Master, executors that Workers launch, Python workers per executor) and ships its tasks and
results over sockets; these figures say how much, and whether the work itself is slower than in
one JVM on the same 2 cores. Both runs audit the same 8 roots as one dataset (one read of every
manifest's files, rows tagged with their shard) in a fresh driver process each, so both pay a
JVM start:
- `startup_s`: driver process start to a SparkSession whose executors ran a first task;
- `work_s`: the audit itself (`spark_compaction.audit` over the 8 roots; its own split as
  `audit_seconds`: view export on the driver, setup, replay, anomalies, seqs).
The standalone cluster (a Master and two Workers of one core and 1 GB, as the tests start it) is
started before and stopped after, its own start-up reported as `cluster_start_s`.

The shards hold the pinned bench workload (`bench.workload.generate`), each group's commands
on shard `abs(java_string_hash(group)) % 8` and queue commands on every shard.

Run: `python -m bench.spark_cluster_bench [--commands N] [--out FILE]`; prints JSON and writes
it to `bench/results/spark-cluster-latest.json`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.workload import generate
from ledger import Ledger
from ledger.cluster.placement import shard_of
from tests.support.spark_cluster import cluster_env, start_cluster

SHARDS = 8
COMMANDS_DEFAULT = 400_000
BATCH = 8_192
#: Events per sealed segment: most of each shard is Parquet the executors read, a small tail
#: is decoded on the driver (the default 1M would leave every shard in its WAL tail).
SEGMENT_EVENTS = 4_096
RESULTS = Path(__file__).resolve().parent / "results" / "spark-cluster-latest.json"

DRIVER = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    from spark_compaction import audit
    from spark_compaction.session import spark_session
    spark = spark_session(sys.argv[1])
    spark.range(4).count()  # executors up and a task run
    t1 = time.perf_counter()
    result = audit(json.loads(sys.argv[2]), master=sys.argv[1])
    t2 = time.perf_counter()
    print(json.dumps({"startup_s": round(t1 - t0, 3), "work_s": round(t2 - t1, 3),
                      "audit_seconds": result["seconds"], "clean": result["clean"],
                      "events": sum(s["seq_to"] - s["seq_from"]
                                    for s in result["checked"]["shards"]),
                      "keys": result["checked"]["replay_keys"]}))
""")


def build_shards(base: Path, commands: int) -> list[Path]:
    """The workload spread over `SHARDS` roots as a cluster places it."""
    roots = [base / f"shard-{i}" for i in range(SHARDS)]
    pending: list[list[dict]] = [[] for _ in roots]
    ledgers = [Ledger.open(r, durability="none", segment_events_max=SEGMENT_EVENTS)
               for r in roots]
    try:
        def flush(i: int) -> None:
            list(ledgers[i].apply(pending[i]))
            pending[i].clear()

        for cmd in generate(commands):
            group = cmd.get("group")
            targets = range(SHARDS) if group is None else (shard_of(group, SHARDS),)
            for i in targets:
                pending[i].append(cmd)
                if len(pending[i]) >= BATCH:
                    flush(i)
        for i in range(SHARDS):
            flush(i)
    finally:
        for led in ledgers:
            led.close()
    return roots


def audit_run(master: str, roots: list[Path]) -> dict[str, Any]:
    """One audit in a fresh driver process; its start-up and work times."""
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, master, json.dumps([str(r) for r in roots])],
        env=cluster_env(), capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"audit on {master} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = round(time.perf_counter() - t, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=COMMANDS_DEFAULT)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spark-cluster-bench-") as tmp:
        base = Path(tmp)
        t = time.perf_counter()
        roots = build_shards(base / "shards", args.commands)
        built_s = round(time.perf_counter() - t, 3)
        local = audit_run("local[2]", roots)
        cluster = start_cluster(base / "standalone", workers=2, cores=1, memory="1g")
        try:
            standalone = audit_run(cluster.master_url, roots)
        finally:
            cluster.stop()
    doc = {
        "bench": "spark_audit_8_shards", "shards": SHARDS, "commands": args.commands,
        "events": local["events"], "build_s": built_s, "cluster_start_s": cluster.started_s,
        "local": local, "standalone": standalone,
        "ratio_startup": round(standalone["startup_s"] / local["startup_s"], 2),
        "ratio_work": round(standalone["work_s"] / local["work_s"], 2),
        "ratio_total": round((standalone["startup_s"] + standalone["work_s"])
                             / (local["startup_s"] + local["work_s"]), 2),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
