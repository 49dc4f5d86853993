"""Reads that name a group use the read index: a group's history opens only the row groups of
sealed segments that hold the group (segments are clustered by group) and the segments its time
window overlaps, and SQL over `events` with a group predicate hands it to the Parquet scan."""

from __future__ import annotations

import msgspec
import pyarrow.parquet as pq
import pytest

import ledger.store.writer as writer_mod
from ledger import Ledger
from tests.support.clock import FakeClock

GROUPS = [f"g{i}" for i in range(8)]


@pytest.fixture(autouse=True)
def small_row_groups(monkeypatch) -> None:
    """Row groups of at most 64 rows: each group's 50 rows of a segment are one of them."""
    make = writer_mod.log_settings
    monkeypatch.setattr(writer_mod, "log_settings", lambda cfg: msgspec.structs.replace(
        make(cfg), cluster_row_group_events=64))


def _ledger(root, clock: FakeClock) -> Ledger:
    """Eight groups committing on one queue, 4 sealed segments of 400 events and a tail."""
    led = Ledger.open(root, clock=clock, segment_events_max=400)
    led.queue_append("t", 0, count=100_000)
    for i in range(1_700):
        clock.advance(1_000)
        led.sync([(GROUPS[i % len(GROUPS)], "t", 0, i + 1)], source="broker")
    led.log.settle()
    return led


def test_a_group_history_reads_only_the_row_groups_holding_the_group(tmp_path):
    clock = FakeClock()
    with _ledger(tmp_path / "d", clock) as led:
        segments = led.log.segments()
        assert len(segments) == 4
        for segment in segments:  # sorted by group, then seq; row groups of whole groups
            md = pq.read_metadata(segment.path)
            assert md.num_row_groups >= len(GROUPS)
            assert [md.schema.column(c.column_index).name
                    for c in md.row_group(0).sorting_columns] == ["consumer_group", "seq"]
        everything = led.history(group="g3")
        stats = led.log.last_read_stats
        assert stats.segments_read == 4
        assert 4 <= stats.row_groups_read <= 8 and stats.row_groups_skipped >= 4 * 7
        assert everything.column("consumer_group").unique().to_pylist() == ["g3"]
        assert everything.column("seq").to_pylist() == sorted(everything.column("seq").to_pylist())
        # a time window inside the second segment opens that segment only
        second = segments[1]
        window = led.history(group="g3", since_ms=second.ts_min + 10_000,
                             until_ms=second.ts_max - 10_000)
        stats = led.log.last_read_stats
        assert (stats.segments_read, stats.segments_skipped) == (1, 3)
        assert stats.row_groups_read <= 2
        assert window.num_rows and all(second.base_seq <= s < second.end_seq
                                       for s in window.column("seq").to_pylist())
        # the newest N of a key: the newest segments only
        newest = led.history(group="g5", topic="t", queue_id=0, limit=3)
        assert newest.num_rows == 3 and led.log.last_read_stats.segments_read <= 1


def test_the_answers_are_the_same_without_the_read_index(tmp_path):
    clock = FakeClock()
    with _ledger(tmp_path / "d", clock) as led:
        end = clock.now
    for group in ("g2", "g7"):
        answers = []
        for read_index in (True, False):
            with Ledger.open(tmp_path / "d", clock=clock, readonly=True,
                             read_index=read_index) as led:
                answers.append((led.history(group=group).to_pylist(),
                                led.history(group=group, since_ms=end - 700_000,
                                            until_ms=end - 300_000).to_pylist(),
                                led.state_at(ts=end - 500_000, group=group).to_pylist(),
                                led.lag(group=group, at_ms=end - 500_000)))
        assert answers[0] == answers[1]


def test_sql_over_events_with_a_group_predicate_pushes_it_into_the_scan(tmp_path):
    clock = FakeClock()
    with _ledger(tmp_path / "d", clock) as led:
        plan = led.sql("EXPLAIN SELECT * FROM events WHERE consumer_group = 'g1'")
        text = "\n".join(plan.column(1).to_pylist())
        assert "Filters: \"consumer_group\" = 'g1'" in text, text
        got = led.sql("SELECT seq FROM events WHERE consumer_group = 'g1' ORDER BY seq")
        assert got.column("seq").to_pylist() == led.history(group="g1").column("seq").to_pylist()
