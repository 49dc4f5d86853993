"""A small typed Python client of `offset-ledger serve`, for a consumer loop: pull, process,
commit; resets, progress and lag for operators. One keep-alive connection pool (urllib3);
answers decoded into the ledger's typed results; the server's errors raised as exceptions
(a commit a rule refuses is an answer, `accepted` false, as with `Ledger.commit`).

```python
with LedgerClient("http://127.0.0.1:9888", token=os.environ["OFFSET_LEDGER_TOKEN"]) as c:
    while True:
        p = c.pull("billing", "orders", 0, client="worker-1", max=100)
        handle(fetch_messages("orders", 0, p.next_offset, p.count))
        c.commit("billing", "orders", 0, p.next_offset + p.count, client="worker-1",
                 generation=p.generation)
```

`open_cluster("cluster.toml")` gives the same calls over the shards of a cluster file, each
group's routed to its shard: a `ledger.cluster.Cluster` whose served shards are `RemoteShard`s,
the cluster's `Shard` documents over API v1 (the server answers the documents a shard opened
from its root gives, so the cluster merges them alike).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec
import pyarrow as pa
import urllib3

from ledger.cluster import Cluster, ShardSpec, ShardUnavailable
from ledger.cluster.shard import check_results
from ledger.commands.command import Command, GroupSet, Reset, Sync, from_obj, parse_topic_spec
from ledger.commands.results import CommitResult, PullResult, ResetResult, Result, from_doc
from ledger.errors import InvalidInput, LedgerError, RefusedError
from ledger.executor.importing import ImportCounts, import_summary
from ledger.importers.result import ImportResult
from ledger.reads.generations import QueueGeneration

T = TypeVar("T")
_encode = msgspec.json.Encoder().encode


class ServerError(Exception):
    """An answer that is not a success; `status` is its HTTP status, the message its error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class BadRequest(ServerError):
    """400, 404, 413: the request named a bad value."""


class Unauthorized(ServerError):
    """401: no token, or an unknown one."""


class Forbidden(ServerError):
    """403: the token's role or groups do not allow it."""


class Refused(ServerError):
    """409: a rule refused it (a fenced reset plan, the reset policy)."""


class Unavailable(ServerError):
    """503: the server is busy or shutting down; retry later."""


_ERRORS: dict[int, type[ServerError]] = {400: BadRequest, 404: BadRequest, 413: BadRequest,
                                        401: Unauthorized, 403: Forbidden, 409: Refused,
                                        503: Unavailable}


