"""The candidate app on granian's RSGI interface (granian's own, lower-overhead protocol).

Why: RSGI hands the app the whole body and takes the whole response in one call each, with no
ASGI message dicts; this measures what granian costs when no ASGI framework sits on it.

    granian --interface rsgi --loop uvloop bench.http_stacks.granian_rsgi:app
"""

from __future__ import annotations

import asyncio
from typing import Any

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

_HEADERS = [("content-type", "application/json")]
_NOT_FOUND = b'{"error":"no such route"}'


class App:
    """An RSGI application: `__rsgi__` per request, `__rsgi_init__`/`__rsgi_del__` per worker."""

    def __init__(self) -> None:
        self.committer = GroupCommitter.from_env()

    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.run_until_complete(self._start())

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.run_until_complete(self.committer.stop())

    async def _start(self) -> None:
        self.committer.start()

    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.path == "/v1/commit" and scope.method == "POST":
            await self._commit(scope, proto)
        elif scope.path == "/healthz" and scope.method == "GET":
            proto.response_bytes(200, _HEADERS, HEALTHZ_BODY)
        else:
            proto.response_bytes(404, _HEADERS, _NOT_FOUND)

    async def _commit(self, scope: Any, proto: Any) -> None:
        body = await self._read_limited(scope, proto)
        if body is None:
            proto.response_bytes(413, _HEADERS, TOO_LARGE_BODY)
            return
        try:
            req = decode_commit(body)
        except BadRequest as exc:
            proto.response_bytes(400, _HEADERS, encode_error(str(exc)))
            return
        proto.response_bytes(200, _HEADERS, encode_accepted(await self.committer.submit(req)))

    @staticmethod
    async def _read_limited(scope: Any, proto: Any) -> bytes | None:
        """The body, or None once over MAX_BODY_BYTES; a declared length is checked first."""
        length = scope.headers.get("content-length")
        if body_too_large(length):
            return None
        if length is not None:
            return await proto()
        chunks: list[bytes] = []
        size = 0
        async for chunk in proto:
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                return None
            chunks.append(chunk)
        return b"".join(chunks)


app = App()
