"""Positions as Arrow columns, read by rows of their table (ledger/fold/position.py): what a
checkpoint and a view flush write. No Python step per key but listing the client generations'
dicts (their JSON is one msgspec call for all of them)."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.fold.position import POSITION_TYPES, PositionTable
from ledger.fold.state import Key

_encoder = msgspec.json.Encoder()


def key_columns(keys: Sequence[Key]) -> dict[str, pa.Array]:
    """consumer_group, topic, queue_id of each key."""
    return {"consumer_group": pa.array(list(map(itemgetter(0), keys)), pa.string()),
            "topic": pa.array(list(map(itemgetter(1), keys)), pa.string()),
            "queue_id": pa.array(list(map(itemgetter(2), keys)), pa.int32())}


def position_columns(table: PositionTable, rows: np.ndarray | None,
                     fields: Sequence[str] = tuple(POSITION_TYPES)) -> dict[str, pa.Array]:
    """The `fields` of `rows` (all when None), a column each."""
    return {f: table.arrow(f, rows) for f in fields}


def generations_json(table: PositionTable, rows: np.ndarray | None) -> pa.Array:
    """Each row's client generations as JSON (null when it has none): the non-empty ones
    encoded by one msgspec call as JSON lines (a newline inside a string is escaped, so each
    newline ends one) and cut there, instead of a call and a bytes object per row (a checkpoint
    of 160,000 keys: ~55 -> ~35 ms)."""
    generations = table.generations_of(rows)
    has = np.fromiter(map(bool, generations.tolist()), bool, len(generations))
    text = _encoder.encode_lines(generations[has].tolist())
    ends = np.flatnonzero(np.frombuffer(text, np.uint8) == 0x0A)
    offsets = np.concatenate(([0], ends + 1)).astype(np.int32)
    lines = pa.StringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(text))
    encoded = pc.utf8_slice_codeunits(lines, 0, -1)  # (each line without its newline)
    at = np.cumsum(has) - 1
    return encoded.take(pa.array(at, pa.int64(), mask=~has))


def has_offset(columns: dict[str, pa.Array]) -> pa.Array:
    """Rows with a committed or pulled offset or a pending reset (what the view shows)."""
    return pc.or_(pc.or_(pc.is_valid(columns["committed"]), pc.is_valid(columns["pulled"])),
                  pc.fill_null(columns["pending"], False))
