"""API v1: one table of routes, each a thin call of the library (DESIGN.md, "Server").

Writes go through the group committer (one batch, one fsync, then the answer); reads go to the
read side (a follower of the durable log, in the reader process), so they never wait for the
writer. Every handler takes what the client sent and hands it to the same decoders and checks
the CLI uses; bad input is a 4xx with one line naming the bad value.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import pyarrow as pa

from ledger import (
    Commit,
    GroupDelete,
    GroupSet,
    HistoryUnavailable,
    InvalidInput,
    LedgerError,
    LedgerUnusable,
    Pull,
    QueueAppend,
    QueueTruncate,
    RefusedError,
    Reset,
)
from ledger.commands.command import Command, decode_as, decode_document
from ledger.commands.results import CommitResult, ResetResult, Result, result_doc
from ledger.reads.documents import encode_json
from ledger.reads.generations import GenerationsQuery
from server import answers
from server.committer import Busy, Committer, Stopping
from server.reader_process import ReaderGone
from server.reads import ReadSide
from server.settings import ServeSettings
from server.tokens import Token


class HttpError(Exception):
    """An answer other than success: status and one line naming what was wrong."""

    def __init__(self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()
                 ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


@dataclass
class Request:
    method: str
    path: str
    params: dict[str, str]
    query: dict[str, str]
    body: bytes
    token: Token
    #: Resolves when the client has gone (granian's `client_disconnect`): work for it can stop.
    disconnected: Callable[[], Awaitable[None]] | None = None


#: A status and a JSON body, or a status, a body and its content type.
Answer = tuple[int, bytes] | tuple[int, bytes, str]
Handler = Callable[["Api", Request], Awaitable[Answer]]


@dataclass(frozen=True)
class Route:
    """A route: method, path pattern, handler, and what the OpenAPI document says of it."""

    method: str
    pattern: str
    handler: Handler
    summary: str
    query: tuple[str, ...] = ()
    body: str | None = None  # name of the request body's schema
    answer: str = "Rows"  # name of the 200 answer's schema
    public: bool = False  # answered without a token
    regex: re.Pattern[str] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", self.pattern)
        object.__setattr__(self, "regex", re.compile(f"^{regex}$"))


class Api:
    """The routes' shared parts: the committer (writes), the read side, the settings."""

    def __init__(self, settings: ServeSettings, committer: Committer, reads: ReadSide,
                 tokens_on: bool) -> None:
        self.settings = settings
        self.committer = committer
        self.reads = reads
        self.tokens_on = tokens_on

    # ---------------------------------------------------------------- helpers
    def actor(self, cmd: Command | LedgerError, token: Token) -> str | None:
        """Who a command's events name: the token's name; without tokens (loopback) what an
        operator's command claims, else the loopback sender's name, so that a reset from the
        console is never anonymous; None keeps a consumer's client id as its actor."""
        if self.tokens_on:
            return token.name
        if isinstance(cmd, LedgerError) or not hasattr(cmd, "actor"):
            return None
        return cmd.actor or token.name  # type: ignore[attr-defined]

    async def write(self, commands: list[Command | LedgerError], token: Token,
                    denied: list[str | None] | None = None) -> list[Result]:
        """Commands through the group committer; answered once durable."""
        actors = [self.actor(c, token) for c in commands]
        try:
            future = self.committer.submit(commands, actors, denied,  # type: ignore[arg-type]
                                           backfill=token.may_backfill())
        except (Busy, Stopping) as e:
            raise HttpError(503, str(e)) from None
        try:
            return await future
        except LedgerUnusable as e:
            raise HttpError(503, f"the write failed and the ledger is reopening: {e}") from None

    async def read(self, fn: Callable[[Any], Any]) -> Any:
        """`fn(follower)` on the reader thread: the follower caught up with the durable log."""
        try:
            return await self.reads.run(fn)
        except Stopping as e:
            raise HttpError(503, str(e)) from None

    async def read_json(self, fn: Callable[..., Any], *args: Any) -> Answer:
        """`fn(follower, *args)` read and encoded as JSON in the reader process (a large
        document would otherwise hold the event loop while every other request waits): `fn`
        one of server.answers."""
        try:
            return 200, await self.reads.answer(fn, *args)
        except (Stopping, ReaderGone) as e:  # the reader process restarts, or the server stops
            raise HttpError(503, str(e)) from None

    def may(self, ok: bool, token: Token, what: str) -> None:
        if not ok:
            raise HttpError(403, f"forbidden: {token.name} may not {what}")


def _json(status: int, doc: Any) -> Answer:
    return status, encode_json(doc)


