"""Ledger events: one msgspec Struct per kind, one Arrow schema for all of them.

Every event carries the *resulting* value of what it changes, so the state at any point is the
latest event per key at or before it (DESIGN.md, Events). Batches convert column-wise: building
Arrow arrays from per-field lists is the only per-event work on the append path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

import msgspec
import pyarrow as pa

KINDS: tuple[str, ...] = (
    "queue_append",
    "queue_truncate",
    "initial",
    "pull",
    "commit",
    "reset",
    "sync",
    "clamp",
    "expire",
    "delete",
    "group_config",
    "reset_refused",
)

#: Kinds that set the committed offset of a key (DESIGN.md: which position each kind sets).
COMMITTED_KINDS: frozenset[str] = frozenset(
    {"initial", "commit", "reset", "sync", "clamp", "expire", "delete"}
)

EVENT_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("consumer_group", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("prev_offset", pa.int64()),
        pa.field("generation", pa.int32()),
        pa.field("client_id", pa.string()),
        pa.field("actor", pa.string()),
        pa.field("store_ts", pa.int64()),
        pa.field("detail", pa.string()),
    ]
)
COLUMNS: tuple[str, ...] = tuple(EVENT_SCHEMA.names)


class Event(msgspec.Struct, frozen=True, gc=False, tag_field="kind"):
    """Fields shared by every kind; `seq` is assigned by the log on append (-1 before)."""

    KIND: ClassVar[str] = ""
    seq: int = -1
    ts: int = 0
    consumer_group: str | None = None
    topic: str | None = None
    queue_id: int | None = None
    offset: int | None = None
    prev_offset: int | None = None
    generation: int | None = None
    client_id: str | None = None
    actor: str | None = None
    store_ts: int | None = None
    detail: str | None = None


class QueueAppend(Event, frozen=True, gc=False, tag="queue_append"):
    """MaxOffset advanced to `offset` (from `prev_offset`); all messages share `store_ts`."""

    KIND: ClassVar[str] = "queue_append"


class QueueTruncate(Event, frozen=True, gc=False, tag="queue_truncate"):
    """Retention advanced MinOffset to `offset`."""

    KIND: ClassVar[str] = "queue_truncate"


class Initial(Event, frozen=True, gc=False, tag="initial"):
    """First position of a group (or broadcast client) on a queue: sets committed and pulled."""

    KIND: ClassVar[str] = "initial"


class Pull(Event, frozen=True, gc=False, tag="pull"):
    """Pulled offset advanced to `offset`."""

    KIND: ClassVar[str] = "pull"


class Commit(Event, frozen=True, gc=False, tag="commit"):
    """Committed offset set to `offset`."""

    KIND: ClassVar[str] = "commit"


class Reset(Event, frozen=True, gc=False, tag="reset"):
    """An applied reset: committed = `offset`, generation incremented, pending marker set."""

    KIND: ClassVar[str] = "reset"


class Sync(Event, frozen=True, gc=False, tag="sync"):
    """Committed offset overwritten from a broker snapshot or replica."""

    KIND: ClassVar[str] = "sync"


class Clamp(Event, frozen=True, gc=False, tag="clamp"):
    """Positions outside [MinOffset, MaxOffset] restored; `detail` names the fields moved."""

    KIND: ClassVar[str] = "clamp"


class Expire(Event, frozen=True, gc=False, tag="expire"):
    """Offset removed by offset retention (`offset` null)."""

    KIND: ClassVar[str] = "expire"


class Delete(Event, frozen=True, gc=False, tag="delete"):
    """Group removed from a queue by an operator (`offset` null)."""

    KIND: ClassVar[str] = "delete"


class GroupConfig(Event, frozen=True, gc=False, tag="group_config"):
    """Group settings; `detail` is the JSON of the full config after the change."""

    KIND: ClassVar[str] = "group_config"


class ResetRefused(Event, frozen=True, gc=False, tag="reset_refused"):
    """A reset refused by the reset policy: recorded for auditors, ignored by the fold."""

    KIND: ClassVar[str] = "reset_refused"


AnyEvent = (
    QueueAppend
    | QueueTruncate
    | Initial
    | Pull
    | Commit
    | Reset
    | Sync
    | Clamp
    | Expire
    | Delete
    | GroupConfig
    | ResetRefused
)

EVENT_TYPES: dict[str, type[Event]] = {
    cls.KIND: cls
    for cls in (
        QueueAppend,
        QueueTruncate,
        Initial,
        Pull,
        Commit,
        Reset,
        Sync,
        Clamp,
        Expire,
        Delete,
        GroupConfig,
        ResetRefused,
    )
}
_FIELDS: tuple[str, ...] = COLUMNS[3:]
#: A row's fields as one struct, with and without seq: pyarrow converts a list of tuples to a
#: struct array in one pass (a third of the time of a column at a time for a 1-event batch, a
#: group commit's usual size: 59 -> 20 us; half of it at 10,000 events).
_ROW_STRUCT = pa.struct([EVENT_SCHEMA.field(name) for name in COLUMNS[1:]])
_EVENT_STRUCT = pa.struct(list(EVENT_SCHEMA))
#: Up to this many rows, seq goes into the tuples (cheaper than its own column).
_SEQ_IN_ROWS_MAX = 256


class EventBuffer:
    """Events of one batch as row tuples (ts, kind, group, ...: COLUMNS without seq), transposed
    to Arrow columns once per batch; the hot path appends one tuple per event and nothing else."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def __len__(self) -> int:
        return len(self.rows)

    def append(self, e: Event) -> None:
        self.rows.append((e.ts, e.KIND, e.consumer_group, e.topic, e.queue_id, e.offset,
                          e.prev_offset, e.generation, e.client_id, e.actor, e.store_ts, e.detail))

    def to_record_batch(self, first_seq: int) -> pa.RecordBatch:
        n = len(self.rows)
        if n <= _SEQ_IN_ROWS_MAX:
            rows = [(seq, *row) for seq, row in enumerate(self.rows, first_seq)]
            return pa.RecordBatch.from_struct_array(pa.array(rows, type=_EVENT_STRUCT))
        fields = pa.RecordBatch.from_struct_array(pa.array(self.rows, type=_ROW_STRUCT))
        return pa.RecordBatch.from_arrays(
            [pa.array(range(first_seq, first_seq + n), pa.int64()), *fields.columns],
            schema=EVENT_SCHEMA)


