"""The full state as one Arrow table (checkpoint Parquet files) and back.

One row per queue, group, position, broadcast client position, time-index entry and append
(`row` append: first offset in min_offset, ledger ts in last_update_ts, store ts in store_ts),
told apart by `row`. The same rows feed DuckDB's state-at queries and Spark's replay, which
read the kinds they know by name.
"""

from __future__ import annotations

from array import array
from operator import attrgetter, itemgetter

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.fold.state import STORE_TS_UNKNOWN, GroupSettings, Position, QueueState, State

CHECKPOINT_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("row", pa.string(), nullable=False),  # queue|group|position|client|index|append
        pa.field("consumer_group", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("client_id", pa.string()),
        pa.field("committed", pa.int64()),
        pa.field("pulled", pa.int64()),
        pa.field("generation", pa.int32()),
        pa.field("pending", pa.bool_()),
        pa.field("expired", pa.bool_()),
        pa.field("last_client", pa.string()),
        pa.field("last_pull_ts", pa.int64()),
        pa.field("last_active_ts", pa.int64()),
        pa.field("last_update_ts", pa.int64()),
        pa.field("min_offset", pa.int64()),
        pa.field("max_offset", pa.int64()),
        pa.field("store_ts", pa.int64()),
        pa.field("detail", pa.string()),
    ]
)
_NAMES = CHECKPOINT_SCHEMA.names
_encode = msgspec.json.Encoder().encode


def state_to_table(state: State) -> pa.Table:
    """Column-wise: a checkpoint of 16,000 keys is written on every seal, so no per-row dicts."""
    cols: dict[str, list] = {n: [] for n in _NAMES}

    def add(n: int, **values: list | tuple) -> None:
        for name in _NAMES:
            v = values.get(name)
            cols[name].extend(v if v is not None else (None,) * n)

    for (topic, qid), q in state.queues.items():
        add(1, row=("queue",), topic=(topic,), queue_id=(qid,), min_offset=(q.min_offset,),
            max_offset=(q.max_offset,), last_update_ts=(q.last_update_ts,))
        n = len(q.index_store_ts)
        add(n, row=("index",) * n, topic=(topic,) * n, queue_id=(qid,) * n,
            store_ts=q.index_store_ts, min_offset=q.index_offset)
    groups = list(state.groups.items())
    add(len(groups), row=("group",) * len(groups), consumer_group=[g for g, _ in groups],
        detail=[s.to_json() for _, s in groups])
    fields = ("committed", "pulled", "generation", "pending", "expired", "last_client",
              "last_pull_ts", "last_active_ts", "last_update_ts")
    for row, keys, clients, positions in (
        ("position", list(state.positions), None, list(state.positions.values())),
        ("client", [k for k, cs in state.clients.items() for _ in cs],
         [c for cs in state.clients.values() for c in cs],
         [p for cs in state.clients.values() for p in cs.values()]),
    ):
        n = len(keys)
        if n == 0:
            continue
        # per-field passes: transposing with zip(*rows) costs more than the rows themselves
        add(n, row=(row,) * n, consumer_group=list(map(itemgetter(0), keys)),
            topic=list(map(itemgetter(1), keys)), queue_id=list(map(itemgetter(2), keys)),
            client_id=clients,
            **{f: list(map(attrgetter(f), positions)) for f in fields},
            detail=[_encode(g) if g else None
                    for g in map(attrgetter("client_generations"), positions)])
    add(1, row=("meta",), last_update_ts=(state.last_ts,), max_offset=(state.events_applied,))
    return pa.concat_tables([pa.Table.from_pydict(cols, schema=CHECKPOINT_SCHEMA),
                             _append_rows(state)])


def _int64s(values: array) -> pa.Array:
    """An int64 array from a copy of the bytes (a buffer exported by an `array` would stop
    the fold from growing it)."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values.tobytes())])


def store_times(values: array) -> pa.Array:
    """Appends' store times as int64, null where unknown (`STORE_TS_UNKNOWN`)."""
    times = np.frombuffer(values.tobytes(), np.int64)
    return pa.array(times, pa.int64(), mask=times == STORE_TS_UNKNOWN)


