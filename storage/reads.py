"""Reads by seq and ts range over the live segments: sealed Parquet files, then the active tail.

Whole segments are pruned by the manifest's seq/ts ranges, row groups by Parquet statistics
(`sealed.read_segment`). Each sealed file is checked once per process against the crc32c the
manifest records; a read that reaches history retention deleted is refused, naming the earliest
seq and ts still held.
"""

from __future__ import annotations

from pathlib import Path

import crc32c
import pyarrow as pa

from storage.errors import CorruptSegmentError, LogRangeError
from storage.manifest import Manifest, SegmentEntry
from storage.schema import SEQ_COLUMN, TS_COLUMN
from storage.sealed import FooterCache, ReadStats, SegmentRef, SeqTsRange, range_mask, read_segment
from storage.segments import LogSegments

# Sealed files are checksummed in pieces of this size (no whole-file buffer for big segments).
CRC_CHUNK_BYTES = 8 * 1024 * 1024


class RangeReader:
    """Reads of `segments` as they stand, with the caches that make them cheap: parsed footers
    and the files already checked against their crc32c."""

    def __init__(self, segments: LogSegments):
        self._segments = segments
        self._footers = FooterCache()
        self._verified_files: set[tuple[str, int, int]] = set()

    def forget_footers(self) -> None:
        """Drop cached footers: after a swap, a retention or a new snapshot a file name may be
        reused for other content."""
        self._footers = FooterCache()

    def checked_paths(self) -> list[Path]:
        """Paths of the sealed segments in seq order, each checked against its crc32c."""
        segments = self._segments
        for entry in segments.manifest.segments:
            self._check_file(entry)
        return [segments.log_dir / e.file for e in segments.manifest.segments]

    def read(self, bounds: SeqTsRange, wanted: list[str]) -> tuple[pa.Table, ReadStats]:
        """Rows within `bounds` with columns `wanted`, in seq order, and what the read touched."""
        segments = self._segments
        schema = segments.schema
        current = segments.manifest
        self._check_range(bounds, current)
        needed = set(wanted) | {SEQ_COLUMN, TS_COLUMN}
        read_columns = [n for n in schema.names if n in needed]
        target = pa.schema([schema.field(n) for n in read_columns])
        stats = ReadStats()
        pieces: list[pa.Table] = []
        for entry in current.segments:
            if not bounds.overlaps(entry.base_seq, entry.end_seq - 1, entry.ts_min, entry.ts_max):
                stats.segments_skipped += 1
                continue
            stats.segments_read += 1
            self._check_file(entry)
            ref = SegmentRef(segments.log_dir / entry.file, entry.base_seq, entry.end_seq,
                             entry.events, entry.bytes)
            piece = read_segment(segments.fs, ref, bounds, read_columns, stats, self._footers)
            pieces.append(pa.Table.from_arrays(piece.columns, schema=target))
        active = segments.active
        if active.events and bounds.overlaps(
            active.base_seq, active.end_seq - 1, active.ts_min, active.ts_max
        ):
            tail = active.table().select(read_columns)
            if not bounds.unbounded:
                tail = tail.filter(range_mask(tail, bounds))
            pieces.append(pa.Table.from_arrays(tail.columns, schema=target))
        if not pieces:
            return target.empty_table().select(wanted), stats
        return pa.concat_tables(pieces).select(wanted), stats

    def _check_file(self, entry: SegmentEntry) -> None:
        """The whole file's crc32c equals the manifest's (once per file and process)."""
        if entry.crc32c is None:
            return  # swapped in by a version that did not record checksums
        key = (entry.file, entry.bytes, entry.crc32c)
        if key in self._verified_files:
            return
        path = self._segments.log_dir / entry.file
        try:
            source = self._segments.fs.open_input(path)
        except FileNotFoundError:
            raise CorruptSegmentError(path, entry.base_seq, entry.end_seq,
                                      "listed in the manifest but missing") from None
        except OSError as exc:
            raise CorruptSegmentError(path, entry.base_seq, entry.end_seq,
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
            raise CorruptSegmentError(path, entry.base_seq, entry.end_seq,
                                      f"cannot read: {exc}") from exc
        finally:
            source.close()
        if size != entry.bytes:
            raise CorruptSegmentError(path, entry.base_seq, entry.end_seq,
                                      f"file holds {size} bytes, the manifest says {entry.bytes}")
        if crc != entry.crc32c:
            raise CorruptSegmentError(
                path, entry.base_seq, entry.end_seq,
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
