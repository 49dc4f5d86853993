"""The RSGI application granian's worker runs (`server.app:app`): HTTP/1.1 in, JSON out.

granian parses HTTP, keeps connections alive, times out slow headers and terminates TLS in its
Rust threads; this module only routes, authenticates, bounds bodies and answers. The ledger
opens in `__rsgi_init__` (recovery, then `serving http://HOST:PORT` on stderr) and closes in
`__rsgi_del__`, which granian calls after the last request on SIGTERM/SIGINT: the committer
answers everything accepted, the view is flushed, the process exits 0. The worker dies with
granian's main process and reloads its tokens on SIGHUP (server/process.py).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from ledger import InvalidInput
from ledger.reads.documents import encode_json
from server.committer import BatchStats, Committer
from server.console import ConsoleFiles
from server.deadlines import Deadlines
from server.guard import Guard
from server.metrics import Metrics
from server.openapi import openapi_document
from server.process import die_with_parent, worker_signals
from server.reader_process import ReaderProcess
from server.reads import ReadSide
from server.routes import ROUTES, Api, HttpError, Request, Route, error_status
from server.settings import ServeSettings
from server.tokens import ANYONE, Token, TokenFile

logger = logging.getLogger("offset_ledger.server")
_JSON = [("content-type", "application/json")]
_TEXT = [("content-type", "text/plain; version=0.0.4; charset=utf-8")]
_EXACT = {(r.method, r.pattern): r for r in ROUTES if "{" not in r.pattern}
_PATTERNS = [r for r in ROUTES if "{" in r.pattern]


class App:
    """An RSGI application: `__rsgi__` per request, `__rsgi_init__`/`__rsgi_del__` per worker."""

    def __init__(self) -> None:
        self.api: Api | None = None
        self.tokens: TokenFile | None = None
        self.metrics: Metrics | None = None
        self.openapi = b""
        self.console: ConsoleFiles | None = None
        self.guard: Guard | None = None
        self.deadlines: Deadlines | None = None

    # ---------------------------------------------------------------- lifecycle
    def __rsgi_init__(self, loop: asyncio.AbstractEventLoop) -> None:
        settings = ServeSettings.from_env()
        die_with_parent(settings.parent_pid)
        worker_signals(loop, before_stop=self._interrupt_reads, on_hangup=self.reload_tokens)
        root = Path(settings.data_dir)
        self.tokens = TokenFile.load(Path(settings.tokens)) if settings.tokens else None
        stats = BatchStats()
        # the reader process opens its follower while the writer process recovers the log
        reader = ReaderProcess(root)
        try:
            committer = Committer(root, loop,
                                  batch_commands_max=settings.batch_commands_max,
                                  pending_commands_max=settings.pending_commands_max,
                                  stats=stats)
        except BaseException:
            reader.close(timeout=30)
            raise
        reads = ReadSide(root, loop, reader)
        self.metrics = metrics = Metrics(reads)
        stats.observe = metrics.batch
        stats.refused = metrics.commit_refused
        stats.restarted = metrics.writer_restarted
        self.api = Api(settings, committer, reads, tokens_on=self.tokens is not None)
        self.openapi = encode_json(openapi_document(tokens=self.tokens is not None))
        # granian starts listening after this returns, before it runs the loop: say "serving"
        # from the loop, so a client that connects on reading the line is not refused.
        loop.call_soon(_say_serving, settings)
        self.console = ConsoleFiles()
        self.guard = Guard(settings, tokens_on=self.tokens is not None)
        self.deadlines = Deadlines(loop, settings.body_timeout_s)
        # What start-up loaded (modules, the ledger's state) lives as long as the process: out
        # of the collector's sight, so a full collection walks only what came after (a
        # 30-50 ms pause every few seconds under load was the server's p99 at 2,000 req/s).
        gc.collect()
        gc.freeze()
        metrics.watch_collector()

    def __rsgi_del__(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.api is not None:
            # a runaway query would hold the process at exit (its thread is joined): stop it
            self.api.reads.interrupt_all("the server is shutting down")
            # granian calls this once its loop has stopped: run it for the committer's drain
            loop.run_until_complete(self.api.committer.stop(self.api.settings.shutdown_timeout_s))
            self.api.reads.close()

    def _interrupt_reads(self) -> None:
        if self.api is not None:
            self.api.reads.interrupt_all("the server is shutting down")

    def reload_tokens(self) -> None:
        """SIGHUP: read the tokens file again (a removed token stops working at once); an
        unreadable file keeps the tokens in force and says why."""
        if self.api is None or self.tokens is None:
            logger.warning("SIGHUP: no tokens file to reload (the server runs without --tokens)")
            return
        path = Path(self.api.settings.tokens or "")
        try:
            tokens = TokenFile.load(path)
        except InvalidInput as e:
            logger.error("SIGHUP: tokens file not reloaded, the old tokens stay in force: %s", e)
            return
        self.tokens = tokens
        logger.warning("SIGHUP: reloaded %d token(s) from %s", len(tokens.tokens), path)

    # ---------------------------------------------------------------- requests
    async def __rsgi__(self, scope: Any, proto: Any) -> None:
        if scope.proto != "http":
            return
        started = time.perf_counter()
        route_name = "unknown"
        # HEAD answers as GET does, without the body (RFC 9110)
        method = "GET" if scope.method == "HEAD" else scope.method
        try:
            assert self.guard is not None
            self.guard.check_site(scope.headers)
            if ConsoleFiles.serves(scope.path):
                route_name = "console"
                if method != "GET":
                    raise HttpError(405, f"{method} is not allowed on {scope.path}: use GET",
                                    (("allow", "GET, HEAD"),))
                status, body, headers = self._console_file(scope)
            else:
                route, params = _match(method, scope.path)
                route_name = route.pattern
                status, body, headers = await self._answer(route, params, scope, proto)
        except HttpError as e:
            status, body, headers = e.status, encode_json({"error": e.message}), [*_JSON, *e.headers]
        except Exception as e:  # a library error a handler let through, or a bug
            status = error_status(e)
            if status >= 500:
                logger.exception("internal error on %s %s", scope.method, scope.path)
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            body, headers = encode_json({"error": message}), _JSON
        proto.response_bytes(status, headers, b"" if scope.method == "HEAD" else body)
        if self.metrics is not None:
            self.metrics.request(route_name, time.perf_counter() - started)

    async def _answer(self, route: Route, params: dict[str, str], scope: Any, proto: Any
                      ) -> tuple[int, bytes, list[tuple[str, str]]]:
        assert self.api is not None and self.metrics is not None
        if route.pattern == "/openapi.json":
            return 200, self.openapi, _JSON
        token = self._token(scope, route)
        if route.pattern == "/metrics":
            if not token.may_read():
                raise HttpError(403, f"forbidden: {token.name} may not read metrics")
            return 200, await asyncio.to_thread(self.metrics.render), _TEXT
        if route.body:
            assert self.guard is not None
            self.guard.check_content_type(route.method, scope.headers.get("content-type"))
        body = await self._body(scope, proto) if route.body else b""
        query = _query(scope.query_string)
        unknown = sorted(set(query) - set(route.query))
        if unknown:
            raise HttpError(400, f"unknown query parameter {unknown[0]!r}: "
                                 f"{route.pattern} takes {', '.join(route.query) or 'none'}")
        status, answer, *content_type = await route.handler(self.api, Request(
            route.method, scope.path, params, query, body, token, proto.client_disconnect))
        return status, answer, [("content-type", content_type[0])] if content_type else _JSON

    def _console_file(self, scope: Any) -> tuple[int, bytes, list[tuple[str, str]]]:
        """A file of the web console (no token: the pages hold no data); 304 when the
        browser's copy is current."""
        assert self.console is not None
        found = self.console.find(scope.path)
        if found is None:
            raise HttpError(404, f"no console file {scope.path!r}")
        if scope.headers.get("if-none-match") == found.etag:
            return 304, b"", list(found.headers)
        return 200, found.body, list(found.headers)

    def _token(self, scope: Any, route: Route) -> Token:
        if self.tokens is None or route.public:
            return ANYONE
        header = scope.headers.get("authorization")
        if not header:
            raise HttpError(401, "no token: send Authorization: Bearer <token>")
        kind, _, presented = header.partition(" ")
        if kind.lower() != "bearer" or not presented.strip():
            raise HttpError(401, "the Authorization header must be Bearer <token>")
        token = self.tokens.find(presented.strip())
        if token is None:
            raise HttpError(401, "unknown token")
        return token

    async def _body(self, scope: Any, proto: Any) -> bytes:
        """The request body: 413 before reading one declared over the limit, or once a chunked
        one passes it; read under a timeout so a slow sender holds only its own request."""
        assert self.api is not None
        limit = self.api.settings.max_body_bytes
        length = scope.headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise HttpError(400, f"invalid Content-Length {length!r}")
            if int(length) > limit:
                raise HttpError(413, f"the body is {length} bytes: at most {limit} "
                                     "(--max-body-bytes)")
        assert self.deadlines is not None
        task = self.deadlines.watch()
        try:
            if length is not None:
                return await proto()
            chunks, size = [], 0
            async for chunk in proto:
                size += len(chunk)
                if size > limit:
                    raise HttpError(413, f"the body passed {limit} bytes (--max-body-bytes)")
                chunks.append(chunk)
            return b"".join(chunks)
        except asyncio.CancelledError:
            if not self.deadlines.expired(task):
                raise
            raise HttpError(408, "the body did not arrive within "
                                 f"{self.deadlines.timeout_s:g} s") from None
        finally:
            self.deadlines.forget(task)


