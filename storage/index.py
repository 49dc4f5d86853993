"""The resident read index, in the spirit of Kafka's per-segment `.index` and `.timeindex`.

Kafka finds an offset or a time in any segment through a small sparse index per segment, so a
read never scans the log. Here the same job is done by what each sealed segment's Parquet footer
already says, parsed once and held by the reader (`SegmentIndexes`): per row group its row count
and the min/max of every column a read asks about. Sealed segments are clustered by key (sealing
sorts their rows by the caller's key columns, then seq), so the statistics of the key columns
name the one or two row groups that can hold a key's rows, and a read opens only those. The
active segment's rows are indexed in memory (`TailIndex`): the row positions of each value of a
column, extended on read by the rows appended since, so appends pay nothing.

Why row-group statistics and not the other candidates (measured: bench/read_index_bench.py
--mechanisms): on clustered segments they are exact (a key value's rows are contiguous), need
no file beside the segment (nothing more to write atomically, checksum or delete) and DuckDB
and Spark prune by the same statistics. Parquet page indexes add bytes and are used by neither
pyarrow's nor DuckDB's readers to skip pages here; bloom filters answer "maybe" for every row
group of a segment in seq order (every group commits in every row group) and add nothing to
exact min/max on a clustered one.

A time index (`TimeIndex`: the segment's ts values in seq order) is built from the ts column on
the first question about a time inside a clustered segment (every row group then spans the
segment's whole time) and kept for a few segments: the first seq after a time and the time of
a seq are then lookups.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.bounds import SeqTsRange

INDEX_ENTRIES_MAX = 4096
# Key values whose row groups a column's ranges remember (each a bool per row group).
KEYS_PER_COLUMN_MAX = 1024
TIME_INDEX_ENTRIES_MAX = 4
# A value list of the tail index is merged into one array past this many pieces.
_PIECES_MAX = 32

#: Equality conditions of a keyed read: column -> the values a row may hold there.
Where = Mapping[str, Sequence[Any]]
K = TypeVar("K")
V = TypeVar("V")


class Recent(Generic[K, V]):
    """At most `entries_max` values by key, the least recently used dropped first."""

    def __init__(self, entries_max: int) -> None:
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._entries_max = entries_max

    def get(self, key: K) -> V | None:
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
        return found

    def put(self, key: K, value: V) -> None:
        self._entries[key] = value
        if len(self._entries) > self._entries_max:
            self._entries.popitem(last=False)


class ColumnRanges:
    """Per row group of one column: min and max where the statistics give them (`known`), and
    whether the row group holds a value at all (`valued`: not only nulls)."""

    __slots__ = ("_held", "known", "maxs", "mins", "valued")

    def __init__(self, mins: np.ndarray, maxs: np.ndarray, known: np.ndarray,
                 valued: np.ndarray) -> None:
        self.mins, self.maxs, self.known, self.valued = mins, maxs, known, valued
        # the row groups of the key values asked for lately (a key -> row groups map)
        self._held: Recent[tuple[Any, ...], np.ndarray] = Recent(KEYS_PER_COLUMN_MAX)

    def may_hold(self, values: Sequence[Any]) -> np.ndarray:
        """Per row group: whether a row may hold one of `values` (statistics allowing)."""
        key = tuple(values)
        found = self._held.get(key)
        if found is None:
            found = self._may_hold(values)
            self._held.put(key, found)
        return found

    def _may_hold(self, values: Sequence[Any]) -> np.ndarray:
        out = self.valued & ~self.known
        at = np.flatnonzero(self.known)
        if len(at):
            lo, hi = self.mins[at], self.maxs[at]
            hit = np.zeros(len(at), bool)
            for v in values:
                hit |= (lo <= v) & (hi >= v)
            out[at] |= hit
        return out

    def overlapping(self, low: Any, high: Any) -> np.ndarray:
        """Per row group: whether a value in [low, high] may be there (None: unbounded)."""
        out = self.valued.copy()
        at = np.flatnonzero(self.known)
        if len(at):
            keep = np.ones(len(at), bool)
            if low is not None:
                keep &= self.maxs[at] >= low
            if high is not None:
                keep &= self.mins[at] <= high
            out[at] &= keep
        return out


class SegmentIndex:
    """One sealed segment's footer and, per row group, the ranges of the columns asked about
    (decoded from the footer once, on the first read that asks)."""

    def __init__(self, md: pq.FileMetaData) -> None:
        self.md = md
        self.rows = np.array([md.row_group(i).num_rows for i in range(md.num_row_groups)],
                             np.int64)
        self._column = {md.schema.column(i).path: i for i in range(md.num_columns)}
        self._ranges: dict[str, ColumnRanges | None] = {}
        arrow = md.schema.to_arrow_schema()
        #: Columns stored as UTF-8 strings (read as dictionaries by selective reads).
        self.strings = frozenset(f.name for f in arrow if pa.types.is_string(f.type))

    @property
    def row_groups(self) -> int:
        return self.md.num_row_groups

    def ranges(self, name: str) -> ColumnRanges | None:
        """The column's ranges per row group; None when the file has no such column."""
        if name not in self._ranges:
            self._ranges[name] = self._decode(name)
        return self._ranges[name]

    def _decode(self, name: str) -> ColumnRanges | None:
        index = self._column.get(name)
        if index is None:
            return None
        n = self.md.num_row_groups
        mins, maxs = np.empty(n, object), np.empty(n, object)
        known, valued = np.zeros(n, bool), np.ones(n, bool)
        for rg in range(n):
            chunk = self.md.row_group(rg).column(index)
            stats = chunk.statistics
            if stats is not None and stats.has_min_max:
                mins[rg], maxs[rg], known[rg] = stats.min, stats.max, True
            elif stats is not None and stats.has_null_count:  # no min/max: only nulls?
                valued[rg] = stats.null_count < chunk.num_values
        if known.all() and all(isinstance(v, int) for v in mins):
            mins, maxs = mins.astype(np.int64), maxs.astype(np.int64)
        return ColumnRanges(mins, maxs, known, valued)

    def holds_only(self, name: str, values: Sequence[Any], row_groups: list[int]) -> bool:
        """Whether every row of `row_groups` holds one of `values` in column `name` (each row
        group's min equals its max, one of them, and it has no nulls)."""
        ranges = self.ranges(name)
        if ranges is None or not row_groups:
            return False
        index = self._column[name]
        for rg in row_groups:
            if not ranges.known[rg] or ranges.mins[rg] != ranges.maxs[rg]:
                return False
            if ranges.mins[rg] not in values:
                return False
            stats = self.md.row_group(rg).column(index).statistics
            if not stats.has_null_count or stats.null_count:
                return False
        return True

    def choose(self, bounds: SeqTsRange, where: Where | None) -> list[int]:
        """Row groups that may hold rows within `bounds` matching `where`."""
        keep = np.ones(self.md.num_row_groups, bool)
        if bounds.seq_gte is not None or bounds.seq_lt is not None:
            seqs = self.ranges("seq")
            if seqs is not None:
                high = None if bounds.seq_lt is None else bounds.seq_lt - 1
                keep &= seqs.overlapping(bounds.seq_gte, high)
        if bounds.ts_gte is not None or bounds.ts_lt is not None:
            times = self.ranges("ts")
            if times is not None:
                high = None if bounds.ts_lt is None else bounds.ts_lt - 1
                keep &= times.overlapping(bounds.ts_gte, high)
        for name, values in (where or {}).items():
            ranges = self.ranges(name)
            if ranges is not None:
                keep = keep & ranges.may_hold(values)
        return np.flatnonzero(keep).tolist()


