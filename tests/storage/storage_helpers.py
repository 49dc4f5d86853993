"""Helpers for the storage tests: a small events-like schema, row builders, a faulty file layer."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from storage import LogSettings, SegmentedLog, names
from storage.fs import Buffer, FileHandle, OsFileSystem

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


class Clock:
    """A settable epoch-ms clock."""

    def __init__(self, now_ms: int = 1_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms


def open_log(root: Path, settings: LogSettings | None = None, **kwargs: object) -> SegmentedLog:
    """Open a log of the test schema with a fake clock unless one is given."""
    kwargs.setdefault("clock", Clock())
    return SegmentedLog.open(root, SCHEMA, settings, **kwargs)  # type: ignore[arg-type]


class Crash(BaseException):
    """A simulated process death: BaseException so no `except OSError` path swallows it."""


class FaultyHandle:
    """A file handle whose writes, fsyncs and truncations go through `FaultyFS`."""

    def __init__(self, fs: FaultyFS, inner: FileHandle, path: Path):
        self.fs, self.inner, self.path = fs, inner, path

    def write(self, data: Buffer) -> int:
        self.fs.step("write", self.path)
        view = memoryview(data).cast("B")
        if self.fs.enospc_writes:
            if not self.fs.enospc_partial_done and len(view) > 1:
                self.fs.enospc_partial_done = True  # the disk fills up half way
                return self.inner.write(view[: len(view) // 2])
            self.fs.enospc_writes -= 1
            self.fs.enospc_partial_done = False
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        if self.fs.short_writes and len(view) > 1:
            return self.inner.write(view[: max(1, len(view) // 3)])
        return self.inner.write(view)

    def fsync(self) -> None:
        self.fs.step("fsync", self.path)
        self.fs.maybe_fail_fsync(self.path)
        self.inner.fsync()

    def truncate(self, size: int) -> None:
        self.fs.step("truncate", self.path)
        self.inner.truncate(size)

    def close(self) -> None:
        self.inner.close()


class FaultyFS(OsFileSystem):
    """The OS file layer with injectable faults.

    - `crash_at=k`: the k-th mutating operation (1-based) raises `Crash` before it happens, and
      every later one too (the process is dead).
    - `fsync_fail_after=k`: fsyncs after the first k raise EIO.
    - `enospc_writes=k`: the next k writes write half, then fail with ENOSPC.
    - `short_writes`: every write writes a third of what it is given.
    """

    def __init__(self, crash_at: int | None = None):
        self.crash_at = crash_at
        self.ops: list[tuple[str, str]] = []
        self.crashed = False
        self.fsync_fail_after: int | None = None
        self.fsyncs = 0
        self.enospc_writes = 0
        self.enospc_partial_done = False
        self.short_writes = False
        self.rename_fails = 0
        self.on_step: Callable[[str, Path], None] | None = None

    def step(self, op: str, path: Path) -> None:
        if self.crashed:
            raise Crash(f"dead: {op} {path}")
        self.ops.append((op, Path(path).name))
        if self.crash_at is not None and len(self.ops) >= self.crash_at:
            self.crashed = True
            raise Crash(f"crash before {op} {path}")
        if self.on_step is not None:
            self.on_step(op, Path(path))

    def maybe_fail_fsync(self, path: Path) -> None:
        self.fsyncs += 1
        if self.fsync_fail_after is not None and self.fsyncs > self.fsync_fail_after:
            raise OSError(errno.EIO, f"Input/output error (injected fsync of {path})")

    def open_append(self, path: Path) -> FileHandle:
        self.step("open_append", path)
        return FaultyHandle(self, super().open_append(path), path)

    def open_write(self, path: Path) -> FileHandle:
        self.step("open_write", path)
        return FaultyHandle(self, super().open_write(path), path)

    def rename(self, src: Path, dst: Path) -> None:
        self.step("rename", dst)
        if self.rename_fails:
            self.rename_fails -= 1
            raise OSError(errno.EIO, "rename failed (injected)")
        super().rename(src, dst)

    def remove(self, path: Path) -> None:
        self.step("remove", path)
        super().remove(path)

    def fsync_file(self, path: Path) -> None:
        self.step("fsync_file", path)
        self.maybe_fail_fsync(path)
        super().fsync_file(path)

    def fsync_dir(self, path: Path) -> None:
        self.step("fsync_dir", path)
        self.maybe_fail_fsync(path)
        super().fsync_dir(path)


class _NoSyncHandle:
    def __init__(self, inner: FileHandle):
        self.inner = inner

    def write(self, data: Buffer) -> int:
        return self.inner.write(data)

    def fsync(self) -> None:
        pass

    def truncate(self, size: int) -> None:
        self.inner.truncate(size)

    def close(self) -> None:
        self.inner.close()


class NoSyncFS(OsFileSystem):
    """The OS file layer minus fsyncs: for tests of logic, not durability, on a busy disk."""

    def open_append(self, path: Path) -> FileHandle:
        return _NoSyncHandle(super().open_append(path))

    def open_write(self, path: Path) -> FileHandle:
        return _NoSyncHandle(super().open_write(path))

    def fsync_file(self, path: Path) -> None:
        pass

    def fsync_dir(self, path: Path) -> None:
        pass


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
