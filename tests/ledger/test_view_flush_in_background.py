"""The periodic view flush of a writer: its rows are taken at the append, its DuckDB
transaction runs on the view's own thread (a server's writer does not stall on it), and a
flush that fails gives its rows back to the next one: nothing is lost from the view."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from ledger import Commit, Ledger

G, T = "billing", "orders"


def _offsets(led: Ledger) -> list[tuple[int, int]]:
    rows = led.sql("SELECT queue_id, committed_offset FROM offsets ORDER BY queue_id")
    return [(r["queue_id"], r["committed_offset"]) for r in rows.to_pylist()]


def test_periodic_flushes_run_on_the_views_thread_and_lose_nothing(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, view_flush_batches=1) as led:
        for i in range(60):
            led.submit([Commit(group=G, topic=T, queue_id=i % 6, offset=i + 1)])
        assert "view-flush" in {t.name.split("_")[0] for t in threading.enumerate()}
        assert _offsets(led) == [(q, 54 + q + 1) for q in range(6)]
    with Ledger.open(tmp_path) as again:
        assert _offsets(again) == [(q, 54 + q + 1) for q in range(6)]


def test_a_failed_background_flush_gives_its_rows_to_the_next(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with Ledger.open(tmp_path, view_flush_batches=1) as led:
        led.submit([Commit(group=G, topic=T, queue_id=0, offset=1)])
        view = led.writer.view
        view.wait_flushed(led.state)
        view.con.execute("ALTER TABLE offsets RENAME TO offsets_away")  # a flush now fails
        led.submit([Commit(group=G, topic=T, queue_id=1, offset=5)])  # its flush fails...
        with caplog.at_level(logging.WARNING):
            led.submit([Commit(group=G, topic=T, queue_id=2, offset=7)])  # ...found here
        assert "derived data not written" in caplog.text and "offsets" in caplog.text
        view.con.execute("ALTER TABLE offsets_away RENAME TO offsets")
        assert _offsets(led) == [(0, 1), (1, 5), (2, 7)]
