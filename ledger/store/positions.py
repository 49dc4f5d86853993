"""Positions as Arrow columns, read by rows of their table (ledger/fold/position.py): what a
checkpoint and a view flush write. No Python step per key but the client generations' JSON."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.fold.position import POSITION_TYPES, PositionTable
from ledger.fold.state import Key

_encode = msgspec.json.Encoder().encode


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
    """Each row's client generations as JSON (null when it has none)."""
    return pa.array([_encode(g) if g else None for g in table.generations_of(rows).tolist()],
                    pa.string())


def has_offset(columns: dict[str, pa.Array]) -> pa.Array:
    """Rows with a committed or pulled offset or a pending reset (what the view shows)."""
    return pc.or_(pc.or_(pc.is_valid(columns["committed"]), pc.is_valid(columns["pulled"])),
                  pc.fill_null(columns["pending"], False))
