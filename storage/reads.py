"""Reads by seq and ts range over the live segments: sealed Parquet files, then the active tail.

Whole segments are pruned by the manifest's seq/ts ranges, row groups by Parquet statistics
(`sealed.read_segment`). Each sealed file is checked once per process against the crc32c the
manifest records; a read that reaches history retention deleted is refused, naming the earliest
seq and ts still held.
"""

from __future__ import annotations

from pathlib import Path

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.decoded import DecodedRowGroups
from storage.errors import CorruptSegmentError, LogRangeError
from storage.fs import FileSystem
from storage.index import SegmentIndex, SegmentIndexes, TimeIndex, Where, take_rows, value_mask
from storage.manifest import Manifest, SegmentEntry
from storage.schema import SEQ_COLUMN, TS_COLUMN
from storage.sealed import (
    ReadStats,
    SegmentRef,
    SeqTsRange,
    corrupt,
    range_mask,
    read_segment,
    segment_index,
)
from storage.segments import LogSegments

# Sealed files are checksummed in pieces of this size (no whole-file buffer for big segments).
CRC_CHUNK_BYTES = 8 * 1024 * 1024
# Above this many rows to read for a question about a time (every row group of a clustered
# segment spans its time), a segment's time index is built and kept instead.
TIME_INDEX_ROWS_MIN = 65_536


