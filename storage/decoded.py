"""Decoded row groups of sealed segments, kept for the next read that needs them.

A clustered segment keeps one group's rows of a day in one or two row groups, so the reads an
auditor or the console makes one after the other (the group's last hour, refreshed; the next
hour of the same day; one key of the group) decode the same row group again and again. Decoding
it costs most of such a read (about 0.4 ms of fixed cost per row group for the 13 columns of an
event, measured in bench/results/read-scaling-latest.md); taking rows from a decoded one costs a
slice. This is ClickHouse's uncompressed cache, or a database's buffer pool, for Parquet: the
most recently used row groups, up to a byte budget, dropped least recently used first.

Sealed files never change once the manifest names them: a row group is keyed by its file as the
manifest names it (path, size, seq range), its index in the file and the columns read, and the
whole cache is dropped with the reader's footers after a swap, a retention or a new snapshot.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pyarrow as pa

#: Bytes of decoded row groups a reader keeps (about 150 row groups of a 1M-event segment).
DECODED_BYTES_MAX = 64 * 1024 * 1024

#: A decoded row group: the file's key, the row group's index, the columns and their form; or
#: a key's rows of some row groups: the file's key, the row groups, the columns, the key.
RowGroupKey = tuple[Any, ...]


class DecodedRowGroups:
    """At most `bytes_max` bytes of decoded row groups, the least recently used dropped first;
    a row group bigger than a quarter of the budget is never kept (it would push out many)."""

    def __init__(self, bytes_max: int | None = None) -> None:
        # read when made, so that a bench can measure reads that decode every time (0)
        self.bytes_max = DECODED_BYTES_MAX if bytes_max is None else bytes_max
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._tables: OrderedDict[RowGroupKey, tuple[pa.Table, int]] = OrderedDict()

    def get(self, key: RowGroupKey) -> pa.Table | None:
        found = self._tables.get(key)
        if found is None:
            self.misses += 1
            return None
        self.hits += 1
        self._tables.move_to_end(key)
        return found[0]

    def put(self, key: RowGroupKey, table: pa.Table) -> None:
        size = table.nbytes
        if size > self.bytes_max // 4 or key in self._tables:
            return
        self._tables[key] = (table, size)
        self.bytes += size
        while self.bytes > self.bytes_max:
            _, (_, dropped) = self._tables.popitem(last=False)
            self.bytes -= dropped

    def __len__(self) -> int:
        return len(self._tables)
