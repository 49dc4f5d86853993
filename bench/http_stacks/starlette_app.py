"""The candidate app on Starlette: served by uvicorn (uvloop + httptools) or by granian's ASGI.

Why Starlette: it is the thin ASGI layer under FastAPI, with routing, lifespan and a test
client, and no validation of its own (msgspec does that). One module serves both ASGI servers,
so their figures differ by the server alone.

    uvicorn bench.http_stacks.starlette_app:app --loop uvloop --http httptools --no-access-log
    granian --interface asgi --loop uvloop bench.http_stacks.starlette_app:app
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bench.http_stacks.group_commit import (
    HEALTHZ_BODY,
    MAX_BODY_BYTES,
    TOO_LARGE_BODY,
    BadRequest,
    GroupCommitter,
    body_too_large,
    decode_commit,
    encode_accepted,
    encode_error,
)

committer = GroupCommitter.from_env()
JSON = "application/json"


async def read_limited(request: Request) -> bytes | None:
    """The body, or None once it passes MAX_BODY_BYTES (a chunked body has no length to check)."""
    if body_too_large(request.headers.get("content-length")):
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def commit(request: Request) -> Response:
    """POST /v1/commit: answered once the batch holding this commit is durable."""
    body = await read_limited(request)
    if body is None:
        return Response(TOO_LARGE_BODY, 413, media_type=JSON)
    try:
        req = decode_commit(body)
    except BadRequest as exc:
        return Response(encode_error(str(exc)), 400, media_type=JSON)
    return Response(encode_accepted(await committer.submit(req)), media_type=JSON)


async def healthz(request: Request) -> Response:
    """GET /healthz: 200 once the committer runs."""
    return Response(HEALTHZ_BODY, media_type=JSON)


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """Start the writer with the server; on shutdown finish every queued commit first."""
    committer.start()
    yield
    await committer.stop()


app = Starlette(
    routes=[Route("/v1/commit", commit, methods=["POST"]), Route("/healthz", healthz, methods=["GET"])],
    lifespan=lifespan,
)
