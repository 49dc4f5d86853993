"""The plain HTTP server of issue 22's target: `GET /v1/history` answered from SQLite's index.

Why: "history through serve: at least 1x a plain HTTP server over that SQLite index" only means
something if the plain server is a competent one: the same HTTP stack as `offset-ledger serve`
(granian's RSGI on uvloop), one SQLite connection with a 256 MiB page cache over the events
table with its (consumer_group, ts) and (consumer_group, topic, queue_id, ts) indexes
(bench/read_scaling.py builds it from the ledger's own log), and the same JSON document per
event (`ledger.reads.documents.event_doc`, encoded by msgspec). It answers group / topic /
queue / since / until / limit as the ledger's route does (times in epoch ms only).

    SQLITE_HISTORY_DB=events.sqlite granian --interface rsgi --loop uvloop --port 9000 \\
        bench.baselines.sqlite_history_server:rsgi_app
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from typing import Any
from urllib.parse import parse_qs

import msgspec

from ledger.reads.documents import event_doc

JSON = "application/json"
HEADERS = [("content-type", JSON)]
COLUMNS = ("seq", "ts", "kind", "consumer_group", "topic", "queue_id", "offset", "prev_offset",
           "generation", "client_id", "actor", "store_ts", "detail")
_ENCODE = msgspec.json.Encoder().encode


def history_sql(query: dict[str, str]) -> tuple[str, list[Any]]:
    """The SELECT for a history query string, newest `limit` kept, oldest first."""
    where, params = [], []
    for name in ("group", "topic", "queue_id"):
        if name in query:
            where.append(f"{'consumer_group' if name == 'group' else name} = ?")
            params.append(int(query[name]) if name == "queue_id" else query[name])
    if "since" in query:
        where.append("ts >= ?")
        params.append(int(query["since"]))
    if "until" in query:
        where.append("ts <= ?")
        params.append(int(query["until"]))
    sql = "SELECT * FROM events" + (f" WHERE {' AND '.join(where)}" if where else "")
    if "limit" in query:
        sql = f"SELECT * FROM ({sql} ORDER BY seq DESC LIMIT {int(query['limit'])})"
    return sql + " ORDER BY seq", params


class RsgiApp:
    """`GET /v1/history` and `/healthz` over one SQLite connection."""

    def __init__(self) -> None:
        self.conn: sqlite3.Connection | None = None

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.conn = sqlite3.connect(os.environ["SQLITE_HISTORY_DB"], check_same_thread=False)
        self.conn.execute("PRAGMA cache_size=-262144")

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.conn is not None:
            self.conn.close()

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.method == "GET" and scope.path == "/healthz":
            proto.response_bytes(200, HEADERS, b'{"ok":true}')
            return
        if scope.method != "GET" or scope.path != "/v1/history":
            proto.response_bytes(404, HEADERS, b'{"error":"no such route"}')
            return
        query = {k: v[-1] for k, v in parse_qs(scope.query_string).items()}
        try:
            sql, params = history_sql(query)
        except ValueError as exc:
            proto.response_bytes(400, HEADERS, _ENCODE({"error": str(exc)}))
            return
        assert self.conn is not None
        rows = self.conn.execute(sql, params).fetchall()
        proto.response_bytes(200, HEADERS, _ENCODE(
            [event_doc(dict(zip(COLUMNS, row, strict=True))) for row in rows]))


rsgi_app = RsgiApp()
