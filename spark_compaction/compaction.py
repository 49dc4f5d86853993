"""Compaction: merge runs of small sealed segments into segments of a target size.

Per run (a contiguous range of seqs) Spark reads the run's files, gives each row its row-group
bucket `(seq - base) // row_group_events`, orders it (`order`, below) and hands the rows to the
driver as Arrow (in chunks of whole buckets, see `sorted_run_table`); the driver writes them with
storage's own Parquet writer (the sealing layout: zstd, dictionary strings, delta ints,
statistics) into a staging directory under a name of ours; Spark checks the row count and
content checksum of the staged file against the run; and `SegmentedLog.replace` swaps it in with
one manifest commit. So every row group covers a contiguous seq range (seq/ts statistics still
prune), and Spark's part-file names never reach the log.

Three layouts (`ORDERS`):
- `cluster` (the default): the layout sealing writes (storage's `write_segment`): the whole
  merged segment sorted by the log's clustering key (the consumer group) then seq, in row groups
  of whole groups, so the read index finds a group's rows in one or two row groups of the bigger
  segment as it does in sealed ones. The driver sorts (the rows are there anyway); Spark only
  reads and checks. Row groups are the sealing's (`--row-group-events` is not used).
- `seq`: row groups of `row_group_events` rows over contiguous seq ranges, rows in seq order
  inside (the layout sealing wrote before segments were clustered). seq and ts stay runs that
  delta encoding stores in a few bits, but a group's rows are in every row group.
- `key`: the same row groups, rows sorted by (consumer_group, topic, queue_id, seq) inside each.
The order applies to the runs merged now; segments compacted before are left as they are.

The writer lock is held for the whole job: compaction refuses to run beside a Ledger writer
(`storage.LockedError`), and nothing seals or retires segments under it.

Crash safety comes from storage: until `replace` commits the manifest the old segments are the
live ones (a staged or moved file is unlisted: deleted on the next open, or here at the next
start); after the commit the new ones are. Each run is its own swap.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa

from ledger.errors import InvalidInput
from ledger.fold.events import EVENT_SCHEMA
from ledger.store import settings as ledger_settings
from ledger.store import tier
from ledger.store.writer import log_settings
from spark_compaction.checksum import Checksum, content_checksum, content_checksums
from spark_compaction.session import (
    Roots,
    as_roots,
    read_parquet,
    require_ledger,
    spark_session,
)
from storage import FileSystem, OsFileSystem, SegmentedLog, SegmentInfo, StorageError, names
from storage.fs import remove_quietly, sync_dir
from storage.sealed import write_parquet, write_segment

#: A compacted segment holds at most this many events ...
TARGET_EVENTS_DEFAULT = 8_000_000
#: ... and its inputs at most this many bytes (whichever binds first; at 5-6 bytes an event the
#: event target usually binds, giving 40-50 MB segments; wide `detail` strings hit the bytes).
TARGET_BYTES_DEFAULT = 256 * 1024 * 1024
#: Rows per row group of a compacted segment: as sealing writes them (LogSettings default).
ROW_GROUP_EVENTS_DEFAULT = 131_072
#: A segment under 1/SMALL_FRACTION of either target may be merged; bigger ones are left alone.
#: A merged output is > (1 - 1/SMALL_FRACTION) of the target that closed it, so it is never small
#: again (unless sorting shrinks its bytes more than 3x): a second run changes nothing.
SMALL_FRACTION = 4
#: Events per Spark job when sorting a run (whole row groups; about 1M).
CHUNK_EVENTS = 1 << 20
#: Sort jobs in flight at once (at most one per core of the master).
CHUNKS_PARALLEL_MAX = 4
STAGING_DIR = "compaction"
#: Key order inside a row group (order "key").
SORT_KEYS = ("consumer_group", "topic", "queue_id", "seq")
#: The orders of rows inside a compacted row group, and the columns Spark sorts by ("cluster":
#: seq, then the driver writes the sealing layout).
ORDER_KEYS: dict[str, tuple[str, ...]] = {"cluster": ("seq",), "seq": ("seq",), "key": SORT_KEYS}
ORDERS = tuple(ORDER_KEYS)
ORDER_DEFAULT = "cluster"

Progress = Callable[[str], None]


class CompactionError(StorageError):
    """A compacted file does not hold what its run held: nothing was swapped."""


def check_order(order: str) -> str:
    """`order` when it is one of `ORDERS`, else `InvalidInput` naming it."""
    if order not in ORDER_KEYS:
        raise InvalidInput(f"invalid order {order!r}: use one of {', '.join(ORDERS)}")
    return order


def is_small(segment: SegmentInfo, target_events: int, target_bytes: int) -> bool:
    """Whether a segment is small enough to be merged with its neighbours."""
    return (
        segment.events * SMALL_FRACTION < target_events
        and segment.bytes * SMALL_FRACTION < target_bytes
    )


def plan_runs(
    segments: Sequence[SegmentInfo], target_events: int, target_bytes: int
) -> list[tuple[SegmentInfo, ...]]:
    """Runs of adjacent small segments to merge, each into one segment of at most the targets.

    Greedy in seq order: a run grows while the next small segment fits; a big segment ends it.
    Runs of one segment are left alone (nothing to merge), which makes compaction idempotent.
    """
    if target_events < 1 or target_bytes < 1:
        raise ValueError(f"targets must be positive: {target_events} events, {target_bytes} bytes")
    runs: list[tuple[SegmentInfo, ...]] = []
    current: list[SegmentInfo] = []

    def close() -> None:
        if len(current) >= 2:
            runs.append(tuple(current))
        current.clear()

    for segment in segments:
        if not is_small(segment, target_events, target_bytes):
            close()
            continue
        if current and (
            sum(s.events for s in current) + segment.events > target_events
            or sum(s.bytes for s in current) + segment.bytes > target_bytes
        ):
            close()
        current.append(segment)
    close()
    return runs


def run_checksums(spark: Any, runs: Sequence[Sequence[SegmentInfo]]) -> list[Checksum]:
    """Checksums of every run's rows, in one Spark job over all their files."""
    if not runs:
        return []
    df = read_parquet(spark, [s.path for run in runs for s in run], EVENT_SCHEMA)
    cases = " ".join(
        f"WHEN seq < {int(run[-1].end_seq)} THEN {i}" for i, run in enumerate(runs)
    )
    per_run = content_checksums(df, f"CASE {cases} END")
    return [per_run.get(i, Checksum(0, 0)) for i in range(len(runs))]