def _say_serving(settings: ServeSettings) -> None:
    url = settings.url
    sys.stderr.write(f"serving {url}\n")
    sys.stderr.flush()
    if settings.announce_json:
        sys.stdout.write(encode_json({"url": url}).decode() + "\n")
        sys.stdout.flush()


_SPECIAL = {("GET", "/metrics"): Route("GET", "/metrics", None, "Prometheus text",  # type: ignore[arg-type]
                                       answer="Text"),
            ("GET", "/openapi.json"): Route("GET", "/openapi.json", None,  # type: ignore[arg-type]
                                            "This document", answer="Object", public=True)}


def _query(query_string: str) -> dict[str, str]:
    """The query parameters, each given once (a repeated one is refused: which one counts
    would be a guess)."""
    query: dict[str, str] = {}
    if not query_string:
        return query
    for k, v in parse_qs(query_string, keep_blank_values=True).items():
        if len(v) > 1:
            raise HttpError(400, f"query parameter {k!r} is given {len(v)} times: give it once")
        query[k] = v[0]
    return query


def _match(method: str, path: str) -> tuple[Route, dict[str, str]]:
    """The route of `path`, which granian has percent-decoded already: a path segment is taken
    as it is (`/v1/groups/a%2541` names group `a%41`), never decoded twice."""
    route = _EXACT.get((method, path)) or _SPECIAL.get((method, path))
    if route is not None:
        return route, {}
    for route in _PATTERNS:
        m = route.regex.match(path)
        if m is not None and route.method == method:
            return route, m.groupdict()
    methods = {r.method for r in (*ROUTES, *_SPECIAL.values()) if r.regex.match(path)}
    allowed = ", ".join(sorted(methods | ({"HEAD"} if "GET" in methods else set())))
    if allowed:  # RFC 9110: a 405 says which methods the path takes
        raise HttpError(405, f"{method} is not allowed on {path}: use {allowed}",
                        (("allow", allowed),))
    raise HttpError(404, f"no route {method} {path} (see /openapi.json)")


app = App()