class RangeReader:
    """Reads of `segments` as they stand, with what makes them cheap: the resident index
    (footers and their row groups' ranges per sealed file, storage/index.py) and the files
    already checked against their crc32c."""

    def __init__(self, segments: LogSegments, use_index: bool = True):
        self._segments = segments
        self._indexes = SegmentIndexes()
        self._decoded = DecodedRowGroups()
        self._verified_files: set[tuple[str, int, int]] = set()
        # Without the index (a check, and the bench's "before"): every read parses footers
        # afresh, decodes every row group of its seq/ts range and scans the tail.
        self._use_index = use_index

    def forget_footers(self) -> None:
        """Drop the resident index: after a swap, a retention or a new snapshot a file name
        may be reused for other content."""
        self._indexes = SegmentIndexes()
        self._decoded = DecodedRowGroups()

    def checked_paths(self) -> list[Path]:
        """Paths of the sealed segments in seq order, each checked against its crc32c."""
        segments = self._segments
        paths = []
        for entry in segments.manifest.segments:
            # the file those readers will open: on an object store its local copy
            path = segments.readable_info(entry).path
            self._check_file(entry, path)
            paths.append(path)
        return paths

    def read(self, bounds: SeqTsRange, wanted: list[str], where: Where | None = None,
             newest: int | None = None) -> tuple[pa.Table, ReadStats]:
        """Rows within `bounds` whose `where` columns hold one of the values listed, with
        columns `wanted`, in seq order, and what the read touched. `newest`: only the newest
        N such rows (segments are read newest first until N are found)."""
        segments = self._segments
        schema = segments.schema
        current = segments.manifest
        self._check_range(bounds, current)
        needed = set(wanted) | {SEQ_COLUMN, TS_COLUMN} | set(where or ())
        read_columns = [n for n in schema.names if n in needed]
        target = pa.schema([schema.field(n) for n in read_columns])
        stats = ReadStats()
        pieces: list[pa.Table] = []  # newest first
        found = 0
        active = segments.active
        if active.events and bounds.overlaps(
            active.base_seq, active.end_seq - 1, active.ts_min, active.ts_max
        ):
            tail = self._tail_rows(bounds, where, read_columns)
            pieces.append(_as_schema(tail, target))
            found += tail.num_rows
        for entry in reversed(current.segments):
            if newest is not None and found >= newest:
                stats.segments_skipped += 1
                continue
            if not bounds.overlaps(entry.base_seq, entry.end_seq - 1, entry.ts_min, entry.ts_max):
                stats.segments_skipped += 1
                continue
            stats.segments_read += 1
            piece = read_segment(segments.fs, self._ref(entry), bounds, read_columns, stats,
                                 self._index_cache(), where, self._use_index,
                                 self._decoded if self._use_index else None)
            pieces.append(_as_schema(piece, target))
            found += piece.num_rows
        if not pieces:
            return target.empty_table().select(wanted), stats
        table = pa.concat_tables(pieces[::-1])
        if newest is not None and table.num_rows > newest:
            table = table.slice(table.num_rows - newest)
        return table.select(wanted), stats

    def _ref(self, entry: SegmentEntry) -> SegmentRef:
        """A live segment to read, its file checked against the manifest's crc32c first."""
        self._check_file(entry)
        return SegmentRef(self._segments.log_dir / entry.file, entry.base_seq, entry.end_seq,
                          entry.events, entry.bytes)

    def _tail_rows(self, bounds: SeqTsRange, where: Where | None,
                   read_columns: list[str]) -> pa.Table:
        """The active segment's rows within `bounds` matching `where`: a keyed read finds its
        rows in memory by the tail index of its first column (row i has seq base + i)."""
        active = self._segments.active
        table = active.table()
        conditions = dict(where or {})
        if conditions and self._use_index:
            name, values = next(iter(conditions.items()))
            del conditions[name]
            positions = active.tail_index(name).positions(values)
            low = 0 if bounds.seq_gte is None else bounds.seq_gte - active.base_seq
            high = active.events if bounds.seq_lt is None else bounds.seq_lt - active.base_seq
            if low > 0 or high < active.events:
                positions = positions[(positions >= low) & (positions < high)]
            if len(positions) and (bounds.ts_gte is not None or bounds.ts_lt is not None):
                ts = active.tail_values(TS_COLUMN).at(positions)
                keep = np.ones(len(positions), bool)
                if bounds.ts_gte is not None:
                    keep &= ts >= bounds.ts_gte
                if bounds.ts_lt is not None:
                    keep &= ts < bounds.ts_lt
                positions = positions[keep]
            # the rows taken are within `bounds` already: only the other conditions filter
            table = take_rows(table.select(read_columns), positions)
            mask = None
        else:
            table = table.select(read_columns)
            mask = None if bounds.unbounded else range_mask(table, bounds)
        for name, values in conditions.items():
            part = pa.array(value_mask(table.column(name), values))
            mask = part if mask is None else pc.and_(mask, part)
        return table if mask is None else table.filter(mask)

    def _index_cache(self) -> SegmentIndexes:
        """The resident index, or (without it) a fresh one for this read only."""
        return self._indexes if self._use_index else SegmentIndexes()

    # ----------------------------------------------------------------------------- time

    def seq_after_ts(self, ts: int) -> int:
        """The first seq whose ts is > `ts`, for a log whose ts never decreases along seq:
        one segment's rows counted (by its row groups' ts ranges, or its time index when the
        segment is clustered and every row group spans its time), or the tail searched."""
        segments = self._segments
        current = segments.manifest
        for entry in current.segments:
            if entry.ts_max > ts:
                if entry.ts_min > ts:
                    return entry.base_seq
                return entry.base_seq + self._count_ts_at_most(entry, ts)
        active = segments.active
        if not active.events:
            return active.end_seq
        tail_ts = active.table().column(TS_COLUMN).to_numpy()
        return active.base_seq + int(np.searchsorted(tail_ts, ts, side="right"))

    def ts_of_seq(self, seq: int) -> int | None:
        """The ts of the row at `seq` (None when the log does not hold it)."""
        segments = self._segments
        active = segments.active
        if active.base_seq <= seq < active.end_seq:
            batch = active.table().column(TS_COLUMN)
            return int(batch[seq - active.base_seq].as_py())
        for entry in segments.manifest.segments:
            if entry.base_seq <= seq < entry.end_seq:
                ref = self._ref(entry)
                index_cache = self._index_cache()
                index = segment_index(segments.fs, ref, index_cache)
                bounds = SeqTsRange(seq, seq + 1)
                chosen = index.choose(bounds, None)
                if (self._use_index
                        and sum(int(index.rows[rg]) for rg in chosen) > TIME_INDEX_ROWS_MIN):
                    return self._time_index(entry, ref).ts_of(seq)
                table = read_segment(segments.fs, ref, bounds, [SEQ_COLUMN, TS_COLUMN],
                                     ReadStats(), index_cache)
                return int(table.column(TS_COLUMN)[0].as_py()) if table.num_rows else None
        return None

    def _count_ts_at_most(self, entry: SegmentEntry, ts: int) -> int:
        """Rows of sealed `entry` with ts <= `ts`: whole row groups by their ts range, the
        straddling ones read, or (when they are most of the segment) its time index."""
        segments = self._segments
        ref = self._ref(entry)
        index = segment_index(segments.fs, ref, self._index_cache())
        times = index.ranges(TS_COLUMN)
        below, straddling = 0, []
        for rg in range(index.row_groups):
            if times is None or not times.known[rg]:
                if times is None or times.valued[rg]:
                    straddling.append(rg)
            elif times.maxs[rg] <= ts:
                below += int(index.rows[rg])
            elif times.mins[rg] <= ts:
                straddling.append(rg)
        if not straddling:
            return below
        if (self._use_index
                and sum(int(index.rows[rg]) for rg in straddling) > TIME_INDEX_ROWS_MIN):
            return self._time_index(entry, ref).count_at_most(ts)
        column = _read_ts(segments.fs, ref, index, straddling)
        return below + int(np.count_nonzero(column <= ts))

    def _time_index(self, entry: SegmentEntry, ref: SegmentRef) -> TimeIndex:
        key = (str(ref.path), ref.bytes, ref.base_seq, ref.end_seq)
        found = self._indexes.time_index(key)
        if found is None:
            index = segment_index(self._segments.fs, ref, self._indexes)
            ts = _read_ts(self._segments.fs, ref, index, list(range(index.row_groups)))
            ts = np.sort(ts)  # ts never decreases along seq: sorted, the ts of each seq
            found = TimeIndex(entry.base_seq, ts)
            self._indexes.put_time_index(key, found)
        return found

    def _check_file(self, entry: SegmentEntry, path: Path | None = None) -> None:
        """The whole file's crc32c equals the manifest's (once per file and process); `path`
        if given is where it is read from (a local copy of an object)."""
        if entry.crc32c is None:
            return  # swapped in by a version that did not record checksums
        key = (entry.file, entry.bytes, entry.crc32c)
        if key in self._verified_files:
            return
        listed = self._segments.log_dir / entry.file
        where = self._segments.where(listed)
        path = path if path is not None else listed
        try:
            source = self._segments.fs.open_input(path)
        except FileNotFoundError:
            raise CorruptSegmentError(where, entry.base_seq, entry.end_seq,
                                      "listed in the manifest but missing") from None
        except OSError as exc:
            raise CorruptSegmentError(where, entry.base_seq, entry.end_seq,
                                      f"cannot open: {exc}") from exc
        size, crc = 0, 0
        try:
            while True:
                chunk = source.read(CRC_CHUNK_BYTES)
                if not chunk:
                    break
                size += len(chunk)
                crc = crc32c.crc32c(chunk, crc)
        except OSError as exc:
            raise CorruptSegmentError(where, entry.base_seq, entry.end_seq,
                                      f"cannot read: {exc}") from exc
        finally:
            source.close()
        if size != entry.bytes:
            raise CorruptSegmentError(where, entry.base_seq, entry.end_seq,
                                      f"file holds {size} bytes, the manifest says {entry.bytes}")
        if crc != entry.crc32c:
            raise CorruptSegmentError(
                where, entry.base_seq, entry.end_seq,
                f"crc32c {crc} differs from the manifest's {entry.crc32c}: the file changed after "
                "it was written (run `offset-ledger verify` for the whole log)")
        self._verified_files.add(key)

    def _earliest_ts(self, current: Manifest) -> int | None:
        """The first ts a read by time may start from: after every retired event's."""
        if current.retired_ts_max is not None:
            return current.retired_ts_max + 1
        if current.segments:
            return current.segments[0].ts_min
        return self._segments.active.ts_min

    def _check_range(self, bounds: SeqTsRange, current: Manifest) -> None:
        """Refuse bounds that reach history retention deleted (DESIGN.md: a clear error)."""
        start = current.log_start_seq
        retired_ts = current.retired_ts_max
        if start == 0 and retired_ts is None:
            return
        asked = None
        if bounds.seq_gte is not None and bounds.seq_gte < start:
            asked = f"seq_gte={bounds.seq_gte}"
        elif bounds.seq_gte is None and bounds.seq_lt is not None and bounds.seq_lt <= start:
            asked = f"seq_lt={bounds.seq_lt}"
        elif retired_ts is not None and bounds.ts_gte is not None and bounds.ts_gte <= retired_ts:
            asked = f"ts_gte={bounds.ts_gte}"
        elif (retired_ts is not None and bounds.ts_gte is None and bounds.ts_lt is not None
              and bounds.ts_lt <= retired_ts):
            asked = f"ts_lt={bounds.ts_lt}"
        if asked is not None:
            raise LogRangeError(asked, start, self._earliest_ts(current))


def _read_ts(fs: FileSystem, ref: SegmentRef, index: SegmentIndex, row_groups: list[int]
             ) -> np.ndarray:
    """The ts column of some row groups of a sealed segment."""
    try:
        source = fs.open_input(ref.path)
    except OSError as exc:
        raise corrupt(ref, f"cannot open: {exc}") from exc
    try:
        reader = pq.ParquetFile(source, metadata=index.md, page_checksum_verification=True)
        table = reader.read_row_groups(row_groups, columns=[TS_COLUMN], use_threads=False)
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise corrupt(ref, f"unreadable data: {exc}") from exc
    finally:
        source.close()
    return table.column(TS_COLUMN).to_numpy()


def _as_schema(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with `schema` (its columns unchanged): rebuilt only when its own differs, in
    nullability or metadata (a rebuild costs ~20 us, most of a small read's overhead)."""
    if table.schema.equals(schema, check_metadata=True):
        return table
    return pa.Table.from_arrays(table.columns, schema=schema)
