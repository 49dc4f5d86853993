"""Helpers for the storage tests: a small events-like schema, row builders, a log opener."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from storage import LogSettings, SegmentedLog, names
from tests.support.clock import FakeClock

# A cut-down copy of ledger.events.EVENT_SCHEMA (storage must not import the ledger).
SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("consumer_group", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("detail", pa.string()),
    ]
)
KINDS = ("commit", "pull", "reset", "queue_append")


def make_rows(n: int, *, ts: int | list[int] = 1_000, salt: int = 0) -> pa.RecordBatch:
    """`n` deterministic rows (seq left at -1: the log assigns it) with nulls in places."""
    stamps = ts if isinstance(ts, list) else [ts + i for i in range(n)]
    k = [salt + i for i in range(n)]
    return pa.RecordBatch.from_pydict(
        {
            "seq": [-1] * n,
            "ts": stamps,
            "kind": [KINDS[x % len(KINDS)] for x in k],
            "consumer_group": [None if x % 7 == 3 else f"group-{x % 5}" for x in k],
            "queue_id": [x % 8 for x in k],
            "offset": [None if x % 11 == 5 else x * 3 for x in k],
            "detail": [None if x % 3 else f"d{x}" for x in k],
        },
        schema=SCHEMA,
    )


def with_seqs(batch: pa.RecordBatch, first_seq: int) -> pa.Table:
    """`batch` as the log stores it: seqs from `first_seq`."""
    seqs = pa.array(range(first_seq, first_seq + batch.num_rows), pa.int64())
    return pa.Table.from_batches([batch.set_column(0, SCHEMA.field(0), seqs)], schema=SCHEMA)


def concat(tables: list[pa.Table]) -> pa.Table:
    """Tables concatenated with the test schema (an empty list gives an empty table)."""
    if not tables:
        return SCHEMA.empty_table()
    return pa.concat_tables(tables).combine_chunks()


def open_log(root: Path, settings: LogSettings | None = None, **kwargs: object) -> SegmentedLog:
    """Open a log of the test schema with a fake clock unless one is given."""
    kwargs.setdefault("clock", FakeClock(1_000))
    return SegmentedLog.open(root, SCHEMA, settings, **kwargs)  # type: ignore[arg-type]


def live_files(root: Path) -> tuple[set[str], set[str]]:
    """Files in log/ and checkpoints/ (what is on disk, to compare with the manifest)."""
    log_files = {p.name for p in (root / names.LOG_DIR).iterdir()}
    checkpoint_files = {p.name for p in (root / names.CHECKPOINT_DIR).iterdir()}
    return log_files, checkpoint_files


def assert_no_orphans(log: SegmentedLog) -> None:
    """log/ and checkpoints/ hold exactly what the manifest lists (plus the active WAL)."""
    log_files, checkpoint_files = live_files(log.root)
    expected = {p.name for p in log.segment_paths()} | {names.MANIFEST_FILE}
    wal = names.wal_name(log.segments()[-1].end_seq if log.segments() else log.start_seq)
    log_files.discard(wal)
    assert log_files == expected
    assert checkpoint_files == {log.checkpoint_path(s).name for s in log.checkpoints()}