#: A sealed file as the manifest names it: path, size, seq range (a reused name with other
#: content is another key).
FileKey = tuple[str, int, int, int]


class SegmentIndexes:
    """The resident index: a `SegmentIndex` per sealed file, and the time indexes of the last
    few segments asked about a time."""

    def __init__(self, entries_max: int = INDEX_ENTRIES_MAX) -> None:
        self._entries: Recent[FileKey, SegmentIndex] = Recent(entries_max)
        self._times: Recent[FileKey, TimeIndex] = Recent(TIME_INDEX_ENTRIES_MAX)

    def get(self, key: FileKey) -> SegmentIndex | None:
        return self._entries.get(key)

    def put(self, key: FileKey, index: SegmentIndex) -> None:
        self._entries.put(key, index)

    def time_index(self, key: FileKey) -> TimeIndex | None:
        return self._times.get(key)

    def put_time_index(self, key: FileKey, index: TimeIndex) -> None:
        self._times.put(key, index)


class TimeIndex:
    """A segment's ts values in seq order (the caller's ts never decreases along seq): the
    count of rows at or before a time, and the time of a seq, by lookup."""

    __slots__ = ("base_seq", "ts")

    def __init__(self, base_seq: int, ts_by_seq: np.ndarray) -> None:
        self.base_seq = base_seq
        self.ts = ts_by_seq

    def count_at_most(self, ts: int) -> int:
        return int(np.searchsorted(self.ts, ts, side="right"))

    def ts_of(self, seq: int) -> int:
        return int(self.ts[seq - self.base_seq])


