"""The active segment `log/<base seq>.wal`: append-only frames on disk, the same batches in memory.

Keeping the appended Arrow batches in memory lets sealing write Parquet without decoding the
file; the file exists for recovery, which validates it frame by frame and cuts a torn or corrupt
tail (Kafka's `LogSegment.recover`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pyarrow as pa

from storage import names
from storage.errors import CorruptSegmentError, LogFailedError, StorageError
from storage.frames import DecodedFrames, FrameEncoder, SeqChain, decode_frames
from storage.fs import FileHandle, FileSystem, sync_handle, write_all
from storage.index import TailIndex, TailValues

# Small batches are merged in memory so that a segment of single-row appends does not hold a
# million Arrow objects: 32 at a time, and those merges again 32 at a time (`_remember`). A
# merge's cost is per array merged, so each holds the writer briefly: merging 256 server-sized
# appends at once took 3-5 ms of a server's writer thread, every 256 batches, and made its p99.
_SMALL_BATCH_ROWS = 4096
_MERGE_FANIN = 32


def fewer_batches(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """`batches` merged as a run stack (Timsort's): each batch more than twice the rows of the
    next one, so a segment of n rows is held in O(log n) batches. Runs are planned on row counts
    first and each concatenated once, so a call copies a row at most once, and over a segment's
    life a row is copied O(log n) times. A read's cost per batch (a take, a slice per column)
    then stays a handful of calls however small the appends were: a reader following a server's
    3-event frames held a thousand batches of 768 rows at 1M events and read 11x slower."""
    runs: list[list[int]] = []
    rows: list[int] = []
    for i, batch in enumerate(batches):
        runs.append([i])
        rows.append(batch.num_rows)
        while len(rows) > 1 and rows[-2] <= 2 * rows[-1]:
            last_rows, last_run = rows.pop(), runs.pop()
            rows[-1] += last_rows
            runs[-1].extend(last_run)
    return [batches[run[0]] if len(run) == 1 else pa.concat_batches([batches[i] for i in run])
            for run in runs]


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


class RecoveredTail(msgspec.Struct, frozen=True):
    """What recovery found in an active segment file."""

    path: str
    events: int
    bytes_kept: int
    bytes_cut: int
    reason: str | None


class ActiveSegment:
    """The segment being appended to; seq column index and ts column index are given by the log."""

    def __init__(
        self,
        fs: FileSystem,
        directory: Path,
        base_seq: int,
        schema: pa.Schema,
        seq_index: int,
        ts_index: int,
        encoder: FrameEncoder | None = None,
    ):
        self.fs = fs
        # the log's encoder, kept from segment to segment (its buffer with it)
        self._encoder = encoder or FrameEncoder()
        self.base_seq = base_seq
        self.path = directory / names.wal_name(base_seq)
        self.schema = schema
        self._seq_index = seq_index
        self._ts_index = ts_index
        self._handle: FileHandle | None = None
        self._batches: list[pa.RecordBatch] = []
        # Rows after `_batches`, in seq order: merges of small batches, then small batches.
        self._merged: list[pa.RecordBatch] = []
        self._small: list[pa.RecordBatch] = []
        self._merged_rows = self._small_rows = 0
        self.events = 0
        self.bytes = 0
        self.ts_min: int | None = None
        self.ts_max: int | None = None
        self.rolling_ts_ms: int | None = None
        self.unsynced_events = 0
        # Per column asked about: the rows of each value (extended on read, never on append).
        self._tail_indexes: dict[str, TailIndex] = {}
        self._tail_values: dict[str, TailValues] = {}

    @property
    def end_seq(self) -> int:
        """Seq after the last event held."""
        return self.base_seq + self.events

    def load(
        self, *, truncate: bool, acknowledged: Callable[[int], str | None] | None = None,
    ) -> RecoveredTail:
        """Read the file's intact prefix into memory; with `truncate`, cut the rest from disk.

        Only a torn last write is cut: a damaged frame with an intact one after it, or one that
        `acknowledged` (given the damaged frame's first seq) says was acknowledged, is refused.
        """
        try:
            data = self.fs.read_bytes(self.path)
        except FileNotFoundError:
            return RecoveredTail(str(self.path), 0, 0, 0, None)
        decoded = self._decode(data, self.base_seq)
        if truncate and decoded.error is not None:
            first = self.base_seq + sum(b.num_rows for b in decoded.batches)
            proof = acknowledged(first) if decoded.torn and acknowledged is not None else None
            if not decoded.torn or proof is not None:
                # Not what a crash leaves: cutting here would drop acknowledged frames silently.
                what = f"acknowledged ({proof})" if proof is not None else "corrupt"
                raise CorruptSegmentError(
                    self.path, first, None,
                    f"{decoded.error}, with {decoded.bytes_cut} bytes from there to the end of "
                    f"the file: {what}, not a torn last write; refusing to cut it. The "
                    f"{decoded.end_offset} bytes before it are intact (truncate the file to that "
                    f"size to discard seq {first} onwards)",
                )
        for batch in decoded.batches:
            self._remember(batch)
        self.bytes = decoded.end_offset
        if truncate and decoded.bytes_cut:
            handle = self.fs.open_append(self.path)
            try:
                handle.truncate(decoded.end_offset)
                sync_handle(handle, self.path)
            finally:
                handle.close()
        return RecoveredTail(
            str(self.path), self.events, decoded.end_offset, decoded.bytes_cut, decoded.error
        )

    def follow(self) -> bool:
        """Reader: decode the frames the writer appended since this segment was loaded (a torn
        last frame waits for the next call). False when the file no longer continues what was
        read (it is gone or shorter): take a new snapshot then."""
        try:
            source = self.fs.open_input(self.path)
        except FileNotFoundError:
            return False
        try:
            size = source.size()
            if size < self.bytes:
                return False
            if size == self.bytes:
                return True
            source.seek(self.bytes)
            data = source.read(size - self.bytes)
        finally:
            source.close()
        decoded = self._decode(data, self.end_seq)
        for batch in decoded.batches:
            self._remember(batch)
        self.bytes += decoded.end_offset
        return decoded.error is None or decoded.torn

    def _decode(self, data: bytes, first_seq: int) -> DecodedFrames:
        return decode_frames(data, self.schema,
                             validate=SeqChain(first_seq, self._seq_index, self._ts_index))

    def append(self, batch: pa.RecordBatch, now_ms: int) -> bool:
        """Write `batch` as one frame (no fsync); True if this created the file.

        The first append into the segment starts its age (`rolling_ts_ms`) at `now_ms`.

        A failed write is undone by truncating back to the previous end; if even that fails the
        file's content is unknown and `LogFailedError` is raised.
        """
        try:
            header, payload = self._encoder.encode(batch)
        except ValueError as exc:
            raise StorageError(f"cannot append to {self.path}: {exc}; append fewer rows") from exc
        created = False
        if self._handle is None:
            created = self.bytes == 0 and not self.fs.exists(self.path)
            self._handle = self.fs.open_append(self.path)
        try:
            write_all(self._handle, header)
            write_all(self._handle, payload)
        except OSError as exc:
            try:
                self._handle.truncate(self.bytes)
            except OSError as undo_exc:
                raise LogFailedError(undo_exc) from exc
            raise
        self.bytes += len(header) + payload.size
        self.unsynced_events += batch.num_rows
        if self.events == 0:
            self.rolling_ts_ms = now_ms
        self._remember(batch)
        return created

    def _remember(self, batch: pa.RecordBatch) -> None:
        ts = batch.column(self._ts_index).to_numpy()  # no nulls (checked): zero copy
        low, high = int(ts.min()), int(ts.max())
        if self.rolling_ts_ms is None:
            self.rolling_ts_ms = high
        self.ts_min = low if self.ts_min is None else min(self.ts_min, low)
        self.ts_max = high if self.ts_max is None else max(self.ts_max, high)
        self.events += batch.num_rows
        if batch.num_rows >= _SMALL_BATCH_ROWS:
            self._merge_small()
            self._batches.append(batch)
            return
        self._small.append(batch)
        self._small_rows += batch.num_rows
        if len(self._small) < _MERGE_FANIN and self._small_rows < _SMALL_BATCH_ROWS:
            return
        self._merged.append(_concat(self._small))
        self._merged_rows += self._small_rows
        self._small, self._small_rows = [], 0
        if len(self._merged) >= _MERGE_FANIN or self._merged_rows >= _SMALL_BATCH_ROWS:
            self._batches.append(_concat(self._merged))
            self._merged, self._merged_rows = [], 0

    def _merge_small(self) -> None:
        """Every row after `_batches` into one more batch of it (for a read, a seal, or before
        a large batch)."""
        pending = self._merged + self._small
        if pending:
            self._batches.append(_concat(pending))
            self._merged, self._small = [], []
            self._merged_rows = self._small_rows = 0

    def sync(self) -> None:
        """Fsync the file if anything was written since the last fsync."""
        if self._handle is not None and self.unsynced_events:
            sync_handle(self._handle, self.path)
        self.unsynced_events = 0

    def batches(self) -> list[pa.RecordBatch]:
        """The segment's rows as Arrow batches, in seq order (as appended: what a seal takes)."""
        self._merge_small()
        return list(self._batches)

    def table(self) -> pa.Table:
        """The segment's rows as one table for a read: in O(log n) chunks (`fewer_batches`,
        merged here so that appends and seals pay nothing for it)."""
        self._merge_small()
        self._batches = fewer_batches(self._batches)
        return pa.Table.from_batches(self._batches, schema=self.schema)

    def tail_index(self, column: str) -> TailIndex:
        """The rows of each value of `column`, extended by the rows appended since the last
        read that asked (so appends pay nothing for it)."""
        index = self._tail_indexes.get(column)
        if index is None:
            index = self._tail_indexes[column] = TailIndex(column)
        index.extend(self.table())
        return index

    def tail_values(self, column: str) -> TailValues:
        """An integer column's values (no nulls) as one array, extended like `tail_index`."""
        values = self._tail_values.get(column)
        if values is None:
            values = self._tail_values[column] = TailValues(column)
        values.extend(self.table())
        return values

    def close(self) -> None:
        """Close the file handle (no fsync)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            handle.close()