def _single(result: Result, ok_status: int = 200) -> Answer:
    """One command's answer: its document; a refusal by a rule is 409 with the same body, a
    bad value 400, a sender who may not 403."""
    if result.error is None:
        return _json(ok_status, result_doc(result))
    if isinstance(result, CommitResult | ResetResult) and result.refused in (None, "policy",
                                                                             "stale_plan"):
        return _json(409, result_doc(result) | {"error": result.error})
    if result.refused in ("role", "group"):
        raise HttpError(403, result.error)
    if result.refused is not None:
        raise HttpError(409, result.error)
    raise HttpError(400, result.error)


def _decode(body: bytes, as_type: type[Command], extra: dict[str, Any] | None = None) -> Command:
    try:
        return decode_as(body, as_type, extra)
    except InvalidInput as e:
        raise HttpError(400, str(e)) from None


def _bool(req: Request, name: str, default: bool = False) -> bool:
    raw = req.query.get(name)
    if raw is None:
        return default
    if raw not in ("true", "false"):
        raise HttpError(400, f"invalid {name} {raw!r}: use true or false")
    return raw == "true"


def _int(req: Request, name: str, default: int | None = None) -> int | None:
    raw = req.query.get(name)
    if raw is None:
        return default
    if re.fullmatch(r"-?[0-9]{1,19}", raw) is None:
        raise HttpError(400, f"invalid {name} {raw!r}: expected an integer")
    return int(raw)


# ---------------------------------------------------------------------- writes
async def commands(api: Api, req: Request) -> Answer:
    if not req.body.strip():
        raise HttpError(400, "no commands: the body is empty (send a JSON array or NDJSON)")
    try:
        decoded = decode_document(req.body)
    except InvalidInput as e:
        raise HttpError(400, str(e)) from None
    if len(decoded) > api.settings.max_commands_per_request:
        raise HttpError(413, f"{len(decoded)} commands in one request: at most "
                             f"{api.settings.max_commands_per_request}")
    denied = [req.token.denies(c) if isinstance(c, Command) else None for c in decoded]
    results = await api.write(decoded, req.token, denied)  # type: ignore[arg-type]
    return _json(200, results)  # the structs as `to_dict` of each gives them, encoded in one go


async def _one(api: Api, req: Request, cmd: Command) -> Answer:
    denied = req.token.denies(cmd)
    [result] = await api.write([cmd], req.token, [denied])
    return _single(result)


async def commit(api: Api, req: Request) -> Answer:
    return await _one(api, req, _decode(req.body, Commit))


async def pull(api: Api, req: Request) -> Answer:
    return await _one(api, req, _decode(req.body, Pull))


async def queue_append(api: Api, req: Request) -> Answer:
    return await _one(api, req, _decode(req.body, QueueAppend, _QUEUE_OPTION))


async def queue_truncate(api: Api, req: Request) -> Answer:
    return await _one(api, req, _decode(req.body, QueueTruncate, _QUEUE_OPTION))


#: The queue routes take the CLI's options (`queue` for `--queue`) as well as `queue_id`.
_QUEUE_OPTION = {"rename": {"queue": "queue_id"}}


async def group_put(api: Api, req: Request) -> Answer:
    return await _one(api, req, _decode(req.body or b"{}", GroupSet,
                                        {"set": {"group": req.params["group"]}}))


async def group_delete(api: Api, req: Request) -> Answer:
    return await _one(api, req, _decode(b"{}", GroupDelete, {"set": {"group": req.params["group"]}}))


async def reset(api: Api, req: Request) -> Answer:
    cmd = _decode(req.body or b"{}", Reset, {"set": {"group": req.params["group"]}})
    assert isinstance(cmd, Reset)
    if not cmd.execute:  # a dry run is a read: planned on the read side
        api.may(req.token.denies(cmd) is None, req.token,
                f"plan resets of group {cmd.group!r}")
        try:
            # judged as its execute would be: the policy sees the token's actor
            actor = api.actor(cmd, req.token)
            planned = await api.read(lambda led: led.run_reset(cmd, actor=actor))
        except RefusedError as e:
            raise HttpError(409, str(e)) from None
        return _single(planned)
    return await _one(api, req, cmd)


# ---------------------------------------------------------------------- reads
async def queues(api: Api, req: Request) -> Answer:
    api.may(req.token.may_read() or "produce" in req.token.roles, req.token, "list queues")
    return await api.read_json(answers.queues, req.query.get("topic"))


async def groups(api: Api, req: Request) -> Answer:
    api.may(req.token.may_read(), req.token, "list groups")
    return await api.read_json(answers.groups)


