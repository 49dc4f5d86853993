"""Sealed segments: Parquet files written once (tmp, fsync, rename) and read with pruning.

Layout is explicit, never library defaults: zstd at a set level, dictionary encoding for string
columns only, DELTA_BINARY_PACKED for integer columns, statistics and page checksums on, row
groups of `row_group_events` rows, 1 MiB data pages (v1 headers, which every reader takes). On
the offset workload this is 4.7 bytes/event and writes 3.2M events/s (pyarrow defaults: 12.1
bytes/event); zstd 1..9, v2 pages, 1M-row groups, BYTE_STREAM_SPLIT or a dictionary for `offset`
all land within 0.1 byte/event of it, so the defaults stay.

Reads prune whole segments by the manifest's seq/ts ranges, then row groups by the Parquet
statistics of `seq` and `ts`, reading only the chosen row groups with `ParquetFile` and a cached
footer, strings as dictionaries until the rows are filtered (3-4x faster than materializing
every string of the row group). Measured on 10 segments of 100,000 offset-workload events, a 1 s
ts window (1,000 rows): 17-23 ms median this way, 47-61 ms with `pyarrow.dataset(...)
.to_table(filter=...)` (a busy 2-core machine; the ratio is what counts), and the pruning is
countable in `ReadStats`. The cost is decoding one row group, so `row_group_events` trades
latency for size (32,768 rows: about 60% of the latency for 3% more bytes).
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import crc32c
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.errors import CorruptSegmentError, SchemaError
from storage.fs import FileSystem, write_file_atomically
from storage.settings import LogSettings

DATA_PAGE_BYTES = 1024 * 1024
DICTIONARY_PAGE_BYTES_MAX = 1024 * 1024
FOOTER_CACHE_ENTRIES = 4096


class SeqTsRange(msgspec.Struct, frozen=True):
    """Half-open bounds on seq and ts; None means unbounded."""

    seq_gte: int | None = None
    seq_lt: int | None = None
    ts_gte: int | None = None
    ts_lt: int | None = None

    def overlaps(self, seq_min: int, seq_max: int, ts_min: int | None, ts_max: int | None) -> bool:
        """Whether rows with seq in [seq_min, seq_max] and ts in [ts_min, ts_max] may match."""
        if self.seq_gte is not None and seq_max < self.seq_gte:
            return False
        if self.seq_lt is not None and seq_min >= self.seq_lt:
            return False
        if ts_min is None or ts_max is None:
            return True
        if self.ts_gte is not None and ts_max < self.ts_gte:
            return False
        return not (self.ts_lt is not None and ts_min >= self.ts_lt)

    @property
    def unbounded(self) -> bool:
        """True when no bound is set."""
        return (
            self.seq_gte is None and self.seq_lt is None and self.ts_gte is None
            and self.ts_lt is None
        )


class ReadStats(msgspec.Struct):
    """What a read touched: lets tests and benchmarks see pruning work."""

    segments_read: int = 0
    segments_skipped: int = 0
    row_groups_read: int = 0
    row_groups_skipped: int = 0


class FileFacts(msgspec.Struct, frozen=True):
    """Facts of a Parquet segment file computed from its rows (used to verify a swap)."""

    rows: int
    seq_min: int
    seq_max: int
    ts_min: int
    ts_max: int
    bytes: int
    dense: bool


def write_options(
    schema: pa.Schema, settings: LogSettings, row_group_rows: int | None = None
) -> dict[str, object]:
    """Parquet writer options for `schema`: every layout choice spelled out."""
    strings = [f.name for f in schema if pa.types.is_string(f.type) or
               pa.types.is_large_string(f.type)]
    integers = [
        f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_timestamp(f.type)
    ]
    return {
        "compression": "zstd",
        "compression_level": settings.zstd_level,
        "use_dictionary": strings,
        "column_encoding": dict.fromkeys(integers, "DELTA_BINARY_PACKED"),
        "write_statistics": True,
        "row_group_size": row_group_rows or settings.row_group_events_effective,
        "data_page_size": DATA_PAGE_BYTES,
        "dictionary_pagesize_limit": DICTIONARY_PAGE_BYTES_MAX,
        "data_page_version": "1.0",
        "write_page_checksum": True,
        "version": "2.6",
        "store_schema": True,
    }


def encode_parquet(
    table: pa.Table, settings: LogSettings, row_group_rows: int | None = None
) -> pa.Buffer:
    """`table` as the bytes of a Parquet file (in memory, so one write goes through the shim)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **write_options(table.schema, settings, row_group_rows))
    return sink.getvalue()


def write_parquet(
    fs: FileSystem,
    path: Path,
    table: pa.Table,
    settings: LogSettings,
    row_group_rows: int | None = None,
) -> int:
    """Write `path` atomically: `<path>.tmp`, fsync, rename. Returns the file size.

    The caller fsyncs the directory once the renames it needs are done.
    """
    return write_parquet_checked(fs, path, table, settings, row_group_rows)[0]


