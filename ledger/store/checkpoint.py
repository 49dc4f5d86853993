"""The full state as one Arrow table (checkpoint Parquet files) and back.

One row per queue, group, position, broadcast client position, time-index entry and append
(`row` append: first offset in min_offset, ledger ts in last_update_ts, store ts in store_ts),
told apart by `row`. The same rows feed DuckDB's state-at queries and Spark's replay, which
read the kinds they know by name.
"""

from __future__ import annotations

from array import array

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.fold.position import NULL, Position, PositionTable, rows_of
from ledger.fold.state import STORE_TS_UNKNOWN, GroupSettings, QueueState, State
from ledger.store.positions import generations_json, key_columns, position_columns

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


def state_to_table(state: State) -> pa.Table:
    """Column-wise: a checkpoint of 160,000 keys is written on every seal, so its positions go
    to Arrow a field at a time (ledger/store/positions.py), never a row at a time."""
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
    meta = {n: [None] for n in _NAMES}
    meta.update(row=["meta"], last_update_ts=[state.last_ts], max_offset=[state.events_applied])
    # row i of the table is the i-th position (State keeps them so): every row, in order
    assert len(state.table) == len(state.positions), "positions out of step with their table"
    parts = [pa.Table.from_pydict(cols, schema=CHECKPOINT_SCHEMA),
             _position_rows("position", state.table.key_arrays(), None, state.table, None)]
    if state.clients:
        parts.append(_position_rows(
            "client", key_columns([k for k, cs in state.clients.items() for _ in cs]),
            [c for cs in state.clients.values() for c in cs], state.client_table,
            rows_of([p for cs in state.clients.values() for p in cs.values()])))
    parts += [pa.Table.from_pydict(meta, schema=CHECKPOINT_SCHEMA), _append_rows(state)]
    return pa.concat_tables(parts)


def _position_rows(row: str, keys: dict[str, pa.Array], clients: list[str] | None,
                   table: PositionTable, rows: np.ndarray | None) -> pa.Table:
    """The `position` (or broadcast `client`) rows, a column at a time: `rows` of `table`
    (None: all), whose keys are `keys` (as columns)."""
    n = len(keys["queue_id"])
    columns = {"row": pa.repeat(pa.scalar(row, pa.string()), n), **keys,
               **position_columns(table, rows), "detail": generations_json(table, rows)}
    if clients is not None:
        columns["client_id"] = pa.array(clients, pa.string())
    return pa.Table.from_arrays(
        [columns[f.name] if f.name in columns else pa.nulls(n, f.type)
         for f in CHECKPOINT_SCHEMA], schema=CHECKPOINT_SCHEMA)


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


def _load_positions(table: PositionTable, rows: pa.Table) -> list[Position]:
    """`position` (or `client`) rows into new rows of `table`, a column at a time."""
    n = rows.num_rows
    first = table.add(n)
    at = slice(first, first + n)
    for name, default in (("committed", NULL), ("pulled", NULL), ("generation", 0),
                          ("last_pull_ts", -1), ("last_active_ts", -1), ("last_update_ts", -1)):
        values = pc.fill_null(rows.column(name).cast(pa.int64()), default)
        getattr(table, name)[at] = values.to_numpy()
    for name in ("pending", "expired"):
        getattr(table, name)[at] = pc.fill_null(rows.column(name), False).to_numpy()
    clients = pc.dictionary_encode(rows.column("last_client").combine_chunks())
    codes = np.append(table.client_codes(clients.dictionary.to_pylist()), NULL)
    table.last_client[at] = codes[pc.fill_null(clients.indices, len(codes) - 1).to_numpy()]
    table.generations[at] = [msgspec.json.decode(d) if d else {}
                             for d in rows.column("detail").to_pylist()]
    return [Position(table, i) for i in range(first, first + n)]


def table_to_state(table: pa.Table) -> State:
    state = State()
    kinds = table.column("row")
    is_append = pc.equal(kinds, "append")
    is_position, is_client = pc.equal(kinds, "position"), pc.equal(kinds, "client")
    appends = table.filter(is_append)
    positions = table.filter(is_position)
    clients = table.filter(is_client)
    table = table.filter(pc.invert(pc.or_(pc.or_(is_append, is_position), is_client)))
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
        elif kind == "meta":
            state.last_ts = r["last_update_ts"]
            state.events_applied = r["max_offset"]
    keys = list(zip(*(positions.column(c).to_pylist()
                      for c in ("consumer_group", "topic", "queue_id")), strict=True))
    loaded = _load_positions(state.table, positions)
    if loaded:
        state.table.set_keys(loaded[0].row, keys)
    state.positions.update(zip(keys, loaded, strict=True))
    keys = zip(*(clients.column(c).to_pylist() for c in ("consumer_group", "topic", "queue_id")),
               strict=True)
    for key, client, pos in zip(keys, clients.column("client_id").to_pylist(),
                                _load_positions(state.client_table, clients), strict=True):
        state.clients.setdefault(key, {})[client] = pos
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
