"""The reference server of the issue's target: the same `POST /v1/commit` API, stored in PostgreSQL.

Why: "must reach >= 3x a reference server with the same API that stores into PostgreSQL" only
means something if the reference is done competently, so it is: aiohttp on uvloop (the stack
chosen for the ledger's server, bench/http_stacks/RESULTS.md), an asyncpg pool (binary protocol,
prepared statements cached per connection), one transaction per request holding the history
insert and the increase-only upsert, `synchronous_commit=on` and fsync on, so an answer leaves
only once PostgreSQL has flushed its WAL (concurrent commits share a flush: PostgreSQL's own
group commit). A stale commit changes nothing and is answered 409, as the ledger's rule does.

Two ways to send the transaction, both measured (`--sql`):
- `cte` (default): one statement whose CTEs do the upsert and the history insert: one round
  trip, one implicit transaction;
- `tx`: BEGIN; upsert ... RETURNING; INSERT INTO history; COMMIT: four round trips.

    python -m bench.baselines.pg_server --dsn postgresql://... --port 9000 [--pool 32] [--sql cte]

The same server on granian's RSGI (the other measured front end; options from the environment,
since granian's command line has no room for the app's):

    PG_REF_DSN=postgresql://... PG_REF_POOL=32 PG_REF_SQL=cte \
        granian --interface rsgi --loop uvloop --port 9000 bench.baselines.pg_server:rsgi_app
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any, Literal

import asyncpg
import msgspec
from aiohttp import web

from bench.http_stacks.group_commit import (
    HEALTHZ_BODY,
    MAX_BODY_BYTES,
    TOO_LARGE_BODY,
    BadRequest,
    CommitRequest,
    decode_commit,
    encode_error,
)

SqlMode = Literal["cte", "tx"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS history (
    seq bigserial PRIMARY KEY,
    ts timestamptz NOT NULL DEFAULT now(),
    kind text NOT NULL,
    consumer_group text NOT NULL,
    topic text NOT NULL,
    queue_id integer NOT NULL,
    "offset" bigint NOT NULL,
    client_id text
);
CREATE TABLE IF NOT EXISTS offsets (
    consumer_group text NOT NULL,
    topic text NOT NULL,
    queue_id integer NOT NULL,
    "offset" bigint NOT NULL,
    client_id text,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (consumer_group, topic, queue_id)
);
"""

UPSERT = """
INSERT INTO offsets AS o (consumer_group, topic, queue_id, "offset", client_id, updated_at)
VALUES ($1, $2, $3, $4, $5, now())
ON CONFLICT (consumer_group, topic, queue_id) DO UPDATE
    SET "offset" = excluded."offset", client_id = excluded.client_id, updated_at = excluded.updated_at
    WHERE o."offset" <= excluded."offset"
RETURNING o."offset"
"""
HISTORY = """
INSERT INTO history (kind, consumer_group, topic, queue_id, "offset", client_id)
VALUES ('commit', $1, $2, $3, $4, $5)
"""
CURRENT = 'SELECT "offset" FROM offsets WHERE consumer_group = $1 AND topic = $2 AND queue_id = $3'
# The outer SELECT sees the table as it was before this statement, so for a refused (stale)
# commit `current` is the offset that refused it.
COMMIT_CTE = f"""
WITH up AS ({UPSERT}),
hist AS (
    INSERT INTO history (kind, consumer_group, topic, queue_id, "offset", client_id)
    SELECT 'commit', $1, $2, $3, $4, $5 FROM up
)
SELECT EXISTS (SELECT 1 FROM up) AS accepted, ({CURRENT}) AS current
"""


class Answer(msgspec.Struct, omit_defaults=True):
    """The commit answer: 200 when accepted, 409 with the committed offset when stale."""

    accepted: bool
    offset: int
    error: str | None = None


_ENCODE = msgspec.json.Encoder().encode


class PgStore:
    """The offsets in PostgreSQL: one durable transaction per commit."""

    def __init__(self, pool: asyncpg.Pool, sql: SqlMode = "cte") -> None:
        self.pool = pool
        self.sql: SqlMode = sql

    @classmethod
    async def open(cls, dsn: str, pool_size: int, sql: SqlMode = "cte") -> PgStore:
        """A pool of `pool_size` connections with synchronous_commit on, and the schema."""
        pool = await asyncpg.create_pool(dsn, min_size=pool_size, max_size=pool_size,
                                         server_settings={"synchronous_commit": "on"})
        async with pool.acquire() as con:
            await con.execute(SCHEMA)
            mode = await con.fetchval("SHOW synchronous_commit")
            fsync = await con.fetchval("SHOW fsync")
        if mode != "on" or fsync != "on":
            raise RuntimeError(f"PostgreSQL is not durable here: synchronous_commit={mode}, fsync={fsync}")
        return cls(pool, sql)

    async def close(self) -> None:
        await self.pool.close()

    async def commit(self, req: CommitRequest) -> tuple[bool, int]:
        """(accepted, offset): the new offset, or the committed one that refused a stale commit."""
        args = (req.group, req.topic, req.queue_id, req.offset, req.client)
        async with self.pool.acquire() as con:
            if self.sql == "cte":
                row = await con.fetchrow(COMMIT_CTE, *args)
                return (True, req.offset) if row["accepted"] else (False, row["current"])
            async with con.transaction():
                if await con.fetchval(UPSERT, *args) is None:
                    return False, await con.fetchval(CURRENT, *args[:3])
                await con.execute(HISTORY, *args)
                return True, req.offset


