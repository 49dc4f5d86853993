"""The documents the faces print and answer: what `--json` prints is what the server's routes
answer, shaped once here (times as ISO-8601 UTC next to their epoch ms where people read them).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import msgspec
import pyarrow as pa

from ledger.timeparse import iso

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


def history_doc(table: pa.Table) -> list[dict[str, Any]]:
    """`history --json`, `GET /v1/history`."""
    return [event_doc(e) for e in table.to_pylist()]


def state_doc(table: pa.Table) -> list[dict[str, Any]]:
    """`at --json`, `GET /v1/state`: committed offsets at a time."""
    return [{c: r.get(c) for c in STATE_COLUMNS} for r in table.to_pylist()]


def series_rows(doc: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A lag series document as one row per queue and point (a table for people)."""
    return [with_iso({"consumer_group": q["consumer_group"], "topic": q["topic"],
                      "queue_id": q["queue_id"], **point}, "ts")
            for q in doc for point in q["series"]]


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
