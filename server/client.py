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
"""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import quote

import msgspec
import urllib3

from ledger.commands.results import CommitResult, PullResult, ResetResult

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

    def reset(self, group: str, *, execute: bool = False, **fields: Any) -> ResetResult:
        """Plan (or with `execute`, apply) a reset: a scope (topic / topics / all_topics), one
        scenario (to_offset, to_datetime, ... as the CLI's options with `_`), reason."""
        return self._typed("POST", f"/v1/groups/{_segment(group)}/reset", {**fields, "execute": execute},
                           ResetResult)

    def progress(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        return msgspec.json.decode(self.request("GET", f"/v1/groups/{_segment(group)}/progress",
                                                fields={"topic": topic}))

    def lag(self, group: str, **fields: Any) -> dict[str, Any]:
        """Lag health of the group (status, total lag, per queue lag and time lag)."""
        return msgspec.json.decode(self.request("GET", f"/v1/groups/{_segment(group)}/lag",
                                                fields=fields))

    def history(self, **fields: Any) -> list[dict[str, Any]]:
        return msgspec.json.decode(self.request("GET", "/v1/history", fields=fields))


def _segment(name: str) -> str:
    """A name as one path segment, percent-encoded once (`%` is a name character)."""
    return quote(name, safe="")
