"""Positions as Arrow columns, one pass per field (C loops over the objects: `map` with
`attrgetter`), no tuple or dict per row: what a checkpoint and a view flush write."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, itemgetter

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ledger.fold.state import Key, Position

#: Position fields as columns, with their Arrow types (checkpoint and view names alike).
POSITION_TYPES: dict[str, pa.DataType] = {
    "committed": pa.int64(), "pulled": pa.int64(), "generation": pa.int32(),
    "pending": pa.bool_(), "expired": pa.bool_(), "last_client": pa.string(),
    "last_pull_ts": pa.int64(), "last_active_ts": pa.int64(), "last_update_ts": pa.int64(),
}
_encode = msgspec.json.Encoder().encode


def key_columns(keys: Sequence[Key]) -> dict[str, pa.Array]:
    """consumer_group, topic, queue_id of each key."""
    return {"consumer_group": pa.array(list(map(itemgetter(0), keys)), pa.string()),
            "topic": pa.array(list(map(itemgetter(1), keys)), pa.string()),
            "queue_id": pa.array(list(map(itemgetter(2), keys)), pa.int32())}


def position_columns(positions: Sequence[Position], fields: Sequence[str] = tuple(POSITION_TYPES)
                     ) -> dict[str, pa.Array]:
    """The `fields` of each position, a column each."""
    return {f: pa.array(list(map(attrgetter(f), positions)), POSITION_TYPES[f]) for f in fields}


def generations_json(positions: Sequence[Position]) -> pa.Array:
    """Each position's client generations as JSON (null when it has none)."""
    return pa.array([_encode(g) if g else None
                     for g in map(attrgetter("client_generations"), positions)], pa.string())


def has_offset(columns: dict[str, pa.Array]) -> pa.Array:
    """Rows with a committed or pulled offset or a pending reset (what the view shows)."""
    return pc.or_(pc.or_(pc.is_valid(columns["committed"]), pc.is_valid(columns["pulled"])),
                  pc.fill_null(columns["pending"], False))
