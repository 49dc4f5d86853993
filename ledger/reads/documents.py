"""The documents the faces print and answer: what `--json` prints is what the server's routes
answer, shaped once here (times as ISO-8601 UTC next to their epoch ms where people read them).
"""

from __future__ import annotations

import gc
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from ledger.timeparse import iso, iso_column

STATE_COLUMNS = ("consumer_group", "topic", "queue_id", "committed_offset", "generation")


def with_iso(row: dict[str, Any], *names: str) -> dict[str, Any]:
    """Epoch-ms fields shown as ISO-8601 UTC (in place)."""
    for n in names:
        if n in row:
            row[n] = iso(row[n])
    return row


def progress_doc(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`progress --json`, `GET /v1/groups/{group}/progress`."""
    return [with_iso(r, "last_update") for r in rows]


def groups_doc(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`group list --json`, `GET /v1/groups`."""
    return [with_iso(r, "last_update") for r in rows]


def event_doc(e: dict[str, Any]) -> dict[str, Any]:
    """An event with ISO times plus `ts_ms` / `store_ts_ms`."""
    return {
        "seq": e["seq"], "ts": iso(e["ts"]), "ts_ms": e["ts"], "kind": e["kind"],
        "consumer_group": e["consumer_group"], "topic": e["topic"], "queue_id": e["queue_id"],
        "offset": e["offset"], "prev_offset": e["prev_offset"], "generation": e["generation"],
        "client_id": e["client_id"], "actor": e["actor"], "store_ts": iso(e["store_ts"]),
        "store_ts_ms": e["store_ts"], "detail": e["detail"],
    }


class EventDoc(msgspec.Struct, gc=False):
    """`event_doc`'s shape as a struct: built from positional values a column at a time and
    encoded by msgspec without a dict per event (a group's hour through `GET /v1/history`,
    196 events: 0.34 -> 0.24 ms to build and encode, the same bytes)."""

    seq: int
    ts: str
    ts_ms: int
    kind: str
    consumer_group: str | None
    topic: str | None
    queue_id: int | None
    offset: int | None
    prev_offset: int | None
    generation: int | None
    client_id: str | None
    actor: str | None
    store_ts: str | None
    store_ts_ms: int | None
    detail: str | None


def history_events(table: pa.Table) -> list[EventDoc]:
    """`event_doc` of every event of a history table, column by column."""
    def values(name: str) -> list[Any]:
        column = table.column(name)
        return [None] * len(column) if column.null_count == len(column) else column.to_pylist()

    ts = values("ts")
    return list(map(EventDoc, values("seq"), iso_column(table.column("ts")), ts,
                    values("kind"), values("consumer_group"), values("topic"),
                    values("queue_id"), values("offset"), values("prev_offset"),
                    values("generation"), values("client_id"), values("actor"),
                    iso_column(table.column("store_ts")), values("store_ts"), values("detail")))


def history_doc(table: pa.Table) -> list[dict[str, Any]]:
    """`history --json`, `GET /v1/history`: `event_doc` of every event, as dicts (a cluster
    merges shards' documents); the server encodes `history_events` directly."""
    return msgspec.to_builtins(history_events(table))


def state_doc(table: pa.Table) -> list[dict[str, Any]]:
    """`at --json`, `GET /v1/state`: committed offsets at a time."""
    return [{c: r.get(c) for c in STATE_COLUMNS} for r in table.to_pylist()]


def series_rows(doc: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A lag series document as one row per queue and point (a table for people)."""
    return [with_iso({"consumer_group": q["consumer_group"], "topic": q["topic"],
                      "queue_id": q["queue_id"], **point}, "ts")
            for q in doc for point in q["series"]]


#: Points of a group's recent-lag sparkline in the lag summary, at most.
COMMIT_LAG_POINTS_MAX = 40


def lag_summary_doc(doc: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`lag --summary --json`, `GET /v1/lag`: each group of a lag document without its queues'
    windows (a few hundred bytes where the whole document of 200 groups is megabytes): status,
    complete, total lag, the highest lag and time lag, the last commit, how many queues have
    each status, and its lag at its last commits (`commit_lag`). No cyclic garbage collection
    meanwhile: the document it reads is some 200k objects that each collection would walk."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return [_group_summary(g) for g in doc]
    finally:
        if enabled:
            gc.enable()


def _group_summary(g: dict[str, Any]) -> dict[str, Any]:
    """One group of `lag_summary_doc`."""
    queues = g["queues"]
    statuses: dict[str, int] = {}
    for q in queues:
        statuses[q["status"]] = statuses.get(q["status"], 0) + 1
    lags_ms = [q["lag_ms"] for q in queues if q["lag_ms"] is not None]
    last = max((q["window"][-1]["ts"] for q in queues if q["window"]), default=None)
    worst = g["max_lag"]
    return {
        "consumer_group": g["consumer_group"], "status": g["status"],
        "complete": g["complete"], "total_lag": g["total_lag"],
        "max_lag": None if worst is None else {k: v for k, v in worst.items()
                                               if k != "window"},
        "max_lag_ms": max(lags_ms, default=None), "last_commit": iso(last),
        "last_commit_ms": last, "queues": len(queues), "statuses": statuses,
        "commit_lag": commit_lag(queues)}


def commit_lag(queues: list[dict[str, Any]]) -> list[list[int]]:
    """`[ts, lag]` points: the group's lag as of each of its last commits, where every queue
    counts the lag it had at its own latest commit up to then (Burrow's lag at commit time,
    read from the windows). Starts where every queue with a window has an entry, so no
    point leaves a queue out; at most COMMIT_LAG_POINTS_MAX points, evenly picked."""
    windows = [q["window"] for q in queues if q["window"]]
    if not windows:
        return []
    ts = np.array([e["ts"] for w in windows for e in w], np.int64)
    lags = np.array([e["lag"] or 0 for w in windows for e in w], np.int64)
    first = np.cumsum([0] + [len(w) for w in windows[:-1]])
    steps = np.diff(lags, prepend=0)  # each entry's change of its own queue's lag
    steps[first] = lags[first]
    order = np.argsort(ts, kind="stable")
    ts, totals = ts[order], np.cumsum(steps[order])
    last_of_ts = np.append(ts[1:] != ts[:-1], True)
    keep = last_of_ts & (ts >= max(w[0]["ts"] for w in windows))
    points = np.column_stack((ts[keep], totals[keep]))
    if len(points) > COMMIT_LAG_POINTS_MAX:
        points = points[np.linspace(0, len(points) - 1, COMMIT_LAG_POINTS_MAX).round().astype(int)]
    return points.tolist()


def json_default(value: Any) -> Any:
    """SQL results may hold DuckDB's HUGEINT sums (Decimal), dates and blobs."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


#: Any document as JSON bytes (the faces' one encoder).
encode_json = msgspec.json.Encoder(enc_hook=json_default).encode