async def progress(api: Api, req: Request) -> Answer:
    group = req.params["group"]
    api.may(req.token.may_read(group), req.token, f"read group {group!r}")
    return await api.read_json(answers.progress, group, req.query.get("topic"))


async def generations(api: Api, req: Request) -> Answer:
    """Generation, pending reset, committed offset and last puller of the queues named (all of
    the group's when none are): a consumer asks it every second for all its partitions, so it
    is answered from the writer's memory between two batches (no DuckDB, no log; a lookup per
    queue) rather than by the read side, which catches up with the log first."""
    group = req.params["group"]
    api.may(req.token.may_read(group), req.token, f"read group {group!r}")
    try:
        query = msgspec.json.decode(req.body or b"{}", type=GenerationsQuery)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise HttpError(400, 'generations takes {"queues": [{"topic": ..., "queue_id": ...}]}: '
                             f"{e}") from None
    try:
        return _json(200, await api.committer.generations(group, query.queues))
    except Stopping as e:
        raise HttpError(503, str(e)) from None


async def lag(api: Api, req: Request) -> Answer:
    group = req.params["group"]
    api.may(req.token.may_read(group), req.token, f"read group {group!r}")
    window, allowed = _int(req, "window", 10), _int(req, "allowed_lag", 0)
    return await api.read_json(answers.lag, group, req.query.get("topic"), req.query.get("at"),
                               window, allowed)


async def lag_all(api: Api, req: Request) -> Answer:
    """Every group's lag summed up; with `windows=true` the whole document (`lag --json`)."""
    api.may(req.token.may_read(), req.token, "read the lag of every group")
    window, allowed = _int(req, "window", 10), _int(req, "allowed_lag", 0)
    whole = _bool(req, "windows")
    return await api.read_json(answers.lag_all, req.query.get("topic"), req.query.get("at"),
                               window, allowed, whole)


async def lag_series(api: Api, req: Request) -> Answer:
    group = req.params.get("group")
    if group is None:
        api.may(req.token.may_read(), req.token, "read the lag of every group")
    else:
        api.may(req.token.may_read(group), req.token, f"read group {group!r}")
    since, until, every = (req.query.get(n) for n in ("since", "until", "every"))
    if since is None or until is None or every is None:
        raise HttpError(400, "a lag series needs since, until (times) and every (a duration: "
                             "ISO-8601 or ms)")
    step: int | str = int(every) if every.isdigit() else every
    return await api.read_json(answers.lag_series, since, until, step, group,
                               req.query.get("topic"))


async def whoami(api: Api, req: Request) -> Answer:
    """Who the token is: the console shows only what its roles may do."""
    t = req.token
    return _json(200, {"name": t.name, "roles": list(t.roles), "groups": list(t.groups),
                       "tokens": api.tokens_on})


async def history(api: Api, req: Request) -> Answer:
    api.may(req.token.may_read(), req.token, "read history")
    q = req.query
    queue_id, limit = _int(req, "queue_id"), _int(req, "limit")
    queue_events = _bool(req, "queue_events", True)
    return await api.read_json(answers.history, q.get("group"), q.get("topic"), queue_id,
                               q.get("kind"), q.get("since"), q.get("until"), limit, queue_events)


async def state(api: Api, req: Request) -> Answer:
    api.may(req.token.may_read(), req.token, "read the state at a time")
    at = req.query.get("at")
    if at is None:
        raise HttpError(400, "state needs at (a time: ISO-8601, epoch ms or now)")
    return await api.read_json(answers.state, at, req.query.get("group"))


async def lookup(api: Api, req: Request) -> Answer:
    api.may(req.token.may_read(), req.token, "look up offsets by time")
    topic, when = req.query.get("topic"), req.query.get("datetime")
    if topic is None or when is None:
        raise HttpError(400, "lookup needs topic and datetime")
    return await api.read_json(answers.lookup, topic, when)


class SqlBody(msgspec.Struct, forbid_unknown_fields=True):
    query: str
    #: json: a list of objects; arrow: an Arrow IPC stream (types kept: a cluster's union)
    format: Literal["json", "arrow"] = "json"


ARROW_STREAM = "application/vnd.apache.arrow.stream"


