"""Benchmark of the segmented log (`storage/`) against SQLite and plain pyarrow Parquet.

Why: the ledger's durability and history costs sit here; these figures show whether the log
meets its targets (>= 1M records/s batched append with durability "always", sealed segments
<= 8 bytes/record, seal >= 2M records/s) and what the obvious alternatives cost for the same
records: SQLite (WAL, synchronous=FULL, a ts index) and pyarrow Parquet with its defaults.

Records are shaped like the offset workload (DESIGN.md, Performance notes): 16,000 keys
(200 groups x 10 topics x 8 queues, the names of `bench.workload.Shape`) chosen uniformly, each
a commit advancing its key by 1-32, client ids from 800 (4 per group), ts advancing about a ms
per record, columns as `ledger.fold.events.EVENT_SCHEMA` (kind "commit", prev_offset null).

Run: `python -m bench.storage_bench [--quick] [--out FILE]`; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench.workload import Shape
from ledger.fold.events import EVENT_SCHEMA
from storage import LogSettings, SegmentedLog

SEED = 20_240_601
T0_MS = 1_700_000_000_000


def records(n: int, seed: int = SEED, shape: Shape | None = None) -> pa.Table:
    """`n` commit records of the offset workload, seqs 0..n-1, as EVENT_SCHEMA."""
    shape = shape or Shape()
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, shape.n_keys, n)
    group = keys // shape.n_queues
    topic = (keys // shape.queues) % shape.topics
    queue = (keys % shape.queues).astype(np.int32)
    step = rng.integers(1, 33, n)
    # offset of each record: its key's running total of steps
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_steps = keys[order], step[order]
    running = np.cumsum(sorted_steps)
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_keys)) + 1]
    lengths = np.diff(np.r_[starts, n])
    before = np.repeat(running[starts] - sorted_steps[starts], lengths)
    offset = np.empty(n, np.int64)
    offset[order] = running - before
    client = group * 4 + rng.integers(0, 4, n)
    ts = T0_MS + np.cumsum(rng.integers(0, 3, n))  # about a ms per record
    groups = np.array(shape.group_names(), dtype=object)
    topics = np.array(shape.topic_names(), dtype=object)
    clients = np.array(shape.client_names(), dtype=object)
    columns = {
        "seq": pa.array(np.arange(n, dtype=np.int64)),
        "ts": pa.array(ts.astype(np.int64)),
        "kind": pa.array(np.full(n, "commit", dtype=object), pa.string()),
        "consumer_group": pa.array(groups[group], pa.string()),
        "topic": pa.array(topics[topic], pa.string()),
        "queue_id": pa.array(queue, pa.int32()),
        "offset": pa.array(offset),
        "prev_offset": pa.nulls(n, pa.int64()),
        "generation": pa.array(np.zeros(n, np.int32)),
        "client_id": pa.array(clients[client], pa.string()),
        "actor": pa.nulls(n, pa.string()),
        "store_ts": pa.nulls(n, pa.int64()),
        "detail": pa.nulls(n, pa.string()),
    }
    return pa.Table.from_pydict(columns, schema=EVENT_SCHEMA)


class _Clock:
    """The injected clock follows the records' ts, so no segment rolls by age mid-run."""

    def __init__(self, now_ms: int):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _ts_windows(table: pa.Table, count: int, width_ms: int, seed: int) -> list[tuple[int, int]]:
    ts = table.column("ts")
    low, high = pc.min(ts).as_py(), pc.max(ts).as_py() - width_ms
    rng = np.random.default_rng(seed)
    return [(int(t), int(t) + width_ms) for t in rng.integers(low, high, count)]


def _latency_ms(read: Callable[[int, int], int], windows: list[tuple[int, int]]) -> dict:
    times, rows = [], []
    for low, high in windows:
        start = time.perf_counter()
        rows.append(read(low, high))
        times.append((time.perf_counter() - start) * 1e3)
    return {
        "p50_ms": round(statistics.median(times), 3),
        "max_ms": round(max(times), 3),
        "rows_mean": round(sum(rows) / len(rows), 1),
    }


