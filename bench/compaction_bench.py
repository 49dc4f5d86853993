"""Benchmark of Spark compaction (`spark_compaction.compact`) against DuckDB doing the same merge.

Why: compaction trades a JVM start and a sort for fewer, better-compressed segments; these
figures say what it costs (events/s on local[2]), what it buys (bytes/event, per-group history
query time before and after) and where Spark's fixed start-up cost stops mattering, next to
DuckDB's `COPY (SELECT ... ORDER BY ...) TO parquet` of the same runs in the same order. Both
orders of rows inside a row group are measured (`--order seq|key` of `compact`): seq (the
default) for bytes, key for per-group history reads; `spark` holds the default order's timings.

Events are synthetic Arrow batches shaped like the ledger's (the pinned bench shape: 200 groups x
10 topics x 8 queues chosen uniformly; pulls and commits alternate, commits advancing their key by
1-32, pulls 32 ahead; ~1% queue appends, a few resets), written through `storage.SegmentedLog`
with `segment_events_max` = events / segments, so every append seals one segment.

Run: `python -m bench.compaction_bench [--events N] [--segments S] [--quick] [--out FILE]`;
prints JSON. `--quick` (1M events in 10 segments) is what `make bench` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from bench.workload import Shape
from ledger.fold.events import EVENT_SCHEMA
from ledger.store.writer import CLUSTER_COLUMNS
from storage import LogSettings, SegmentedLog

SEED = 20_251_122
T0_MS = 1_700_000_000_000
EVENTS_PER_MS = 10
P_APPEND = 0.01
P_RESET = 1e-5
HISTORY_GROUP = 7  # the group whose history is timed
QUERY_REPEAT = 3
MASTER = "local[2]"
#: Row groups of the clustered layout (the ledger's sealing, `LogSettings`).
CLUSTER_ROW_GROUP_EVENTS = LogSettings().cluster_row_group_events
#: Below this share of the total, Spark's start-up no longer matters.
STARTUP_SHARE = 0.10
WARMUP_EVENTS = 50_000


def synthetic_batches(events: int, batch_rows: int, seed: int = SEED,
                      shape: Shape | None = None) -> Iterator[pa.RecordBatch]:
    """`events` ledger-shaped events in batches of `batch_rows` (seq left to the log)."""
    shape = shape or Shape()
    rng = np.random.default_rng(seed)
    n_keys, n_queues = shape.n_keys, shape.n_queues
    committed = np.zeros(n_keys, np.int64)
    max_offset = np.full(n_queues, 10_000, np.int64)
    kinds = pa.array(["pull", "commit", "queue_append", "reset"], pa.string())
    groups = pa.array(shape.group_names(), pa.string())
    topics = pa.array(shape.topic_names(), pa.string())
    clients = pa.array(shape.client_names(), pa.string())
    done = 0
    while done < events:
        n = min(batch_rows, events - done)
        u = rng.random(n)
        kind = np.where(u < P_APPEND, 2, np.where(u < P_APPEND + P_RESET, 3,
                                                  (np.arange(done, done + n) % 2)))
        keys = rng.integers(0, n_keys, n)
        queue_of_key = keys % n_queues
        appended_queue = rng.integers(0, n_queues, n)
        queue = np.where(kind == 2, appended_queue, queue_of_key)
        # per key: commits advance by 1-32; a pull reports the committed offset + 32
        step = np.where(kind == 1, rng.integers(1, 33, n), 0)
        offset, before = _running(keys, step, committed, n_keys)
        prev = np.full(n, -1, np.int64)
        offset = np.where(kind == 0, offset + 32, offset)
        reset = kind == 3
        prev[reset] = offset[reset]
        offset[reset] = np.maximum(0, offset[reset] - 500)
        # per queue: appends move MaxOffset forward by 1,000-5,000
        grow = np.where(kind == 2, rng.integers(1_000, 5_001, n), 0)
        q_offset, q_before = _running(queue, grow, max_offset, n_queues)
        appends = kind == 2
        offset[appends] = q_offset[appends]
        prev[appends] = q_before[appends]
        ts = T0_MS + np.arange(done, done + n, dtype=np.int64) // EVENTS_PER_MS
        group = keys // n_queues
        client = group * 4 + keys % 4
        on_key = ~appends
        yield pa.RecordBatch.from_arrays([
            pa.array(np.full(n, -1, np.int64)),
            pa.array(ts),
            kinds.take(pa.array(kind)),
            groups.take(pa.array(group, mask=appends)),
            topics.take(pa.array(queue // shape.queues)),
            pa.array((queue % shape.queues).astype(np.int32)),
            pa.array(offset),
            pa.array(prev, mask=prev < 0),
            pa.array(np.where(reset, 1, 0).astype(np.int32), mask=appends),
            clients.take(pa.array(client, mask=~(on_key & ~reset))),
            pa.array(np.where(appends, "system", "ops"), pa.string(), mask=~(appends | reset)),
            pa.array(ts, mask=~appends),
            pa.array(np.full(n, '{"mode":"shift_by","value":-500,"reason":"bench"}'),
                     pa.string(), mask=~reset),
        ], schema=EVENT_SCHEMA)
        done += n


def _running(ids: np.ndarray, step: np.ndarray, state: np.ndarray, size: int
             ) -> tuple[np.ndarray, np.ndarray]:
    """Per id: the running total of `step` over the batch on top of `state` (updated in place);
    returns each row's total after and before its own step."""
    order = np.argsort(ids, kind="stable")
    sorted_ids, sorted_steps = ids[order], step[order]
    cum = np.cumsum(sorted_steps)
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_ids)) + 1]
    lengths = np.diff(np.r_[starts, len(ids)])
    base = np.repeat(cum[starts] - sorted_steps[starts], lengths)
    after = np.empty(len(ids), np.int64)
    after[order] = state[sorted_ids] + cum - base
    state += np.bincount(ids, weights=step, minlength=size).astype(np.int64)
    return after, after - step


