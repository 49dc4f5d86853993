"""The full state as one Arrow table (checkpoint Parquet files) and back.

One row per queue, group, position, broadcast client position and time-index entry, told apart
by `row`. The same rows feed DuckDB's state-at queries and Spark's replay.
"""

from __future__ import annotations

import json

import pyarrow as pa

from ledger.state import GroupSettings, Position, QueueState, State

CHECKPOINT_SCHEMA: pa.Schema = pa.schema(
    [
        pa.field("row", pa.string(), nullable=False),  # queue | group | position | client | index
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


def _position_row(row: str, key, client, p: Position) -> dict:
    return {
        "row": row, "consumer_group": key[0], "topic": key[1], "queue_id": key[2],
        "client_id": client, "committed": p.committed, "pulled": p.pulled,
        "generation": p.generation, "pending": p.pending, "expired": p.expired,
        "last_client": p.last_client, "last_pull_ts": p.last_pull_ts,
        "last_active_ts": p.last_active_ts, "last_update_ts": p.last_update_ts,
        "detail": json.dumps(p.client_generations, separators=(",", ":"))
        if p.client_generations else None,
    }


def state_to_table(state: State) -> pa.Table:
    rows: list[dict] = []
    for (topic, qid), q in state.queues.items():
        rows.append({"row": "queue", "topic": topic, "queue_id": qid, "min_offset": q.min_offset,
                     "max_offset": q.max_offset, "last_update_ts": q.last_update_ts})
        rows.extend(
            {"row": "index", "topic": topic, "queue_id": qid, "store_ts": ts, "min_offset": off}
            for ts, off in zip(q.index_store_ts, q.index_offset, strict=True)
        )
    for name, g in state.groups.items():
        rows.append({"row": "group", "consumer_group": name, "detail": g.to_json()})
    for key, p in state.positions.items():
        rows.append(_position_row("position", key, None, p))
    for key, per_client in state.clients.items():
        for client, p in per_client.items():
            rows.append(_position_row("client", key, client, p))
    rows.append({"row": "meta", "last_update_ts": state.last_ts,
                 "max_offset": state.events_applied})
    cols = {n: [r.get(n) for r in rows] for n in _NAMES}
    return pa.Table.from_pydict(cols, schema=CHECKPOINT_SCHEMA)


def _position(r: dict) -> Position:
    return Position(
        committed=r["committed"], pulled=r["pulled"], generation=r["generation"],
        pending=r["pending"], expired=r["expired"], last_client=r["last_client"],
        last_pull_ts=r["last_pull_ts"], last_active_ts=r["last_active_ts"],
        last_update_ts=r["last_update_ts"],
        client_generations=json.loads(r["detail"]) if r["detail"] else {},
    )


def table_to_state(table: pa.Table) -> State:
    state = State()
    for r in table.to_pylist():
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
    return state
