"""`SegmentedLog`: a Kafka-like log of Arrow rows, an active WAL segment plus sealed Parquet ones.

The log is a sequence of segments, each named by its base seq: sealed segments are Parquet files
listed in `log/MANIFEST`, the active one is `log/<base>.wal`. Every change of the live set (seal,
retention, checkpoint, compaction swap) is one atomic manifest commit, so a crash at any point
leaves the old or the new state, and a reader that trusts the manifest never sees a mix.

`SegmentedLog` is the one door: it serializes calls, refuses changes on a reader or a failed log,
and turns I/O errors into `WriteFailedError`. Behind it each part owns one concept, all working
on one `LogSegments` (segments.py: the manifest in force and the active segment): the loader
(recovery.py), the sealer (sealer.py), compaction's swap (swap.py), checkpoints
(checkpoints.py), range reads (reads.py), and retention's plan (retention.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import msgspec
import numpy as np
import pyarrow as pa

from storage import checkpoints
from storage.acknowledged import Witness
from storage.active import RecoveredTail
from storage.errors import (
    CorruptSegmentError,
    ReadOnlyError,
    StorageError,
    VersionConflictError,
    WriteFailedError,
)
from storage.failure import FailureLatch
from storage.fs import FileSystem, OsFileSystem, remove_quietly, sync_dir
from storage.lock import WriterLock
from storage.memory import use_jemalloc
from storage.reads import RangeReader
from storage.recovery import (
    READER_RETRIES_MAX,
    RecoveryReport,
    follow_snapshot,
    recover,
    take_newer_snapshot,
    take_snapshot,
)
from storage.retention import plan_retention
from storage.schema import (
    check_cluster_columns,
    check_columns,
    check_schema,
    check_where,
    conform,
    not_null_indices,
)
from storage.sealed import ReadStats, SeqTsRange
from storage.sealer import Sealer
from storage.segments import LogSegments, SegmentInfo
from storage.settings import LogSettings
from storage.swap import replace_segments

_T = TypeVar("_T")

logger = logging.getLogger(__name__)


class AppendResult(msgspec.Struct, frozen=True):
    """Seqs [first_seq, end_seq) given to the appended rows, and segments this call sealed."""

    first_seq: int
    end_seq: int
    sealed: tuple[SegmentInfo, ...] = ()


class RetentionResult(msgspec.Struct, frozen=True):
    """What `retain` deleted and the log start seq after it."""

    deleted: tuple[SegmentInfo, ...]
    start_seq: int
    checkpoints_deleted: tuple[int, ...]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class SegmentedLog:
    """A log of rows with a fixed Arrow schema holding int64 `seq` (dense, assigned here) and
    int64 `ts` (the caller's epoch ms).

    One writer per data directory (a lock); any number of readers (writer=False), each a
    consistent snapshot. Methods are thread-safe (they serialize on one lock).
    """

    settings: LogSettings
    schema: pa.Schema

    def __init__(
        self,
        root: Path,
        schema: pa.Schema,
        settings: LogSettings,
        clock: Callable[[], int],
        writer: bool,
        fs: FileSystem,
        read_index: bool = True,
    ):
        self.root = root
        self.schema = schema
        self.settings = settings
        self._clock = clock
        self._writer = writer
        self._fs = fs
        self._segments = LogSegments(root, fs, schema)
        self._not_null_indices = not_null_indices(schema)
        self._mutex = threading.RLock()
        self._lock: WriterLock | None = None
        self._sealer = Sealer(self._segments, settings, clock)
        self._latch = FailureLatch()
        self._checkpointing = checkpoints.CheckpointThread()
        self._closed = False
        self._reads = RangeReader(self._segments, read_index)
        self.last_read_stats = ReadStats()
        self.recovery = RecoveryReport(tail=RecoveredTail("", 0, 0, 0, None))

    # ----------------------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        root: str | Path,
        schema: pa.Schema,
        settings: LogSettings | None = None,
        *,
        clock: Callable[[], int] | None = None,
        writer: bool = True,
        fs: FileSystem | None = None,
        read_index: bool = True,
        witness: Callable[[], Witness | None] | None = None,
    ) -> SegmentedLog:
        """Open (and with writer=True create or recover) the log in data directory `root`.

        Writer: takes `root/LOCK`, cuts a torn tail, deletes files the manifest does not list
        (an interrupted seal, swap or checkpoint) and seals a full active segment. A damaged
        tail that a later frame, a checkpoint or `witness` (the caller's evidence of what was
        acknowledged, asked only then) proves acknowledged is refused, never cut. Reader: no
        lock and no change on disk, a snapshot of the manifest and the active tail's intact
        prefix (`refresh()` takes a newer one). `read_index=False` keeps no read index: every
        read parses footers afresh and decodes every row group of its seq/ts range (the check
        that the index changes no answer).
        """
        check_schema(schema)
        if settings is not None:
            check_cluster_columns(schema, settings.cluster_columns)
        use_jemalloc()
        log_ = cls(
            Path(root),
            schema,
            settings if settings is not None else LogSettings(),
            clock if clock is not None else _wall_clock_ms,
            writer,
            fs if fs is not None else OsFileSystem(),
            read_index,
        )
        if writer:
            log_._open_writer(witness)
        else:
            log_._open_reader()
        return log_

    def _open_writer(self, witness: Callable[[], Witness | None] | None) -> None:
        self._fs.makedirs(self.root)
        self._lock = WriterLock(self.root)
        self._lock.acquire()
        try:
            self.recovery = recover(self._segments, self._sealer, self._latch, self._clock,
                                    durability=self.settings.durability, witness=witness)
        except BaseException:
            self._segments.active.close()
            self._lock.release()
            raise

    def _open_reader(self) -> None:
        self._take_snapshot()

    def _take_snapshot(self) -> None:
        self.recovery = take_snapshot(self._segments)

    def refresh(self) -> None:
        """Reader: take a newer snapshot (manifest and tail), reading only the frames appended
        since while the manifest is unchanged. Writer: nothing to do."""
        with self._mutex:
            self._check_open()
            if not self._writer:
                self.recovery = follow_snapshot(self._segments, self.recovery)

    # ----------------------------------------------------------------------------- state

    @property
    def next_seq(self) -> int:
        """The seq the next appended row gets."""
        return self._segments.active.end_seq

    @property
    def start_seq(self) -> int:
        """The log start: the first seq still held (advances with retention)."""
        return self._segments.manifest.log_start_seq

    @property
    def retired_ts_max(self) -> int | None:
        """The largest ts retention deleted (None: nothing retired, or not recorded)."""
        return self._segments.manifest.retired_ts_max

    @property
    def writer(self) -> bool:
        """Whether this instance holds the writer lock."""
        return self._writer

    @property
    def failed(self) -> bool:
        """True after an fsync failure: changes are refused until the log is reopened."""
        return self._latch.error is not None

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"the log at {self.root} is closed")

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """Serialize a change; refuse it on a reader or a failed log; fail on fsync errors."""
        with self._mutex:
            self._check_open()
            if not self._writer:
                raise ReadOnlyError(f"the log at {self.root} was opened with writer=False")
            if self._latch.error is not None:
                raise self._latch.error
            with self._latch.failing_on_fsync():
                try:
                    yield
                except VersionConflictError as exc:
                    # another writer's object or manifest: this one lost the race (object store)
                    raise self._segments.lost_race() from exc
                except OSError as exc:
                    if isinstance(exc, StorageError):
                        raise
                    raise WriteFailedError(self.root, exc) from exc

    # ----------------------------------------------------------------------------- append

    def append(self, batch: pa.RecordBatch | pa.Table) -> AppendResult:
        """Append rows, giving them dense seqs from `next_seq` (the seq column is overwritten).

        The rows go into the active segment as ONE frame (all or nothing after a crash) and, with
        durability "always", one fsync before returning. A segment that is full after it is
        sealed, split into sealed segments of at most `segment_events_max` events, by the
        background sealer: the Parquet files are written on another thread while appends go on,
        and a later change (or `close`, `roll`, `settle`) lists them in the manifest; until then
        the active segment holds the rows and is the source. `sealed` names the segments this
        call listed. If it raises, none of the rows were appended (`WriteFailedError`: undone),
        except after an fsync failure (`LogFailedError`), when they may or may not be on disk:
        reopen to find out. A seal that fails after the rows are durable does not fail the
        append (the active segment stays the source); a later change retries it and logs why.
        """
        with self._changing():
            data = conform(batch, self.schema, self._not_null_indices)
            now = self._clock()
            first = self.next_seq
            sealed = self._sealer.publish_finished()
            rows = data.num_rows
            if rows == 0:
                if self._sealer.roll_due(now):
                    sealed += self._sealer.seal()
                return AppendResult(first, first, tuple(sealed))
            seqs = pa.array(np.arange(first, first + rows, dtype=np.int64))
            seq_index = self._segments.seq_index
            data = data.set_column(seq_index, self.schema.field(seq_index), seqs)
            if self._sealer.roll_due(now):
                sealed += self._sealer.seal(carry=True)
            # One frame: after a crash the batch is there whole or not at all, so a command's
            # events (and an apply batch) are never torn; the seal splits at segment_events_max.
            self._write(data, now)
            if self._sealer.full():
                sealed += self._sealer.seal_after_append(background=self.settings.seal_in_background)
            return AppendResult(first, self.next_seq, tuple(sealed))

    def _write(self, chunk: pa.RecordBatch, now_ms: int) -> None:
        """One frame into the active segment, then an fsync as durability asks."""
        active = self._segments.active
        created = active.append(chunk, now_ms)
        durability = self.settings.durability
        if created and durability != "none":
            sync_dir(self._fs, self._segments.log_dir)
        if durability == "always" or (
            durability == "batch"
            and (
                active.unsynced_events >= self.settings.batch_fsync_events_effective
                or now_ms - self._segments.active_synced_ms >= self.settings.batch_fsync_interval_ms
            )
        ):
            active.sync()
            self._segments.active_synced_ms = now_ms

    # ----------------------------------------------------------------------------- seal

    def roll(self) -> SegmentInfo | None:
        """Seal the active segment now; None if it is empty."""
        with self._changing():
            sealed = self._sealer.seal()
            return sealed[-1] if sealed else None

    def settle(self) -> list[SegmentInfo]:
        """Wait for the background sealer and list what it wrote; the segments listed."""
        with self._changing():
            return self._sealer.finish(wait=True)

    @property
    def sealing(self) -> bool:
        """A segment is being sealed in the background (not listed yet: `settle` lists it)."""
        return self._sealer.running

    def wait_for_sealer(self, timeout: float | None = None) -> bool:
        """Block until the sealer thread has no write running (a seal's Parquet files, the WAL
        after them) (True), without listing what it wrote: the next change does, or reports its
        error. False on timeout."""
        return self._sealer.wait(timeout)

    def sync(self) -> None:
        """Fsync the active segment now (for durability "batch" or "none")."""
        with self._changing():
            self._segments.active.sync()
            self._segments.active_synced_ms = self._clock()

    # ----------------------------------------------------------------------------- reads

    def segments(self) -> list[SegmentInfo]:
        """Sealed segments in seq order, as the manifest lists them; each `path` is one a reader
        can open (on an object store, a local copy of the object)."""
        with self._mutex:
            return [self._segments.readable_info(e) for e in self._segments.manifest.segments]

    def segment_paths(self) -> list[Path]:
        """Paths of the sealed segments in seq order (what Spark or DuckDB should read).

        Each file is checked once per process against the crc32c the manifest records, because
        those readers do not verify Parquet page checksums: a damaged segment raises
        `CorruptSegmentError` naming the file and its seqs instead of answering from bad bytes.
        """
        return self._reading(self._reads.checked_paths)

    def tail(self) -> pa.Table:
        """The active segment's rows (decoded tail), in seq order, columns in schema order."""
        with self._mutex:
            return self._segments.active.table()

    def read(
        self,
        *,
        seq_gte: int | None = None,
        seq_lt: int | None = None,
        ts_gte: int | None = None,
        ts_lt: int | None = None,
        columns: list[str] | None = None,
        where: Mapping[str, Sequence[object]] | None = None,
        newest: int | None = None,
    ) -> pa.Table:
        """Rows of sealed segments and tail within the bounds, in seq order.

        `where` keeps the rows whose column holds one of the values listed (a keyed read:
        `{"consumer_group": ["g1"]}`); `newest` keeps only the newest N rows, reading segments
        newest first until it has them. Prunes whole segments by the manifest's seq/ts ranges
        and row groups by the resident index of their statistics (see `last_read_stats`); the
        active segment's rows of a key are found by its tail index. A lower bound before the
        log start raises `LogRangeError` naming the earliest seq and ts still held.
        """
        bounds = SeqTsRange(seq_gte, seq_lt, ts_gte, ts_lt)
        wanted = check_columns(self.schema, columns)
        conditions = check_where(self.schema, where)
        if newest is not None and newest < 0:
            raise StorageError(f"newest must be >= 0, got {newest}")

        def read_once() -> pa.Table:
            table, self.last_read_stats = self._reads.read(bounds, wanted, conditions, newest)
            return table

        return self._reading(read_once)

    def seq_after_ts(self, ts: int) -> int:
        """The first seq whose ts is > `ts` (the next seq when none is): for callers whose ts
        never decreases along seq. One segment is counted, by its row groups' ts ranges or its
        resident time index; the tail is searched."""
        return self._reading(lambda: self._reads.seq_after_ts(ts))

    def ts_of_seq(self, seq: int) -> int | None:
        """The ts of the row at `seq`; None when the log does not hold it."""
        return self._reading(lambda: self._reads.ts_of_seq(seq))

    def _reading(
        self, read_once: Callable[[], _T], retry_on: type[Exception] = CorruptSegmentError
    ) -> _T:
        """Run `read_once` on this instance's snapshot, retrying a reader's on `retry_on`."""
        with self._mutex:
            self._check_open()
            for attempt in range(READER_RETRIES_MAX):
                try:
                    return read_once()
                except retry_on:
                    # A reader's snapshot may name files a writer has since swapped or retired.
                    if self._writer or attempt + 1 == READER_RETRIES_MAX or not self._moved_on():
                        raise
            raise AssertionError("unreachable")

    def _moved_on(self) -> bool:
        """Reader: re-read the manifest; True (and a new snapshot) if it changed."""
        report = take_newer_snapshot(self._segments)
        if report is None:
            return False
        self.recovery = report
        self._reads.forget_footers()  # names may have been reused by the writer
        return True

    # ----------------------------------------------------------------------------- checkpoints

    def write_checkpoint(self, seq: int, table: pa.Table) -> Path:
        """Store `table` as the checkpoint at `seq` (atomic file, then listed in the manifest)."""
        self._checkpointing.wait()
        with self._changing():
            return checkpoints.write_checkpoint(self._segments, self.settings, seq, table)

    def start_checkpoint(self, seq: int, table: pa.Table) -> None:
        """`write_checkpoint` with the file written on a thread of its own while appends go on
        (a writer's Parquet encode and fsyncs of a 160,000-key checkpoint took ~95 ms), then
        listed under the log's lock. One at a time: this waits for the one before. A failed
        fsync fails the log as any does; another failure is logged and the checkpoint is not
        listed (checkpoints are derived: the next one is written again)."""
        self._checkpointing.wait()
        with self._changing():
            path = checkpoints.checkpoint_to_write(self._segments, seq)
        if path is not None:
            self._checkpointing.start(seq, lambda: self._write_checkpoint_behind(seq, path, table))

    def _write_checkpoint_behind(self, seq: int, path: Path, table: pa.Table) -> None:
        try:
            with self._latch.failing_on_fsync():
                size, crc = checkpoints.write_checkpoint_file(self._segments, self.settings,
                                                              path, table)
            with self._changing():
                checkpoints.list_checkpoint(self._segments, seq, path, size, crc)
        except Exception as exc:  # (the thread's end: nobody else would see it)
            logger.warning("the checkpoint at seq %d was not written (the next one will be): %s",
                           seq, exc)

    def newest_checkpoint_seq(self) -> int | None:
        """The newest checkpoint's seq, one being written included (without waiting for it)."""
        seqs = [] if (pending := self._checkpointing.pending_seq) is None else [pending]
        with self._mutex:
            seqs += checkpoints.checkpoint_seqs(self._segments)[-1:]
        return max(seqs, default=None)

    def checkpoints(self) -> list[int]:
        """Seqs of the checkpoints, ascending (once one being written is listed)."""
        self._checkpointing.wait()
        with self._mutex:
            return checkpoints.checkpoint_seqs(self._segments)

    def checkpoint_path(self, seq: int) -> Path:
        """Where the checkpoint at `seq` is (or would be); a listed one on an object store is
        a local copy of the object, which readers can open."""
        with self._mutex:
            return checkpoints.readable_checkpoint_path(self._segments, seq)

    def read_checkpoint(self, seq: int) -> pa.Table:
        """The table stored as the checkpoint at `seq`."""
        try:
            return self._reading(
                lambda: checkpoints.read_checkpoint(self._segments, seq), FileNotFoundError
            )
        except FileNotFoundError:
            where = self._segments.where(checkpoints.checkpoint_path(self._segments, seq))
            raise CorruptSegmentError(where, None, None, "checkpoint missing") from None

    # ----------------------------------------------------------------------------- retention

    def retain(
        self,
        *,
        covered_seq: int,
        age_ms_max: int | None = None,
        bytes_max: int | None = None,
    ) -> RetentionResult:
        """Delete old sealed segments up to `covered_seq` by age or total bytes; advance start.

        Only whole segments with end_seq <= covered_seq, oldest first, that are older than
        `age_ms_max` (ts_max < now - age) or while the log exceeds `bytes_max`; with neither
        limit nothing is deleted. Checkpoints before the newest one at or before the new start
        are dropped. One manifest commit, then the files are deleted.
        """
        for name, value in (("age_ms_max", age_ms_max), ("bytes_max", bytes_max)):
            if value is not None and value < 0:
                raise StorageError(f"{name} must be >= 0, got {value}")
        self._checkpointing.wait()
        with self._changing():
            segments = self._segments
            current = segments.manifest
            plan = plan_retention(
                current.segments, current.checkpoints, start_seq=current.log_start_seq,
                active_bytes=segments.active.bytes, covered_seq=covered_seq, now_ms=self._clock(),
                age_ms_max=age_ms_max, bytes_max=bytes_max,
            )
            if not plan.retire and not plan.drop_checkpoints:
                return RetentionResult((), current.log_start_seq, ())
            retired_ts = current.retired_ts_max
            for entry in plan.retire:
                retired_ts = entry.ts_max if retired_ts is None else max(retired_ts, entry.ts_max)
            segments.commit(
                segments=current.segments[len(plan.retire):],
                log_start_seq=plan.start_seq,
                retired_ts_max=retired_ts,
                checkpoints=plan.keep_checkpoints,
            )
            self._reads.forget_footers()
            for entry in plan.retire:
                remove_quietly(self._fs, segments.log_dir / entry.file)
            for checkpoint in plan.drop_checkpoints:
                remove_quietly(self._fs, segments.checkpoint_dir / checkpoint.file)
            return RetentionResult(
                tuple(segments.info(e) for e in plan.retire),
                plan.start_seq,
                tuple(c.seq for c in plan.drop_checkpoints),
            )

    # ----------------------------------------------------------------------------- compaction

    def replace(self, old: Sequence[SegmentInfo], new_files: Sequence[Path]) -> list[SegmentInfo]:
        """Swap a contiguous run of live segments for Parquet files covering the same seqs.

        The new files are verified (rows, seq range, density, schema), moved into `log/` under
        free 20-digit names, fsynced, and committed by ONE manifest update; the old files are
        deleted after it. A crash before the commit leaves the old set live (the moved files are
        unlisted and deleted on open), after it the new set.
        """
        self._checkpointing.wait()
        with self._changing():
            replaced = replace_segments(self._segments, old, new_files)
            self._reads.forget_footers()  # a later file may reuse a deleted file's name
            return replaced

    # ----------------------------------------------------------------------------- closing

    def close(self) -> None:
        """Fsync what was appended and release the writer lock (a checkpoint being written is
        finished first). Idempotent."""
        self._checkpointing.stop()
        with self._mutex:
            if self._closed:
                return
            try:
                if self._writer and self._latch.error is None:
                    with self._latch.failing_on_fsync():
                        self._sealer.publish_before_close()
                        self._segments.active.sync()
            finally:
                self._closed = True
                self._sealer.stop()
                self._segments.active.close()
                if self._lock is not None:
                    self._lock.release()

    def _abandon(self) -> None:
        """Drop descriptors and the lock with no further I/O, as a killed process would (tests;
        a checkpoint being written ends first, as if the kill had come after it)."""
        self._checkpointing.stop()
        with self._mutex:
            self._closed = True
            self._sealer.stop()
            self._segments.active.close()
            if self._lock is not None:
                self._lock.release()

    def __enter__(self) -> SegmentedLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        role = "writer" if self._writer else "reader"
        return (
            f"SegmentedLog({str(self.root)!r}, {role}, start_seq={self.start_seq}, "
            f"next_seq={self.next_seq}, segments={len(self._segments.manifest.segments)})"
        )