def _append_rows(state: State) -> pa.Table:
    """The `append` rows, built from the queues' arrays without a Python object per value
    (a checkpoint holds every append ever made)."""
    parts: dict[str, list[pa.Array]] = {"topic": [], "queue_id": [], "min_offset": [],
                                        "last_update_ts": [], "store_ts": []}
    for (topic, qid), q in state.queues.items():
        n = len(q.append_offset)
        parts["topic"].append(pa.repeat(pa.scalar(topic, pa.string()), n))
        parts["queue_id"].append(pa.repeat(pa.scalar(qid, pa.int32()), n))
        parts["min_offset"].append(_int64s(q.append_offset))
        parts["last_update_ts"].append(_int64s(q.append_ts))
        parts["store_ts"].append(store_times(q.append_store_ts))
    n = sum(len(a) for a in parts["queue_id"])
    columns = []
    for f in CHECKPOINT_SCHEMA:
        if f.name == "row":
            columns.append(pa.repeat(pa.scalar("append", pa.string()), n))
        elif f.name in parts:
            columns.append(pa.chunked_array(parts[f.name], f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(columns, schema=CHECKPOINT_SCHEMA)


def _position(r: dict) -> Position:
    return Position(
        committed=r["committed"], pulled=r["pulled"], generation=r["generation"],
        pending=r["pending"], expired=r["expired"], last_client=r["last_client"],
        last_pull_ts=r["last_pull_ts"], last_active_ts=r["last_active_ts"],
        last_update_ts=r["last_update_ts"],
        client_generations=msgspec.json.decode(r["detail"]) if r["detail"] else {},
    )


def table_to_state(table: pa.Table) -> State:
    state = State()
    is_append = pc.equal(table.column("row"), "append")
    appends = table.filter(is_append)
    table = table.filter(pc.invert(is_append))
    cols = table.to_pydict()
    names = list(cols)
    for values in zip(*cols.values(), strict=True):
        r = dict(zip(names, values, strict=True))
        kind = r["row"]
        if kind == "queue":
            state.queues[(r["topic"], r["queue_id"])] = QueueState(
                r["min_offset"], r["max_offset"], r["last_update_ts"])
        elif kind == "index":
            q = state.queues[(r["topic"], r["queue_id"])]
            q.index_store_ts.append(r["store_ts"])
            q.index_offset.append(r["min_offset"])
        elif kind == "group":
            state.set_group(r["consumer_group"], GroupSettings.from_json(r["detail"]))
        elif kind == "position":
            state.positions[(r["consumer_group"], r["topic"], r["queue_id"])] = _position(r)
        elif kind == "client":
            key = (r["consumer_group"], r["topic"], r["queue_id"])
            state.clients.setdefault(key, {})[r["client_id"]] = _position(r)
        elif kind == "meta":
            state.last_ts = r["last_update_ts"]
            state.events_applied = r["max_offset"]
    _add_appends(state, appends)
    return state


def _add_appends(state: State, rows: pa.Table) -> None:
    """The append rows, by runs of one queue (they are written queue by queue): a run at a time
    rather than a dict per row, as a checkpoint holds every append ever made."""
    topics, qids = rows.column("topic").to_pylist(), rows.column("queue_id").to_pylist()
    offsets, ts = rows.column("min_offset").to_pylist(), rows.column("last_update_ts").to_pylist()
    store_ts = pc.fill_null(rows.column("store_ts"), STORE_TS_UNKNOWN).to_pylist()
    start = 0
    for i in range(1, len(topics) + 1):
        if i < len(topics) and topics[i] == topics[start] and qids[i] == qids[start]:
            continue
        q = state.queues[(topics[start], qids[start])]
        q.append_offset.extend(offsets[start:i])
        q.append_ts.extend(ts[start:i])
        q.append_store_ts.extend(store_ts[start:i])
        start = i
