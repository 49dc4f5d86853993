"""A follower's sink over HTTP: `offset-ledger follow kafka --server URL`. Each batch (the
events and the follower's positions) is one `POST /v1/commands` request, which the server's
group committer makes durable as one append; the positions are read back from the follow
group's progress. A token of role `sync` may do both."""

from __future__ import annotations

from typing import Any

import msgspec
import urllib3

from ledger.errors import InvalidInput
from ledger.follow.sink import SinkUnavailable
from server.client import LedgerClient, ServerError, Unavailable


class ServerSink:
    """`ledger.follow.sink.Sink` over a server's API v1."""

    def __init__(self, client: LedgerClient) -> None:
        self.client = client
        self._checked = False

    def _check_token(self) -> None:
        """A server with tokens takes a follower's batches from a `sync` token only: said once,
        at the start, rather than as a refusal of every batch."""
        who = msgspec.json.decode(self.client.request("GET", "/v1/whoami"))
        if who.get("tokens") and "sync" not in who.get("roles", ()):
            raise InvalidInput(f"token {who.get('name')!r} has role(s) "
                               f"{', '.join(who.get('roles', ())) or 'none'}: following a "
                               "cluster needs a token of role sync (offset-ledger token add "
                               "NAME --role sync)")
        self._checked = True

    def positions(self, group: str, topic: str) -> dict[int, int]:
        try:
            if not self._checked:
                self._check_token()
            rows = self.client.progress(group, topic)
        except (Unavailable, urllib3.exceptions.HTTPError) as e:
            raise SinkUnavailable(f"{self.client.url}: {e}") from None
        except ServerError as e:
            raise InvalidInput(f"{self.client.url} refused to read the follower's positions "
                               f"(group {group!r}): {e}") from None
        return {r["queue_id"]: r["committed_offset"] for r in rows
                if r.get("committed_offset") is not None}

    def send(self, commands: list[dict[str, Any]]) -> dict[str, Any]:
        try:
            results = self.client.commands(commands)
        except (Unavailable, urllib3.exceptions.HTTPError) as e:
            raise SinkUnavailable(f"{self.client.url}: {e}") from None
        except ServerError as e:
            if e.status >= 500:
                raise SinkUnavailable(f"{self.client.url}: {e}") from None
            raise InvalidInput(f"{self.client.url} refused a batch: {e}") from None
        errors = [r for r in results if r.get("error")]
        return {"changed": sum(1 for r in results if r.get("changed")
                               or r.get("queues_deleted")),
                "errors": len(errors),
                **({"first_error": errors[0]["error"]} if errors else {})}