def sorted_run_table(
    spark: Any, run: Sequence[SegmentInfo], row_group_events: int, order: str = ORDER_DEFAULT
) -> pa.Table:
    """The run's rows in compacted order (`order`: see the module doc), as Arrow on the driver.

    Row-group buckets are seq ranges, so the run is cut into chunks of whole buckets and each
    chunk is one Spark job over only the files it overlaps: read, sort within one partition,
    hand over as Arrow. No shuffle (a global orderBy measured twice as slow here: a sampling
    job plus a shuffle of every row), memory bounded by a chunk, and chunks run concurrently,
    one per core, their order kept.
    """
    keys = ORDER_KEYS[check_order(order)]
    base, end = run[0].base_seq, run[-1].end_seq
    step = row_group_events * max(1, CHUNK_EVENTS // row_group_events)
    bounds = [(lo, min(lo + step, end)) for lo in range(base, end, step)]

    def chunk(lo: int, hi: int) -> pa.Table:
        files = [s.path for s in run if s.end_seq > lo and s.base_seq < hi]
        df = read_parquet(spark, files, EVENT_SCHEMA).where(f"seq >= {lo} AND seq < {hi}")
        ordered = (
            df.selectExpr("*", f"(seq - {int(base)}) div {int(row_group_events)} AS _row_group")
            .coalesce(1)
            .sortWithinPartitions("_row_group", *keys)
            .drop("_row_group")
        )
        return ordered.toArrow()

    workers = max(1, min(len(bounds), spark.sparkContext.defaultParallelism, CHUNKS_PARALLEL_MAX))
    with ThreadPoolExecutor(workers) as pool:
        pieces = list(pool.map(lambda b: chunk(*b), bounds))
    table = pa.concat_tables([p.select(EVENT_SCHEMA.names) for p in pieces])
    return pa.Table.from_arrays(table.columns, schema=EVENT_SCHEMA)


def _clear_staging(fs: FileSystem, staging: Path) -> None:
    """Leftovers of an interrupted compaction: never listed anywhere, safe to delete."""
    if not fs.exists(staging):
        return
    for name in fs.listdir(staging):
        remove_quietly(fs, staging / name)


def compact_root(
    root: str | os.PathLike[str],
    *,
    master: str | None = None,
    target_events: int = TARGET_EVENTS_DEFAULT,
    target_bytes: int = TARGET_BYTES_DEFAULT,
    row_group_events: int = ROW_GROUP_EVENTS_DEFAULT,
    order: str = ORDER_DEFAULT,
    progress: Progress | None = None,
    fs: FileSystem | None = None,
) -> dict[str, Any]:
    """Compact one ledger root (see the module doc) with rows in `order` ("seq" or "key")
    inside each row group; returns what was done, with timings."""
    say = progress or (lambda _msg: None)
    check_order(order)
    root = require_ledger(root)
    cfg = ledger_settings.load(root)
    # a root whose segments are in S3 is compacted there (never through a local-only layer,
    # which would find no manifest and start another log over the WAL)
    fs = fs or tier.filesystem(root, cfg, None) or OsFileSystem()
    started = time.perf_counter()
    settings = log_settings(cfg)
    with SegmentedLog.open(root, EVENT_SCHEMA, settings, writer=True, fs=fs) as log:
        staging = root / STAGING_DIR
        _clear_staging(fs, staging)
        segments = log.segments()
        runs = plan_runs(segments, target_events, target_bytes)
        result: dict[str, Any] = {
            "root": str(root),
            "segments_before": len(segments),
            "bytes_before": sum(s.bytes for s in segments),
            "events": sum(s.events for s in segments),
            "order": order,
            "runs": [],
        }
        say(f"{root}: {len(segments)} segments, {len(runs)} runs to merge")
        if runs:
            say("starting Spark")
            spark = spark_session(master)
            fs.makedirs(staging)
            say(f"{root}: checksums of {sum(len(r) for r in runs)} segments")
            t = time.perf_counter()
            before = run_checksums(spark, runs)
            result["checksums_s"] = round(time.perf_counter() - t, 3)
        for i, run in enumerate(runs, start=1):
            result["runs"].append(_compact_run(
                spark, log, fs, staging, run, before[i - 1], row_group_events, order, i,
                len(runs), say,
            ))
        if runs:
            _clear_staging(fs, staging)
        after = log.segments()
        result.update(
            segments_after=len(after),
            bytes_after=sum(s.bytes for s in after),
            seconds=round(time.perf_counter() - started, 3),
        )
    return result


def _compact_run(
    spark: Any, log: SegmentedLog, fs: FileSystem, staging: Path, run: Sequence[SegmentInfo],
    before: Checksum, row_group_events: int, order: str, index: int, count: int, say: Progress,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    base, end = run[0].base_seq, run[-1].end_seq
    events = end - base
    say(f"run {index}/{count}: seqs {base}..{end} ({len(run)} segments, {events} events): "
        f"sorting in {order} order")
    table = sorted_run_table(spark, run, row_group_events, order)
    t_sort = time.perf_counter()
    staged = staging / names.parquet_name(base)
    if order == "cluster":  # the sealing's layout, as every sealed segment has it
        size, _ = write_segment(fs, staged, table, log.settings)
    else:
        size = write_parquet(fs, staged, table, log.settings, row_group_events)
    sync_dir(fs, staging)
    del table
    t_write = time.perf_counter()
    say(f"run {index}/{count}: verifying the {size} bytes written")
    after = content_checksum(read_parquet(spark, [staged], EVENT_SCHEMA))
    if after != before or before.rows != events:
        remove_quietly(fs, staged)
        raise CompactionError(
            f"compacted seqs {base}..{end} do not match their {len(run)} segments: "
            f"{after.rows} rows, checksum {after.hash_sum}; expected {before.rows} rows "
            f"({events} in the manifest), checksum {before.hash_sum}; nothing was swapped"
        )
    t_check = time.perf_counter()
    say(f"run {index}/{count}: swapping {len(run)} segments for the new one")
    new = log.replace(run, [staged])
    t_swap = time.perf_counter()
    return {
        "base_seq": base,
        "end_seq": end,
        "segments_in": len(run),
        "segments_out": len(new),
        "events": events,
        "order": order,
        "bytes_in": sum(s.bytes for s in run),
        "bytes_out": sum(s.bytes for s in new),
        "checksum": before.hash_sum,
        "seconds": {
            "sort_collect": round(t_sort - t0, 3),
            "write": round(t_write - t_sort, 3),
            "verify": round(t_check - t_write, 3),
            "swap": round(t_swap - t_check, 3),
        },
    }


def compact(
    roots: Roots,
    *,
    master: str | None = None,
    target_events: int = TARGET_EVENTS_DEFAULT,
    target_bytes: int = TARGET_BYTES_DEFAULT,
    row_group_events: int = ROW_GROUP_EVENTS_DEFAULT,
    order: str = ORDER_DEFAULT,
    progress: Progress | None = None,
    fs: FileSystem | None = None,
) -> dict[str, Any]:
    """Compact one ledger root or several (each its own lock and swaps), with rows in `order`
    ("seq", the default and smallest, or "key") inside each row group; returns per-root results
    and totals. `fs` is storage's file layer (tests inject faults through it)."""
    check_order(order)
    started = time.perf_counter()
    results = [
        compact_root(
            root, master=master, target_events=target_events, target_bytes=target_bytes,
            row_group_events=row_group_events, order=order, progress=progress, fs=fs,
        )
        for root in as_roots(roots)
    ]
    runs = [run for r in results for run in r["runs"]]
    return {
        "roots": results,
        "runs": len(runs),
        "segments_merged": sum(r["segments_in"] for r in runs),
        "events_compacted": sum(r["events"] for r in runs),
        "bytes_before": sum(r["bytes_before"] for r in results),
        "bytes_after": sum(r["bytes_after"] for r in results),
        "target_events": target_events,
        "target_bytes": target_bytes,
        "order": order,
        "seconds": round(time.perf_counter() - started, 3),
    }