class LedgerClient:
    """The server's API v1 over one connection pool."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 30.0,
                 connections: int = 4, ca_certs: str | None = None) -> None:
        self.url = url.rstrip("/")
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        self._pool = urllib3.PoolManager(
            num_pools=1, maxsize=connections, headers=headers, ca_certs=ca_certs,
            timeout=urllib3.Timeout(total=timeout_s), retries=False)

    def close(self) -> None:
        self._pool.clear()

    def __enter__(self) -> LedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- calls
    def request(self, method: str, path: str, body: Any = None,
                fields: dict[str, Any] | None = None, ok: tuple[int, ...] = (200,)) -> bytes:
        """One request; the raw answer body of a success (statuses in `ok`), else the error."""
        query = {k: str(v) for k, v in (fields or {}).items() if v is not None}
        response = self._pool.request(method, self.url + path, fields=query or None,
                                      body=None if body is None else _encode(body))
        if response.status in ok:
            return response.data
        try:
            message = msgspec.json.decode(response.data).get("error", "")
        except (msgspec.DecodeError, AttributeError):
            message = response.data[:200].decode(errors="replace")
        raise _ERRORS.get(response.status, ServerError)(response.status, message)

    def _typed(self, method: str, path: str, body: Any, as_type: type[T],
               ok: tuple[int, ...] = (200,)) -> T:
        return msgspec.json.decode(self.request(method, path, body, ok=ok), type=as_type)

    def pull(self, group: str, topic: str, queue_id: int, *, client: str,
             max: int = 32) -> PullResult:
        """Where `client` reads next (a reset stored on the server first), with the generation
        to commit under."""
        return self._typed("POST", "/v1/pull", {"group": group, "topic": topic,
                                                "queue_id": queue_id, "client": client,
                                                "max": max}, PullResult)

    def commit(self, group: str, topic: str, queue_id: int, offset: int, *,
               client: str | None = None, generation: int | None = None) -> CommitResult:
        """Commit an offset; a refusal by a rule (stale, fenced, invalid) comes back with
        `accepted` false and the reason."""
        body = {"group": group, "topic": topic, "queue_id": queue_id, "offset": offset,
                "client": client, "generation": generation}
        return self._typed("POST", "/v1/commit", {k: v for k, v in body.items()
                                                  if v is not None}, CommitResult,
                           ok=(200, 409))

    def commands(self, commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A batch of `apply` commands; one result (the `apply` object) per command."""
        return msgspec.json.decode(self.request("POST", "/v1/commands", commands))

    def pulls(self, group: str, queues: Sequence[tuple[str, int]], *, client: str,
              max: int = 32) -> list[PullResult]:
        """One pull per queue in one request (`POST /v1/commands`, one batch, one fsync);
        `max` 0 only asks where `client` starts. A pull the server refuses raises, as a
        single pull's answer would (403 for another group's token)."""
        return self._batch([{"op": "pull", "group": group, "topic": t, "queue_id": q,
                             "client": client, "max": max} for t, q in queues], PullResult)

    def commits(self, group: str, offsets: Sequence[tuple[str, int, int, int | None]], *,
                client: str | None = None, owner_only: bool = False) -> list[CommitResult]:
        """Commit `(topic, queue_id, offset, generation)` of each queue in one request; a
        refusal by a rule is a result (`accepted` false), bad input or a forbidden group
        raises."""
        body = []
        for t, q, offset, generation in offsets:
            cmd: dict[str, Any] = {"op": "commit", "group": group, "topic": t, "queue_id": q,
                                   "offset": offset}
            if client is not None:
                cmd["client"] = client
            if generation is not None:
                cmd["generation"] = generation
            if owner_only:
                cmd["owner_only"] = True
            body.append(cmd)
        return self._batch(body, CommitResult)

    def _batch(self, commands: list[dict[str, Any]], as_type: type[T]) -> list[T]:
        if not commands:
            return []
        out = []
        for doc in msgspec.json.decode(self.request("POST", "/v1/commands", commands)):
            if "error" in doc and "accepted" not in doc:  # not a rule's answer: bad or forbidden
                status = 403 if doc.get("refused") in ("role", "group") else 400
                raise _ERRORS[status](status, doc["error"])
            out.append(msgspec.convert(doc, as_type))
        return out

    def generations(self, group: str, queues: Sequence[tuple[str, int]] | None = None
                    ) -> list[QueueGeneration]:
        """Generation, pending reset, committed offset and last puller of each queue named
        (every queue of the group when None): one cheap request, for a periodic check."""
        body = {} if queues is None else {"queues": [{"topic": t, "queue_id": q}
                                                     for t, q in queues]}
        return msgspec.json.decode(self.request(
            "POST", f"/v1/groups/{quote(group, safe='')}/generations", body),
            type=list[QueueGeneration])

    def reset(self, group: str, *, execute: bool = False, **fields: Any) -> ResetResult:
        """Plan (or with `execute`, apply) a reset: a scope (topic / topics / all_topics), one
        scenario (to_offset, to_datetime, ... as the CLI's options with `_`), reason."""
        return self._typed("POST", f"{group_path(group)}/reset", {**fields, "execute": execute},
                           ResetResult)

    def progress(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        return msgspec.json.decode(self.request("GET", f"{group_path(group)}/progress",
                                                fields={"topic": topic}))

    def lag(self, group: str, **fields: Any) -> dict[str, Any]:
        """Lag health of the group (status, total lag, per queue lag and time lag)."""
        return msgspec.json.decode(self.request("GET", f"{group_path(group)}/lag",
                                                fields=fields))

    def history(self, **fields: Any) -> list[dict[str, Any]]:
        return msgspec.json.decode(self.request("GET", "/v1/history", fields=fields))


def group_path(group: str) -> str:
    """`/v1/groups/{group}` with the name percent-encoded (a group may hold `%` and `|`)."""
    return "/v1/groups/" + quote(group, safe="")


def open_cluster(path: str | Path, *, token: str | None = None, partial: bool = False,
                 timeout_s: float = 60.0, connections: int = 8, threads: int | None = None
                 ) -> Cluster:
    """The shards of a cluster file as one ledger (`ledger.cluster.Cluster`), routed as the
    CLI's `--cluster` routes: a shard with a `server` through it (with `token`), one without
    through its root. A consumer loop runs on it as on a `LedgerClient` (`pull`, `commit`);
    `commands` routes a batch; fan-out reads merge the shards' answers (with `partial`, the
    shards that did not answer are in `missing` instead of failing the read). `connections`
    per shard and `threads` asking shards at once bound what many senders share."""
    return Cluster.open(path, partial=partial, threads=threads, connect=lambda spec: RemoteShard(
        spec, token=token, timeout_s=timeout_s, connections=connections))


# ---------------------------------------------------------------------- a cluster's shard
#: Commands per request of a long write (an import): well inside the server's body limit.
REQUEST_COMMANDS_MAX = 20_000
ARROW = "arrow"


class RemoteShard:
    """A cluster's shard reached through its server (`server = "http://HOST:PORT"` in
    cluster.toml), over one keep-alive pool: the server's errors become the ledger's (a 4xx the
    error it names, a 409 a refusal), and a server that does not answer is `ShardUnavailable`,
    naming the shard."""

    def __init__(self, spec: ShardSpec, *, token: str | None = None, timeout_s: float = 60.0,
                 connections: int = 8) -> None:
        if spec.server is None:
            raise ValueError(f"{spec.name} names no server")
        self.spec = spec
        self.client = LedgerClient(spec.server, token=token, timeout_s=timeout_s,
                                   connections=connections)

    def close(self) -> None:
        self.client.close()

    def _call(self, fn: Callable[[], T]) -> T:
        """The server's answer, or its error as the ledger's."""
        try:
            return fn()
        except Unavailable as e:
            raise ShardUnavailable(self.spec, e.message) from None
        except BadRequest as e:
            raise InvalidInput(e.message) from None
        except Refused as e:
            raise RefusedError("refused", e.message) from None
        except (Unauthorized, Forbidden) as e:
            raise InvalidInput(f"{self.spec.name} answered {e.status}: {e.message}") from None
        except ServerError as e:
            raise LedgerError(f"{self.spec.name} answered {e.status}: {e.message}") from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise ShardUnavailable(self.spec, _why(e)) from None

    def _get(self, path: str, **fields: Any) -> Any:
        return self._call(lambda: msgspec.json.decode(self.client.request(
            "GET", path, fields=fields)))

    # ------------------------------------------------------------------ writes
    def submit(self, commands: Sequence[Command | dict[str, Any]]) -> list[dict[str, Any]]:
        return self._call(lambda: self.client.commands(list(commands)))  # type: ignore[arg-type]

    def submit_one(self, command: Command) -> Result:
        [doc] = self.submit([command])
        return check_results(doc, from_doc(doc))

    def run_reset(self, command: Reset) -> ResetResult:
        body = msgspec.to_builtins(command)
        data = self._call(lambda: self.client.request(
            "POST", f"{group_path(command.group)}/reset", body, ok=(200, 409)))
        doc = msgspec.json.decode(data)
        if "plan" not in doc:  # a dry run the policy refused: no plan to show
            raise RefusedError("policy", doc.get("error", "refused"))
        return msgspec.convert(doc, ResetResult)

    def sync(self, rows: Sequence[tuple[str, str, int, int | None]], *, source: str,
             broadcast_groups: Iterable[str] = ()) -> list[dict[str, Any]]:
        actor = f"sync:{source}"
        commands = [from_obj(GroupSet(group=g, mode="broadcast", actor=actor))
                    for g in sorted(set(broadcast_groups))]  # unchanged settings append nothing
        commands += [from_obj(Sync(group=g, topic=t, queue_id=q, offset=o, source=source))
                     for g, t, q, o in rows]
        changes = []
        for doc in self.submit(commands):
            if doc.get("error") is not None:
                raise InvalidInput(doc["error"])
            if doc.get("op") == "sync" and doc["changed"]:
                changes.append({k: doc[k] for k in ("consumer_group", "topic", "queue_id",
                                                     "from_offset", "to_offset")})
        return changes

    def submit_import(self, imported: ImportResult) -> dict[str, Any]:
        """An import's commands (none with its own time: the cluster sends those only to shards
        it opens), in requests of REQUEST_COMMANDS_MAX."""
        counts = ImportCounts()
        commands = imported.commands
        for start in range(0, len(commands), REQUEST_COMMANDS_MAX):
            part = commands[start:start + REQUEST_COMMANDS_MAX]
            docs = self._call(lambda part=part: self.client.commands(part))
            counts.count(from_doc({**d, "line": start + d.get("line", 0)}) for d in docs)
        return import_summary(imported, commands, 0, 0, counts)

    # ------------------------------------------------------------------ reads
    def queues(self, topic: str | None = None) -> list[dict[str, Any]]:
        return self._get("/v1/queues", topic=topic)

    def groups(self) -> list[dict[str, Any]]:
        return self._get("/v1/groups")

    def progress(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        return self._get(f"{group_path(group)}/progress", topic=topic)

    def lag(self, *, group: str | None = None, topic: str | None = None,
            at_ms: int | str | None = None, window: int = 10, allowed_lag: int = 0
            ) -> list[dict[str, Any]]:
        fields = {"topic": topic, "at": at_ms, "window": window, "allowed_lag": allowed_lag}
        if group is not None:
            return [self._get(f"{group_path(group)}/lag", **fields)]
        return self._get("/v1/lag", windows="true", **fields)

    def lag_series(self, *, since_ms: int | str, until_ms: int | str, every_ms: int | str,
                   group: str | None = None, topic: str | None = None
                   ) -> list[dict[str, Any]]:
        path = f"{group_path(group)}/lag/series" if group is not None else "/v1/lag/series"
        return self._get(path, since=since_ms, until=until_ms, every=every_ms, topic=topic)

    def history(self, *, group: str | None = None, topic: str | None = None,
                queue_id: int | None = None, kind: str | None = None,
                since_ms: int | str | None = None, until_ms: int | str | None = None,
                limit: int | None = None, queue_events: bool = True) -> list[dict[str, Any]]:
        return self._get("/v1/history", group=group, topic=topic, queue_id=queue_id, kind=kind,
                         since=since_ms, until=until_ms, limit=limit,
                         queue_events=None if queue_events else "false")

    def state_at(self, *, ts: int | str, group: str | None = None) -> list[dict[str, Any]]:
        return self._get("/v1/state", at=ts, group=group)

    def offsets_for_time(self, topic: str, ts: int | str) -> list[dict[str, Any]]:
        return self._get("/v1/lookup", topic=topic, datetime=ts)

    def export_rows(self, group: str) -> list[dict[str, Any]]:
        return self._get(f"{group_path(group)}/export")

    def generations(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        name, ids = parse_topic_spec(topic) if topic is not None else (None, None)
        queues = [(name, q) for q in ids] if name is not None and ids is not None else None
        rows = self._call(lambda: self.client.generations(group, queues))
        return [r for r in msgspec.to_builtins(rows) if name is None or r["topic"] == name]

    def sql(self, query: str, *, timeout_s: float | None = None) -> pa.Table:
        """The query's rows as the server's Arrow stream (types kept, for the cluster's
        union); the server stops it at its own `--sql-timeout` (an operator's limit: `timeout_s`
        is not sent)."""
        data = self._call(lambda: self.client.request("POST", "/v1/sql",
                                                      {"query": query, "format": ARROW}))
        return pa.ipc.open_stream(data).read_all()


def _why(e: BaseException) -> str:
    """Why a server did not answer, in a few words (urllib3 wraps the OS error)."""
    text = str(e)
    for marker in ("Failed to establish a new connection: ", "Connection aborted.",
                   "Read timed out."):
        if marker in text:
            return text[text.index(marker):].rstrip(")'\"")
    return text.splitlines()[0] if text else type(e).__name__