def to_record_batch(events: Sequence[Event], first_seq: int | None = None) -> pa.RecordBatch:
    """Events as one record batch of EVENT_SCHEMA; seqs numbered from `first_seq` when given."""
    n = len(events)
    if first_seq is None:
        seqs: list[int] | range = [e.seq for e in events]
    else:
        seqs = range(first_seq, first_seq + n)
    arrays = [
        pa.array(seqs, pa.int64()),
        pa.array([e.ts for e in events], pa.int64()),
        pa.array([e.KIND for e in events], pa.string()),
    ]
    for name in _FIELDS:
        arrays.append(
            pa.array([getattr(e, name) for e in events], EVENT_SCHEMA.field(name).type)
        )
    return pa.RecordBatch.from_arrays(arrays, schema=EVENT_SCHEMA)


def from_arrow(data: pa.Table | pa.RecordBatch) -> list[Event]:
    """Rows back as typed events (the rare-kind and test path; folds read columns directly)."""
    cols = data.select(list(COLUMNS)).to_pydict()
    kinds = cols["kind"]
    out: list[Event] = []
    rows: Iterable[tuple] = zip(*(cols[c] for c in COLUMNS), strict=True)
    for kind, row in zip(kinds, rows, strict=True):
        values = dict(zip(COLUMNS, row, strict=True))
        del values["kind"]
        out.append(EVENT_TYPES[kind](**values))
    return out