def write_parquet_checked(
    fs: FileSystem,
    path: Path,
    table: pa.Table,
    settings: LogSettings,
    row_group_rows: int | None = None,
) -> tuple[int, int]:
    """`write_parquet`, returning (size, crc32c of the whole file) for the manifest: Parquet
    checksums cover pages only, the file checksum also covers the footer (`verify`)."""
    data = encode_parquet(table, settings, row_group_rows)
    write_file_atomically(fs, path, data)
    return data.size, crc32c.crc32c(data)


class FooterCache:
    """Parsed Parquet footers of immutable files, keyed by path, size and seq range."""

    def __init__(self, entries_max: int = FOOTER_CACHE_ENTRIES):
        self._entries: OrderedDict[tuple[str, int, int, int], pq.FileMetaData] = OrderedDict()
        self._entries_max = entries_max

    def get(self, key: tuple[str, int, int, int]) -> pq.FileMetaData | None:
        md = self._entries.get(key)
        if md is not None:
            self._entries.move_to_end(key)
        return md

    def put(self, key: tuple[str, int, int, int], md: pq.FileMetaData) -> None:
        self._entries[key] = md
        if len(self._entries) > self._entries_max:
            self._entries.popitem(last=False)


class SegmentRef(msgspec.Struct, frozen=True):
    """Where a sealed segment is and what the manifest says it holds."""

    path: Path
    base_seq: int
    end_seq: int
    events: int
    bytes: int


def _corrupt(ref: SegmentRef, why: str) -> CorruptSegmentError:
    return CorruptSegmentError(ref.path, ref.base_seq, ref.end_seq, why)


def _stat_range(md: pq.FileMetaData, row_group: int, column: int | None) -> tuple | None:
    if column is None:
        return None
    stats = md.row_group(row_group).column(column).statistics
    if stats is None or not stats.has_min_max:
        return None
    return stats.min, stats.max


def _column_index(md: pq.FileMetaData, name: str) -> int | None:
    for i in range(md.num_columns):
        if md.schema.column(i).path == name:
            return i
    return None


def read_segment(
    fs: FileSystem,
    ref: SegmentRef,
    bounds: SeqTsRange,
    columns: list[str],
    stats: ReadStats,
    cache: FooterCache,
) -> pa.Table:
    """Rows of one sealed segment within `bounds`, in seq order, with `columns` (must include
    seq and ts when bounds are set).

    A missing, unreadable or different file than the manifest says raises CorruptSegmentError
    (a reader then re-reads the manifest: a writer may have swapped or retired the file).
    """
    try:
        source = fs.open_input(ref.path)
    except FileNotFoundError:
        raise _corrupt(ref, "listed in the manifest but missing") from None
    except OSError as exc:
        raise _corrupt(ref, f"cannot open: {exc}") from exc
    try:
        key = (str(ref.path), ref.bytes, ref.base_seq, ref.end_seq)
        md = cache.get(key)
        if md is None:
            size = source.size()
            if size != ref.bytes:
                raise _corrupt(ref, f"file holds {size} bytes, the manifest says {ref.bytes}")
            try:
                md = pq.ParquetFile(source).metadata
            except (OSError, pa.ArrowException, ValueError) as exc:
                raise _corrupt(ref, f"unreadable footer: {exc}") from exc
            if md.num_rows != ref.events:
                raise _corrupt(ref, f"file holds {md.num_rows} rows, the manifest says {ref.events}")
            cache.put(key, md)
        seq_col = _column_index(md, "seq")
        ts_col = _column_index(md, "ts")
        chosen: list[int] = []
        for rg in range(md.num_row_groups):
            seq_range = _stat_range(md, rg, seq_col)
            ts_range = _stat_range(md, rg, ts_col)
            seq_min, seq_max = seq_range if seq_range else (ref.base_seq, ref.end_seq - 1)
            ts_min, ts_max = ts_range if ts_range else (None, None)
            if bounds.overlaps(seq_min, seq_max, ts_min, ts_max):
                chosen.append(rg)
        stats.row_groups_read += len(chosen)
        stats.row_groups_skipped += md.num_row_groups - len(chosen)
        # A selective read takes strings as dictionary indices (3-4x faster to decode than
        # materializing every string of the row group) and decodes only the rows kept.
        strings = None if bounds.unbounded else _string_columns(md, columns)
        try:
            reader = pq.ParquetFile(
                source, metadata=md, page_checksum_verification=True, read_dictionary=strings
            )
            table = reader.read_row_groups(chosen, columns=columns, use_threads=True)
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise _corrupt(ref, f"unreadable data: {exc}") from exc
    finally:
        source.close()
    return _filter_and_order(table, bounds, ref)