async def sql(api: Api, req: Request) -> Answer:
    api.may(req.token.may_read(), req.token, "run SQL")
    try:
        body = msgspec.json.decode(req.body, type=SqlBody)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise HttpError(400, f"sql needs a JSON body {{\"query\": ...}}: {e}") from None
    prepared = await asyncio.to_thread(api.reads.prepare_sql, body.query)
    running = asyncio.ensure_future(asyncio.to_thread(api.reads.run_sql, prepared,
                                                      api.settings.sql_timeout_s))
    if req.disconnected is not None:  # nobody would read the answer: stop computing it
        left = asyncio.ensure_future(req.disconnected())
        await asyncio.wait({running, left}, return_when=asyncio.FIRST_COMPLETED)
        if not running.done():
            prepared.interrupt("its client left")
        left.cancel()
    table = await running
    if body.format == "arrow":
        return 200, arrow_stream(table), ARROW_STREAM
    return _json(200, table.to_pylist())


def arrow_stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


async def export(api: Api, req: Request) -> Answer:
    group = req.params["group"]
    api.may(req.token.may_read(group), req.token, f"read group {group!r}")
    return await api.read_json(answers.export, group)


async def healthz(api: Api, req: Request) -> Answer:
    return await api.read_json(answers.health)


def error_status(e: BaseException) -> int:
    """The HTTP status of a library error a route let through."""
    if isinstance(e, HttpError):
        return e.status
    if isinstance(e, RefusedError):
        return 409
    if isinstance(e, InvalidInput | HistoryUnavailable):
        return 400
    if isinstance(e, LedgerUnusable):
        return 503
    return 400 if isinstance(e, LedgerError) else 500


ROUTES: tuple[Route, ...] = (
    Route("POST", "/v1/commands", commands, "A batch of commands (JSON array or NDJSON); one "
          "result per command", body="Commands", answer="Results"),
    Route("POST", "/v1/commit", commit, "Commit an offset (409 when a rule refuses it)",
          body="Commit", answer="CommitResult"),
    Route("POST", "/v1/pull", pull, "Where a client reads next (a stored reset first)",
          body="Pull", answer="PullResult"),
    Route("POST", "/v1/queues/append", queue_append, "Append messages to a queue",
          body="QueueAppend", answer="QueueResult"),
    Route("POST", "/v1/queues/truncate", queue_truncate, "Advance a queue's MinOffset",
          body="QueueTruncate", answer="QueueResult"),
    Route("GET", "/v1/queues", queues, "Queues with their bounds", query=("topic",)),
    Route("GET", "/v1/groups", groups, "Groups with mode, queues, total lag, last update"),
    Route("PUT", "/v1/groups/{group}", group_put, "Create a group or change its settings",
          body="GroupSet", answer="GroupResult"),
    Route("DELETE", "/v1/groups/{group}", group_delete, "Remove a group's offsets",
          answer="GroupDeleteResult"),
    Route("GET", "/v1/groups/{group}/progress", progress, "Progress of a group per queue",
          query=("topic",)),
    Route("POST", "/v1/groups/{group}/reset", reset, "Plan (or execute) a reset",
          body="Reset", answer="ResetResult"),
    Route("POST", "/v1/groups/{group}/generations", generations, "Generation, pending reset, "
          "committed offset and last puller of some queues of a group (a consumer's cheap "
          "periodic check)", body="Generations", answer="QueueGenerations"),
    Route("GET", "/v1/groups/{group}/lag", lag, "Lag health and time lag of a group",
          query=("at", "window", "allowed_lag", "topic"), answer="Object"),
    Route("GET", "/v1/groups/{group}/export", export, "The group's committed offsets, one row "
          "per queue (Kafka's reset CSV fields)"),
    Route("GET", "/v1/groups/{group}/lag/series", lag_series, "Lag and time lag of each queue "
          "of a group at every step from since to until (charts)",
          query=("since", "until", "every", "topic")),
    Route("GET", "/v1/lag", lag_all, "Lag health of every group, summed up (no windows; "
          "windows=true: the whole document, as lag --json)",
          query=("at", "window", "allowed_lag", "topic", "windows")),
    Route("GET", "/v1/lag/series", lag_series, "Lag and time lag of each queue of every "
          "group at every step from since to until", query=("since", "until", "every", "topic")),
    Route("GET", "/v1/whoami", whoami, "The token's name, roles and groups", answer="Object"),
    Route("GET", "/v1/history", history, "Events, oldest first",
          query=("group", "topic", "queue_id", "kind", "since", "until", "limit",
                 "queue_events")),
    Route("GET", "/v1/state", state, "Committed offsets at a time", query=("at", "group")),
    Route("GET", "/v1/lookup", lookup, "First offset stored at or after a time, per queue",
          query=("topic", "datetime")),
    Route("POST", "/v1/sql", sql, "One read-only SQL query", body="Sql"),
    Route("GET", "/healthz", healthz, "200 once the ledger is open", answer="Object",
          public=True),
)