class TailIndex:
    """Row positions (0 = the active segment's first row) of each value of one column, for the
    rows indexed so far; `extend` indexes the rows appended since, a batch of them at a time."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.indexed = 0
        self._positions: dict[Any, list[np.ndarray]] = {}

    def extend(self, table: pa.Table) -> None:
        """Index the rows of `table` (the active segment's rows, in seq order) past `indexed`."""
        if table.num_rows <= self.indexed:
            return
        values = table.column(self.column).slice(self.indexed).combine_chunks()
        encoded = values if pa.types.is_dictionary(values.type) else pc.dictionary_encode(values)
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        valid = ~np.asarray(pc.is_null(encoded.indices).to_numpy(zero_copy_only=False), bool)
        where = np.flatnonzero(valid)
        codes = codes[where].astype(np.int64)
        if not len(codes):
            self.indexed = table.num_rows
            return
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
        ends = np.r_[starts[1:], len(order)]
        names = encoded.dictionary.to_pylist()
        rows = where[order] + self.indexed
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            pieces = self._positions.setdefault(names[int(sorted_codes[start])], [])
            pieces.append(rows[start:end])
            if len(pieces) > _PIECES_MAX:
                pieces[:] = [np.concatenate(pieces)]
        self.indexed = table.num_rows

    def positions(self, values: Sequence[Any]) -> np.ndarray:
        """Ascending row positions holding one of `values`."""
        found = [p for v in values for p in self._positions.get(v, ())]
        if not found:
            return np.zeros(0, np.int64)
        out = np.concatenate(found)
        if len(values) > 1:
            out.sort()
        return out


class TailValues:
    """One integer column of the active segment's rows (no nulls: seq, ts) as one array,
    extended by the rows appended since (copying only those), so a keyed read tests its rows'
    times without a take."""

    __slots__ = ("_values", "column", "indexed")

    def __init__(self, column: str) -> None:
        self.column = column
        self.indexed = 0
        self._values = np.empty(0, np.int64)

    def extend(self, table: pa.Table) -> None:
        """Take in the rows of `table` (the active segment's rows, in seq order) past `indexed`."""
        if table.num_rows <= self.indexed:
            return
        new = table.column(self.column).slice(self.indexed).to_numpy()
        need = self.indexed + len(new)
        if need > len(self._values):
            grown = np.empty(max(need, 2 * len(self._values)), np.int64)
            grown[:self.indexed] = self._values[:self.indexed]
            self._values = grown
        self._values[self.indexed:need] = new
        self.indexed = need

    def at(self, positions: np.ndarray) -> np.ndarray:
        """The values of rows at `positions` (all indexed)."""
        return self._values[positions]


def take_rows(table: pa.Table, positions: np.ndarray) -> pa.Table:
    """Rows of a chunked `table` at ascending `positions`, chunk by chunk (a take over a
    chunked table may first concatenate all its chunks)."""
    if len(positions) == 0:
        return table.slice(0, 0)
    batches = table.to_batches()
    offsets = np.cumsum([0] + [b.num_rows for b in batches])
    first = int(np.searchsorted(offsets, positions[0], side="right")) - 1
    last = int(np.searchsorted(offsets, positions[-1], side="right")) - 1
    out = []
    for i in range(first, last + 1):
        lo, hi = bisect.bisect_left(positions, offsets[i]), bisect.bisect_left(positions, offsets[i + 1])
        if hi > lo:
            local = pa.array(positions[lo:hi] - offsets[i], pa.int64())
            out.append(batches[i].take(local))
    return pa.Table.from_batches(out, schema=table.schema)


def value_mask(column: pa.ChunkedArray | pa.Array, values: Sequence[Any]) -> np.ndarray:
    """Per row of `column`: whether it holds one of `values` (a null: no). A dictionary column
    is tested on its indices, an integer column in numpy: no per-row work in Arrow calls."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out = [_chunk_mask(chunk, values) for chunk in chunks]
    if not out:
        return np.zeros(0, bool)
    return out[0] if len(out) == 1 else np.concatenate(out)


def _chunk_mask(chunk: pa.Array, values: Sequence[Any]) -> np.ndarray:
    if pa.types.is_dictionary(chunk.type):
        found = pc.index_in(pa.array(values, chunk.type.value_type), value_set=chunk.dictionary)
        wanted: Sequence[Any] = [code for code in found.to_pylist() if code is not None]
        chunk = chunk.indices
    elif pa.types.is_integer(chunk.type):
        wanted = values
    else:
        found = pc.is_in(chunk, value_set=pa.array(values, chunk.type))
        return np.asarray(pc.fill_null(found, False).to_numpy(zero_copy_only=False), bool)
    if not wanted:
        return np.zeros(len(chunk), bool)
    held = chunk.to_numpy(zero_copy_only=False)  # a null is NaN here: equal to nothing
    if len(wanted) == 1:
        return np.asarray(held == wanted[0], bool)
    return np.isin(held, np.asarray(wanted))
