"""Where a follower's batches go: a ledger it owns (`LedgerSink`), or a server (a face's sink
with the same two calls, e.g. server/follow_sink.py). Either way one batch is one durable
append holding the events and the follower's new positions."""

from __future__ import annotations

from typing import Any, Protocol

from ledger.executor.importing import BatchTally
from ledger.ledger import Ledger


class SinkUnavailable(Exception):
    """The sink cannot take a batch now (a server down or busy): retry later."""


class Sink(Protocol):
    def positions(self, group: str, topic: str) -> dict[int, int]:
        """The follower's stored positions: the committed offsets of `group` on `topic`."""

    def send(self, commands: list[dict[str, Any]]) -> dict[str, Any]:
        """One batch, durable whole or not at all; counts of what it changed."""


class LedgerSink:
    """A data directory this process owns: the import path, one batch one append."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def positions(self, group: str, topic: str) -> dict[int, int]:
        return {k[2]: p.committed for k, p in self.ledger.writer.state.positions.items()
                if k[0] == group and k[1] == topic and p.committed is not None}

    def send(self, commands: list[dict[str, Any]]) -> dict[str, Any]:
        tally = BatchTally()
        tally.add(self.ledger.writer, commands)
        return {"changed": tally.changed, "unchanged": tally.unchanged,
                "bounds_raised": tally.bounds, "errors": tally.errors,
                **({"first_error": tally.first_error} if tally.first_error else {})}
