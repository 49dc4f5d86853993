"""The candidate app on aiohttp's own server (llhttp parser in C), run on uvloop.

Why: aiohttp is a mature asyncio server with its body limit built in (`client_max_size`,
413 before the body is read whole) and no separate ASGI server process model.

    python -m bench.http_stacks.aiohttp_app --port 8000
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

from aiohttp import web

from bench.http_stacks.group_commit import (
    HEALTHZ_BODY,
    MAX_BODY_BYTES,
    TOO_LARGE_BODY,
    BadRequest,
    GroupCommitter,
    decode_commit,
    encode_accepted,
    encode_error,
)

JSON = "application/json"
COMMITTER = web.AppKey("committer", GroupCommitter)


async def commit(request: web.Request) -> web.Response:
    """POST /v1/commit: answered once the batch holding this commit is durable."""
    # A declared length over the limit is refused before any of the body is read; a chunked
    # body is cut by client_max_size (read() raises once past it).
    if (request.content_length or 0) > MAX_BODY_BYTES:
        return web.Response(body=TOO_LARGE_BODY, status=413, content_type=JSON)
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
    offset = await request.app[COMMITTER].submit(req)
    return web.Response(body=encode_accepted(offset), content_type=JSON)


async def healthz(request: web.Request) -> web.Response:
    """GET /healthz: 200 once the committer runs."""
    return web.Response(body=HEALTHZ_BODY, content_type=JSON)


async def committer_ctx(app: web.Application) -> AsyncIterator[None]:
    """Start the writer with the app; on cleanup finish every queued commit first."""
    committer = GroupCommitter.from_env()
    committer.start()
    app[COMMITTER] = committer
    yield
    await committer.stop()


def make_app() -> web.Application:
    """The app with both routes and the DESIGN's body limit."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/v1/commit", commit)
    app.router.add_get("/healthz", healthz)
    app.cleanup_ctx.append(committer_ctx)
    return app


def main() -> None:
    """Serve on uvloop, without access log (as the other candidates are run)."""
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--shutdown-timeout", type=float, default=10.0,
                        help="seconds SIGTERM waits for in-flight requests")
    parser.add_argument("--keepalive-timeout", type=float, default=75.0,
                        help="seconds an idle keep-alive connection is kept")
    parser.add_argument("--tls-cert", help="PEM certificate file (with --tls-key: serve HTTPS)")
    parser.add_argument("--tls-key", help="PEM private key file")
    args = parser.parse_args()
    ssl_context = None
    if args.tls_cert:
        import ssl

        ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ssl_context.load_cert_chain(args.tls_cert, args.tls_key)
    web.run_app(make_app(), host=args.host, port=args.port, access_log=None, print=None,
                shutdown_timeout=args.shutdown_timeout, keepalive_timeout=args.keepalive_timeout,
                ssl_context=ssl_context, loop=uvloop.new_event_loop())


if __name__ == "__main__":
    main()
