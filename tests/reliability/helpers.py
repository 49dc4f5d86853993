"""Helpers of the reliability suite: a small valid history, and "the view equals the reference
model's fold of the log"."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from ledger import Ledger
from ledger.store.writer import VIEW_FILE
from tests.support.cli import Cli
from tests.support.oracle import log_view, rows, view_file, view_tables

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
    """The view equals the reference model's fold of the log, twice: the view file as it was
    left (read before any writer opens it, since a writer's open rebuilds it) may lag the log
    but holds exactly the fold of the log up to its position; reopened as the writer, the view
    holds the fold of the whole log. Returns the log."""
    with Ledger.open(root, readonly=True) as reader:
        before = reader.log.read()
    found = view_file(root / VIEW_FILE)
    if found is not None:
        position, tables = found
        assert (position or 0) <= before.num_rows, ("the view is past the log end", position)
        assert tables == log_view(before.slice(0, position or 0)), position
    with Ledger.open(root) as led:
        events = led.log.read()
        assert view_tables(lambda sql: rows(led.sql(sql))) == log_view(events)
        assert events.column("seq").to_pylist() == list(range(events.num_rows))
    return events


def flip_byte(path: Path, position: int, mask: int = 0x04) -> None:
    """Damage one byte of a file (flipping it again undoes it)."""
    content = bytearray(path.read_bytes())
    content[position] ^= mask
    path.write_bytes(bytes(content))


def verify_json(root: Path) -> tuple[int, dict]:
    """`offset-ledger verify --json`: its exit code and report (never a traceback)."""
    r = Cli(root)("verify", "--json")
    assert "Traceback" not in r.stdout + r.stderr
    return r.exit_code, json.loads(r.stdout)
