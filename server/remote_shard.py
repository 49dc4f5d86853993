"""A cluster's shard reached through its server (`server = "http://HOST:PORT"` in cluster.toml):
the `ledger.cluster.Shard` documents over API v1, so the cluster routes and merges the same
whether a shard's root is opened here or served elsewhere. The server's answers are the same
documents `LocalShard` gives (one shaping, ledger/reads/documents.py); its errors become the
ledger's (a 4xx the error it names, a 409 a refusal), and a server that does not answer is
`ShardUnavailable`, naming the shard.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import msgspec
import pyarrow as pa
import urllib3

from ledger.cluster import ShardSpec, ShardUnavailable
from ledger.cluster.shard import check_results
from ledger.commands.command import Command, GroupSet, Reset, Sync, from_obj
from ledger.commands.results import ResetResult, Result, from_doc
from ledger.errors import InvalidInput, LedgerError, RefusedError
from ledger.executor.importing import ImportCounts, import_summary
from ledger.importers.result import ImportResult
from server.client import (
    BadRequest,
    Forbidden,
    LedgerClient,
    Refused,
    ServerError,
    Unauthorized,
    Unavailable,
    group_path,
)

T = TypeVar("T")
#: Commands per request of a long write (an import): well inside the server's body limit.
REQUEST_COMMANDS_MAX = 20_000
ARROW = "arrow"


class RemoteShard:
    """One shard's server, over one keep-alive pool."""

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
            counts.add(from_doc({**d, "line": start + d.get("line", 0)}) for d in docs)
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

    def sql(self, query: str) -> pa.Table:
        """The query's rows as the server's Arrow stream (types kept, for the cluster's
        union)."""
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
