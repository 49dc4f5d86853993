"""Helpers of the reliability suite: a small valid history, and "the view equals a replay of the
log"."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ledger import Ledger
from tests.tools.crash_harness import replayed_view, view_rows

T, G = "orders", "billing"


def build_history(led: Ledger, queues: int = 2, rounds: int = 3) -> list[int]:
    """A small valid history (appends, a group, pulls, commits); returns the acknowledged seqs."""
    seqs = []
    led.group_set(G, initial="earliest")
    for q in range(queues):
        led.queue_append(T, q, 100, store_ts=1_000_000)
        seqs.append(led.log.next_seq - 1)
    for r in range(rounds):
        for q in range(queues):
            led.pull(G, T, q, client="c1", max_count=10)
            assert led.commit(G, T, q, 10 * (r + 1), client="c1").accepted
            seqs.append(led.log.next_seq - 1)
    return seqs


def assert_view_is_a_replay(root: Path) -> pa.Table:
    """Reopen as the writer; the DuckDB view equals a fold of the whole log. Returns the log."""
    with Ledger.open(root) as led:
        events = led.log.read()
        assert view_rows(led.view.con) == replayed_view(events)
        assert events.column("seq").to_pylist() == list(range(events.num_rows))
    return events