def bench_log(table: pa.Table, single_records: int, directory: Path) -> dict:
    """Append (batches of 1,000 and of 1), seal, size and ts reads of the segmented log."""
    n = table.num_rows
    clock = _Clock(T0_MS)
    settings = LogSettings(segment_events_max=max(n, 1))
    out: dict = {"settings": {f: getattr(settings, f) for f in settings.__struct_fields__}}
    batches = table.to_batches(max_chunksize=1000)
    root = directory / "log-batched"
    with SegmentedLog.open(root, EVENT_SCHEMA, settings, clock=clock) as log:
        seconds = _timed(lambda: [log.append(b) for b in batches[:-1]])
        appended = n - batches[-1].num_rows
        out["append_batch_1000_always"] = {
            "records": appended,
            "seconds": round(seconds, 3),
            "records_per_s": round(appended / seconds),
            "appends_per_s": round((len(batches) - 1) / seconds),
        }
        log.append(batches[-1])  # fills the segment exactly: sealed inside this append
        info = log.segments()[-1] if log.segments() else log.roll()
        assert info is not None and info.events == n
        # seal on its own: the same rows again, sealed by roll()
        second = directory / "log-seal"
        with SegmentedLog.open(second, EVENT_SCHEMA, LogSettings(
            segment_events_max=n, durability="none"), clock=clock) as sealer:
            for b in batches[:-1]:
                sealer.append(b)
            sealer.append(batches[-1].slice(0, batches[-1].num_rows - 1))
            held = sealer.tail().num_rows
            seal_seconds = _timed(sealer.roll)
        out["seal"] = {
            "records": held,
            "seconds": round(seal_seconds, 3),
            "records_per_s": round(held / seal_seconds),
        }
        out["sealed_bytes_per_record"] = round(info.bytes / info.events, 3)
        out["sealed_segment_bytes"] = info.bytes
        md = pq.read_metadata(info.path)
        per_column: dict[str, float] = {}
        for rg in range(md.num_row_groups):
            for i in range(md.num_columns):
                chunk = md.row_group(rg).column(i)
                per_column[chunk.path_in_schema] = (
                    per_column.get(chunk.path_in_schema, 0) + chunk.total_compressed_size
                )
        out["sealed_bits_per_record_by_column"] = {
            k: round(v * 8 / n, 2) for k, v in per_column.items()
        }
        windows = _ts_windows(table, 30, 1000, SEED)
        out["read_by_ts_1s_window"] = _latency_ms(
            lambda lo, hi: log.read(ts_gte=lo, ts_lt=hi).num_rows, windows
        )
        out["read_by_ts_1s_window_3_columns"] = _latency_ms(
            lambda lo, hi: log.read(
                ts_gte=lo, ts_lt=hi, columns=["seq", "consumer_group", "offset"]
            ).num_rows,
            windows,
        )
        stats = log.last_read_stats
        out["read_by_ts_row_groups"] = {
            "read": stats.row_groups_read, "skipped": stats.row_groups_skipped
        }
        full = _timed(log.read)
        out["read_all_records_per_s"] = round(n / full)
    # the same appends without fsync: the CPU cost of framing and bookkeeping alone
    with SegmentedLog.open(directory / "log-none", EVENT_SCHEMA, LogSettings(
            segment_events_max=n, durability="none"), clock=clock) as log:
        seconds = _timed(lambda: [log.append(b) for b in batches[:-1]])
    out["append_batch_1000_none"] = {
        "records": appended, "seconds": round(seconds, 3),
        "records_per_s": round(appended / seconds),
    }
    # smaller row groups: what they cost in bytes and buy in ts-read latency
    small = LogSettings(segment_events_max=n, durability="none", row_group_events=32_768)
    with SegmentedLog.open(directory / "log-rg", EVENT_SCHEMA, small, clock=clock) as log:
        for b in batches:
            log.append(b)
        (segment,) = log.segments()
        out["row_groups_32768"] = {
            "sealed_bytes_per_record": round(segment.bytes / segment.events, 3),
            "read_by_ts_1s_window": _latency_ms(
                lambda lo, hi: log.read(ts_gte=lo, ts_lt=hi).num_rows, windows
            ),
        }
    # single-record appends, durability always: one frame and one fsync each
    one = table.slice(0, single_records).to_batches(max_chunksize=1)
    with SegmentedLog.open(directory / "log-single", EVENT_SCHEMA, settings, clock=clock) as log:
        seconds = _timed(lambda: [log.append(b) for b in one])
    out["append_batch_1_always"] = {
        "records": len(one),
        "seconds": round(seconds, 3),
        "records_per_s": round(len(one) / seconds),
    }
    return out


def fsync_latency_ms(directory: Path, count: int = 200) -> float:
    """Median cost of a 100-byte append plus fsync on this disk: the floor of any durable append."""
    path = directory / "fsync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    times = []
    try:
        for _ in range(count):
            start = time.perf_counter()
            os.write(fd, b"x" * 100)
            os.fsync(fd)
            times.append((time.perf_counter() - start) * 1e3)
    finally:
        os.close(fd)
    return round(statistics.median(times), 4)