STORE = web.AppKey("store", PgStore)
JSON = "application/json"


async def commit(request: web.Request) -> web.Response:
    """POST /v1/commit: 200 once PostgreSQL committed it; 409 when stale; 400 on a bad body."""
    # A declared length over the limit is refused before any of the body is read; a chunked
    # body is cut by client_max_size (read() raises once past it).
    if (request.content_length or 0) > MAX_BODY_BYTES:
        return web.Response(body=TOO_LARGE_BODY, status=413, content_type=JSON)
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return web.Response(body=TOO_LARGE_BODY, status=413, content_type=JSON)
    try:
        req = decode_commit(body)
    except BadRequest as exc:
        return web.Response(body=encode_error(str(exc)), status=400, content_type=JSON)
    accepted, offset = await request.app[STORE].commit(req)
    if accepted:
        return web.Response(body=_ENCODE(Answer(True, offset)), content_type=JSON)
    return web.Response(body=_ENCODE(Answer(False, offset, "commit refused: stale")), status=409,
                        content_type=JSON)


async def healthz(request: web.Request) -> web.Response:
    """GET /healthz: 200 once the pool is open."""
    return web.Response(body=HEALTHZ_BODY, content_type=JSON)


def make_app(dsn: str, pool_size: int = 32, sql: SqlMode = "cte") -> web.Application:
    """The app; the pool opens with the app and closes on shutdown."""

    async def store_ctx(app: web.Application) -> AsyncIterator[None]:
        app[STORE] = await PgStore.open(dsn, pool_size, sql)
        yield
        await app[STORE].close()

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/v1/commit", commit)
    app.router.add_get("/healthz", healthz)
    app.cleanup_ctx.append(store_ctx)
    return app


class RsgiApp:
    """The same routes as an RSGI app for granian; the pool opens in the worker's loop."""

    HEADERS = [("content-type", JSON)]

    def __init__(self) -> None:
        self.store: PgStore | None = None

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        sql = os.environ.get("PG_REF_SQL", "cte")
        if sql not in ("cte", "tx"):
            raise SystemExit(f"PG_REF_SQL={sql!r}: expected cte or tx")
        self.store = loop.run_until_complete(PgStore.open(
            os.environ["PG_REF_DSN"], int(os.environ.get("PG_REF_POOL", "32")), sql))  # type: ignore[arg-type]

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.store is not None:
            loop.run_until_complete(self.store.close())

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.path == "/healthz" and scope.method == "GET":
            proto.response_bytes(200, self.HEADERS, HEALTHZ_BODY)
        elif scope.path != "/v1/commit" or scope.method != "POST":
            proto.response_bytes(404, self.HEADERS, encode_error("no such route"))
        elif int(scope.headers.get("content-length") or 0) > MAX_BODY_BYTES:
            proto.response_bytes(413, self.HEADERS, TOO_LARGE_BODY)
        else:
            try:
                req = decode_commit(await proto())
            except BadRequest as exc:
                proto.response_bytes(400, self.HEADERS, encode_error(str(exc)))
                return
            assert self.store is not None
            accepted, offset = await self.store.commit(req)
            if accepted:
                proto.response_bytes(200, self.HEADERS, _ENCODE(Answer(True, offset)))
            else:
                proto.response_bytes(409, self.HEADERS,
                                     _ENCODE(Answer(False, offset, "commit refused: stale")))


rsgi_app = RsgiApp()


def main() -> None:
    """Serve on uvloop without access log, as the ledger's server candidates are measured."""
    import uvloop

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--pool", type=int, default=32, help="PostgreSQL connections in the pool")
    ap.add_argument("--sql", choices=("cte", "tx"), default="cte")
    args = ap.parse_args()
    web.run_app(make_app(args.dsn, args.pool, args.sql), host=args.host, port=args.port,
                access_log=None, print=None, shutdown_timeout=10, loop=uvloop.new_event_loop())


if __name__ == "__main__":
    main()