def write_log(root: Path, events: int, segments: int) -> dict[str, Any]:
    """The synthetic log, sealed into `segments` segments through the storage layer (clustered
    by group, as the ledger seals)."""
    per_segment = -(-events // segments)
    settings = LogSettings(segment_events_max=per_segment, durability="none",
                           segment_bytes_max=2**32 - 1, cluster_columns=CLUSTER_COLUMNS)
    start = time.perf_counter()
    with SegmentedLog.open(root, EVENT_SCHEMA, settings, writer=True,
                           clock=lambda: T0_MS) as log:
        for batch in synthetic_batches(events, per_segment):
            log.append(batch)
        log.roll()
        segs = log.segments()
    return {"seconds": time.perf_counter() - start, "segments": len(segs),
            "bytes": sum(s.bytes for s in segs), "paths": [str(s.path) for s in segs],
            "sizes": {str(s.path): s.bytes for s in segs}}


def _best(action: Callable[[], Any], repeat: int = QUERY_REPEAT) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = action()
        times.append(time.perf_counter() - t)
    return min(times), out


def history_query(paths: list[str], group: str) -> tuple[float, int]:
    """Seconds (best of 3) and rows of one group's history over the files, as `history` reads
    it: DuckDB over the segments, filtered by group, in seq order."""
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    files = "[" + ", ".join(f"'{p}'" for p in paths) + "]"
    sql = (f"SELECT * FROM read_parquet({files}) WHERE consumer_group = '{group}' "
           "ORDER BY seq")
    seconds, rows = _best(lambda: con.execute(sql).fetchall())
    con.close()
    return seconds, len(rows)


def duckdb_merge(runs: list[list[str]], bases: list[int], out_dir: Path,
                 row_group_events: int, keys: tuple[str, ...] | None) -> dict[str, Any]:
    """The same merge in DuckDB: per run, COPY (SELECT ... ORDER BY row group, `keys`); with
    `keys` None, the clustered layout's order (consumer_group, then seq, over the whole run,
    in row groups of `CLUSTER_ROW_GROUP_EVENTS`)."""
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs = []
    start = time.perf_counter()
    for files, base in zip(runs, bases, strict=True):
        dst = out_dir / f"{base:020d}.parquet"
        listed = "[" + ", ".join(f"'{p}'" for p in files) + "]"
        if keys is None:
            order, rows = "consumer_group NULLS LAST, seq", CLUSTER_ROW_GROUP_EVENTS
        else:
            order = f"(seq - {base}) // {row_group_events}, {', '.join(keys)}"
            rows = row_group_events
        con.execute(
            f"COPY (SELECT * FROM read_parquet({listed}) ORDER BY {order}) TO '{dst}' "
            f"(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {rows})")
        outputs.append(str(dst))
    seconds = time.perf_counter() - start
    con.close()
    return {"seconds": seconds, "bytes": sum(Path(p).stat().st_size for p in outputs),
            "paths": outputs}


def run(events: int = 10_000_000, segments: int = 100, quick: bool = False) -> dict[str, Any]:
    """Every figure as one JSON-able dict; `quick` is 1M events in 10 segments."""
    from spark_compaction import compact
    from spark_compaction.checksum import content_checksum
    from spark_compaction.compaction import (
        ORDER_DEFAULT,
        ORDER_KEYS,
        ROW_GROUP_EVENTS_DEFAULT,
        TARGET_BYTES_DEFAULT,
        TARGET_EVENTS_DEFAULT,
        plan_runs,
    )
    from spark_compaction.session import read_events, spark_session

    if quick:
        events, segments = 1_000_000, 10
    work = Path(tempfile.mkdtemp(prefix="compaction-bench-"))
    group = Shape().group_name(HISTORY_GROUP)
    spark_runs: dict[str, dict[str, Any]] = {}
    duck_runs: dict[str, dict[str, Any]] = {}
    try:
        source = work / "source"
        written = write_log(source, events, segments)
        paths = written["paths"]
        before_s, rows = history_query(paths, group)
        with SegmentedLog.open(source, EVENT_SCHEMA, writer=False) as log:
            runs = plan_runs(log.segments(), TARGET_EVENTS_DEFAULT, TARGET_BYTES_DEFAULT)
        merged = sum(r[-1].end_seq - r[0].base_seq for r in runs)
        merged_paths = {str(s.path) for r in runs for s in r}
        untouched = [p for p in paths if p not in merged_paths]

        start = time.perf_counter()
        had_session = _active_session()
        spark_session(MASTER)
        startup_s = time.perf_counter() - start
        # The first jobs of a JVM pay for class loading and JIT: a small compaction takes it,
        # so the timed ones run warm and the fixed cost is start + warm-up.
        warm = work / "warmup"
        write_log(warm, WARMUP_EVENTS, 2)
        start = time.perf_counter()
        compact(warm, master=MASTER)
        warmup_s = time.perf_counter() - start
        start = time.perf_counter()
        source_sum = content_checksum(read_events(source))
        source_checksum_s = time.perf_counter() - start
        for order, keys in ORDER_KEYS.items():
            target = work / f"spark-{order}"
            shutil.copytree(source, target)
            start = time.perf_counter()
            result = compact(target, master=MASTER, order=order)
            spark_s = time.perf_counter() - start
            with SegmentedLog.open(target, EVENT_SCHEMA, writer=False) as log:
                after_paths = [str(p) for p in log.segment_paths()]
                after_bytes = sum(s.bytes for s in log.segments())
            after_s, after_rows = history_query(after_paths, group)
            start = time.perf_counter()
            same = source_sum == content_checksum(read_events(target))
            checksum_s = time.perf_counter() - start
            shutil.rmtree(target, ignore_errors=True)
            spark_runs[order] = {
                "seconds": spark_s, "bytes": after_bytes, "history_s": after_s,
                "history_rows": after_rows, "checksums_equal": same, "checksum_s": checksum_s,
                "checksums_s": result["roots"][0].get("checksums_s"),
                "per_run_s": [r["seconds"] for r in result["roots"][0]["runs"]],
                "segments_after": result["roots"][0]["segments_after"],
            }
            duck = duckdb_merge([[str(s.path) for s in r] for r in runs],
                                [r[0].base_seq for r in runs], work / f"duckdb-{order}",
                                ROW_GROUP_EVENTS_DEFAULT, None if order == "cluster" else keys)
            duck_after_s, duck_rows = history_query(untouched + duck["paths"], group)
            duck_runs[order] = {
                "seconds": duck["seconds"],
                "bytes": duck["bytes"] + sum(written["sizes"][p] for p in untouched),
                "history_s": duck_after_s, "history_rows": duck_rows,
            }
            shutil.rmtree(work / f"duckdb-{order}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def rate(seconds: float) -> float | None:
        return merged / seconds if seconds else None

    default = spark_runs[ORDER_DEFAULT]
    spark_rate = rate(default["seconds"])
    duck_rate = rate(duck_runs[ORDER_DEFAULT]["seconds"])
    fixed_s = startup_s + warmup_s if not had_session else None
    figures: dict[str, Any] = {
        "events": events,
        "segments": segments,
        "quick": quick,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average_1m": round(os.getloadavg()[0], 2),
                    "duckdb": duckdb.__version__, "pyarrow": pa.__version__},
        "generate_and_seal_s": round(written["seconds"], 3),
        "runs": len(runs),
        "events_merged": merged,
        "order_default": ORDER_DEFAULT,
        "spark": {
            "master": MASTER,
            "order": ORDER_DEFAULT,
            "session_start_s": round(startup_s, 3),
            "session_reused": had_session,
            "warmup_s": round(warmup_s, 3),
            "compact_s": round(default["seconds"], 3),
            "events_per_s": round(spark_rate) if spark_rate else None,
            "events_per_s_in_a_fresh_process": round(
                merged / (default["seconds"] + startup_s + warmup_s)),
            "checksums_s": default["checksums_s"],
            "per_run_s": default["per_run_s"],
            "checksums_equal": all(r["checksums_equal"] for r in spark_runs.values()),
            "checksum_both_s": round(source_checksum_s + default["checksum_s"], 3),
        },
        "spark_by_order": {
            order: {"compact_s": round(r["seconds"], 3),
                    "events_per_s": round(merged / r["seconds"]) if r["seconds"] else None,
                    "checksums_equal": r["checksums_equal"],
                    "segments_after": r["segments_after"]}
            for order, r in spark_runs.items()
        },
        "duckdb_copy": {
            "threads": 2,
            "order": ORDER_DEFAULT,
            "seconds": round(duck_runs[ORDER_DEFAULT]["seconds"], 3),
            "events_per_s": round(duck_rate) if duck_rate else None,
            "seconds_by_order": {o: round(r["seconds"], 3) for o, r in duck_runs.items()},
        },
        "bytes_per_event": {
            "before": round(written["bytes"] / events, 3),
            "after_spark": {o: round(r["bytes"] / events, 3) for o, r in spark_runs.items()},
            "after_duckdb": {o: round(r["bytes"] / events, 3) for o, r in duck_runs.items()},
        },
        "history_query_s": {
            "group": group, "rows": rows,
            "before": round(before_s, 4),
            "after_spark": {o: round(r["history_s"], 4) for o, r in spark_runs.items()},
            "after_duckdb": {o: round(r["history_s"], 4) for o, r in duck_runs.items()},
            "same_rows": all(r["history_rows"] == rows
                             for r in (*spark_runs.values(), *duck_runs.values())),
        },
        "segments_after": default["segments_after"],
    }
    figures["fixed_cost"] = fixed_cost_analysis(fixed_s, spark_rate, duck_rate)
    return figures


def fixed_cost_analysis(fixed_s: float | None, spark_rate: float | None,
                        duck_rate: float | None) -> dict[str, Any]:
    """Where Spark's fixed cost (session start and JVM warm-up) stops mattering: the events
    from which it is under STARTUP_SHARE of the job, and whether Spark ever catches DuckDB."""
    if not fixed_s or not spark_rate:
        return {"note": "the session was already running; its start was not measured"}
    # fixed / (fixed + n / rate) < share  <=>  n > fixed * rate * (1 - share) / share
    events_min = fixed_s * spark_rate * (1 - STARTUP_SHARE) / STARTUP_SHARE
    out: dict[str, Any] = {
        "fixed_s": round(fixed_s, 3),
        f"events_where_fixed_cost_below_{int(STARTUP_SHARE * 100)}pct": int(events_min),
    }
    if duck_rate:
        if spark_rate > duck_rate:
            out["events_where_spark_beats_duckdb"] = int(
                fixed_s / (1 / duck_rate - 1 / spark_rate))
        else:
            out["events_where_spark_beats_duckdb"] = None
            out["note"] = (f"on {MASTER} Spark merges {spark_rate / duck_rate:.2f}x as fast as "
                           "DuckDB per event, so it never catches up on one machine; its case "
                           "is a cluster over many ledger roots")
    return out


def _active_session() -> bool:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--segments", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="1M events in 10 segments")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    result = run(args.events, args.segments, args.quick)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