def bench_sqlite(table: pa.Table, single_records: int, directory: Path) -> dict:
    """The same records in SQLite: WAL, synchronous=FULL, a ts index, a commit per batch."""
    path = directory / "events.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("PRAGMA cache_size=-65536")
    columns = ", ".join(f'"{c}"' for c in EVENT_SCHEMA.names)
    db.execute(
        "CREATE TABLE events (seq INTEGER PRIMARY KEY, ts INTEGER NOT NULL, kind TEXT NOT NULL, "
        "consumer_group TEXT, topic TEXT, queue_id INTEGER, \"offset\" INTEGER, "
        "prev_offset INTEGER, generation INTEGER, client_id TEXT, actor TEXT, "
        "store_ts INTEGER, detail TEXT)"
    )
    db.execute("CREATE INDEX events_ts ON events (ts)")
    insert = f"INSERT INTO events ({columns}) VALUES ({', '.join('?' * len(EVENT_SCHEMA))})"
    n = table.num_rows
    rows = list(zip(*(table.column(c).to_pylist() for c in EVENT_SCHEMA.names), strict=True))

    def batched() -> None:
        for start in range(0, n, 1000):
            db.execute("BEGIN")
            db.executemany(insert, rows[start : start + 1000])
            db.execute("COMMIT")

    seconds = _timed(batched)
    out: dict = {
        "append_batch_1000_fsync": {
            "records": n, "seconds": round(seconds, 3), "records_per_s": round(n / seconds)
        }
    }
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out["bytes_per_record"] = round(os.path.getsize(path) / n, 3)
    windows = _ts_windows(table, 30, 1000, SEED)
    query = f"SELECT {columns} FROM events WHERE ts >= ? AND ts < ? ORDER BY seq"
    out["read_by_ts_1s_window"] = _latency_ms(
        lambda lo, hi: len(db.execute(query, (lo, hi)).fetchall()), windows
    )
    extra = [(n + i, *row[1:]) for i, row in enumerate(rows[:single_records])]

    def single() -> None:
        for row in extra:
            db.execute(insert, row)  # autocommit: one fsync'd transaction per record

    seconds = _timed(single)
    out["append_batch_1_fsync"] = {
        "records": len(extra), "seconds": round(seconds, 3),
        "records_per_s": round(len(extra) / seconds),
    }
    db.close()
    return out


def bench_parquet_defaults(table: pa.Table, directory: Path) -> dict:
    """The same records written once by `pq.write_table` with pyarrow's defaults."""
    path = directory / "plain.parquet"
    seconds = _timed(lambda: pq.write_table(table, path))
    n = table.num_rows
    windows = _ts_windows(table, 30, 1000, SEED)
    return {
        "write": {"records": n, "seconds": round(seconds, 3), "records_per_s": round(n / seconds)},
        "bytes_per_record": round(path.stat().st_size / n, 3),
        "read_by_ts_1s_window": _latency_ms(
            lambda lo, hi: pq.read_table(
                path, filters=[("ts", ">=", lo), ("ts", "<", hi)]
            ).num_rows,
            windows,
        ),
    }


def run(quick: bool) -> dict:
    """All figures as one JSON-able dict; `quick` uses 200,000 records instead of 1,000,000."""
    n = 200_000 if quick else 1_000_000
    single = 500 if quick else 3_000
    table = records(n)
    directory = Path(tempfile.mkdtemp(prefix="storage-bench-"))
    try:
        result = {
            "records": n,
            "quick": quick,
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                        "load_average_1m": round(os.getloadavg()[0], 2),
                        "pyarrow": pa.__version__, "sqlite": sqlite3.sqlite_version},
            "fsync_ms_p50": fsync_latency_ms(directory),
            "segmented_log": bench_log(table, single, directory),
            "sqlite_wal_full": bench_sqlite(table, single, directory),
            "parquet_defaults": bench_parquet_defaults(table, directory),
        }
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    log = result["segmented_log"]
    result["targets"] = {
        "append_batch_1000_always_ge_1M_per_s":
            log["append_batch_1000_always"]["records_per_s"] >= 1_000_000,
        "sealed_bytes_per_record_le_8": log["sealed_bytes_per_record"] <= 8,
        "seal_ge_2M_per_s": log["seal"]["records_per_s"] >= 2_000_000,
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200,000 records instead of 1M")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    result = run(args.quick)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