def _filter_and_order(table: pa.Table, bounds: SeqTsRange, ref: SegmentRef) -> pa.Table:
    if table.num_rows == 0:
        return table
    seqs = table.column("seq")
    # Rows outside the segment's own range would mean the file is not what the manifest says.
    extremes = pc.min_max(seqs)
    low, high = extremes["min"].as_py(), extremes["max"].as_py()
    if low < ref.base_seq or high >= ref.end_seq:
        raise _corrupt(ref, f"rows with seq {low}..{high} outside the segment's range")
    if not bounds.unbounded:
        table = table.filter(range_mask(table, bounds))
    seq_np = table.column("seq").to_numpy()
    if len(seq_np) > 1 and not bool(np.all(seq_np[1:] > seq_np[:-1])):
        table = table.take(pc.sort_indices(table.column("seq")))
    for index, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            values = table.column(index).cast(field.type.value_type)
            table = table.set_column(index, field.with_type(values.type), values)
    return table


def _string_columns(md: pq.FileMetaData, columns: list[str]) -> list[str] | None:
    """Requested columns stored as UTF-8 strings, to be read as dictionaries."""
    arrow = md.schema.to_arrow_schema()
    found = [
        name for name in columns
        if arrow.get_field_index(name) >= 0 and pa.types.is_string(arrow.field(name).type)
    ]
    return found or None


def range_mask(table: pa.Table, bounds: SeqTsRange) -> pa.ChunkedArray | pa.Array:
    """Boolean mask of the rows of `table` inside `bounds`."""
    mask = None
    for column, op, value in (
        ("seq", pc.greater_equal, bounds.seq_gte),
        ("seq", pc.less, bounds.seq_lt),
        ("ts", pc.greater_equal, bounds.ts_gte),
        ("ts", pc.less, bounds.ts_lt),
    ):
        if value is None:
            continue
        part = op(table.column(column), pa.scalar(value, pa.int64()))
        mask = part if mask is None else pc.and_(mask, part)
    if mask is None:
        return pa.array(np.ones(table.num_rows, dtype=bool))
    return mask


def inspect_file(fs: FileSystem, path: Path, schema: pa.Schema) -> FileFacts:
    """Row count, seq and ts extremes and density of a Parquet file offered for a swap."""
    try:
        source = fs.open_input(path)
    except OSError as exc:
        raise CorruptSegmentError(path, None, None, f"cannot open: {exc}") from exc
    try:
        reader = pq.ParquetFile(source, page_checksum_verification=True)
        file_schema = reader.schema_arrow
        _check_schema(path, file_schema, schema)
        table = reader.read(columns=["seq", "ts"])
        size = source.size()
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise CorruptSegmentError(path, None, None, f"unreadable: {exc}") from exc
    finally:
        source.close()
    rows = table.num_rows
    if rows == 0:
        raise CorruptSegmentError(path, None, None, "holds no rows")
    if table.column("seq").null_count or table.column("ts").null_count:
        raise CorruptSegmentError(path, None, None, "null seq or ts")
    seq = pc.min_max(table.column("seq"))
    ts = pc.min_max(table.column("ts"))
    seq_min, seq_max = seq["min"].as_py(), seq["max"].as_py()
    dense = seq_max - seq_min + 1 == rows and pc.count_distinct(table.column("seq")).as_py() == rows
    return FileFacts(
        rows=rows,
        seq_min=seq_min,
        seq_max=seq_max,
        ts_min=ts["min"].as_py(),
        ts_max=ts["max"].as_py(),
        bytes=size,
        dense=dense,
    )


def _check_schema(path: Path, found: pa.Schema, expected: pa.Schema) -> None:
    """Same column names and types (nullability and metadata may differ, as Spark writes them)."""
    if found.names != expected.names:
        raise SchemaError(f"{path} has columns {found.names}, the log has {expected.names}")
    for field in expected:
        other = found.field(field.name)
        if not other.type.equals(field.type):
            raise SchemaError(
                f"{path} column {field.name} is {other.type}, the log has {field.type}"
            )


def read_table(
    fs: FileSystem, path: Path, *, size: int | None = None, crc: int | None = None,
    seq: int | None = None,
) -> pa.Table:
    """A whole Parquet file (checkpoints); FileNotFoundError if it is gone. With the `size` and
    `crc` the manifest lists, the whole file (footer included) is checked first."""
    if crc is not None:
        data = fs.read_bytes(path)
        where = (0, seq) if seq is not None else (None, None)
        if size is not None and len(data) != size:
            raise CorruptSegmentError(path, *where,
                                      f"file holds {len(data)} bytes, the manifest says {size}")
        if crc32c.crc32c(data) != crc:
            raise CorruptSegmentError(path, *where, f"crc32c {crc32c.crc32c(data)} differs from "
                                      f"the manifest's {crc}: the file changed after it was written")
        source = pa.BufferReader(data)
    else:
        source = fs.open_input(path)
    try:
        return pq.ParquetFile(source, page_checksum_verification=True).read()
    except (OSError, pa.ArrowException, ValueError) as exc:
        raise CorruptSegmentError(path, None, None, f"unreadable: {exc}") from exc
    finally:
        source.close()
