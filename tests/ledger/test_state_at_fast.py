"""`Ledger.state_at` answers in a few scans what the full STATE_AT_SQL query answers: the same
rows on random ledgers with broadcast groups, mode changes and group deletes (at every time and
seq, per group, through the Python fold and through the SQL over the fetched rows); and
`first_seq_after` counts by row-group statistics or a segment's time index, so its answer
is checked at row-group boundaries, in seq order and clustered by group."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ledger.reads.state_at as state_at_mod
import ledger.reads.timeline as timeline
import ledger.store.writer as writer_mod
from ledger import Ledger
from ledger.reads.timeline import STATE_AT_SCHEMA, state_at_sql
from ledger.store.view import arrow_result, segments_source
from tests.support.clock import T0, FakeClock
from tests.support.faults import NoSyncFS
from tests.support.oracle import model_run
from tests.support.strategies import (
    CLIENTS,
    GROUPS,
    OFFSETS_RETENTION_MS,
    QUEUES,
    TOPICS,
    property_settings,
    streams,
)


def full_query(led: Ledger, *, ts: int | None = None, seq: int | None = None,
               group: str | None = None) -> pa.Table:
    """The state-at answer as before: STATE_AT_SQL over every group, in one query."""
    if seq is not None:
        seq_to = min(seq, led.log.next_seq)
        at_ts = state_at_mod.ts_before(led.log, seq_to)
    else:
        assert ts is not None
        seq_to, at_ts = brute_first_seq_after(led, ts), ts
    cps = [c for c in led.log.checkpoints() if c <= seq_to]
    cp = cps[-1] if cps else 0
    view = led.writer.ready_view()
    source = segments_source(
        [s.path for s in led.log.segments() if s.end_seq > cp and s.base_seq < seq_to],
        "events_tail")
    sql = state_at_sql(source, led.log.checkpoint_path(cp) if cps else None, cp, seq_to, at_ts,
                       group)
    return arrow_result(view.con.execute(sql))


def brute_first_seq_after(led: Ledger, ts: int) -> int:
    data = led.log.read(columns=["seq", "ts"]).to_pydict()
    for s, t in zip(data["seq"], data["ts"], strict=True):
        if t > ts:
            return s
    return led.log.next_seq



@property_settings(share=0.4)  # each example runs hundreds of state-at queries
@given(lines=streams(max_size=20), segment=st.sampled_from([5, 9, 1000]))
def test_state_at_equals_the_full_query(tmp_path_factory, monkeypatch, lines, segment):
    root = tmp_path_factory.mktemp("fast")
    model, _ = model_run(lines, clock_ms=T0, offsets_retention_ms=OFFSETS_RETENTION_MS)
    with Ledger.open(root, backfill=True, clock=FakeClock(), segment_events_max=segment,
                     checkpoint_interval_events=7, offsets_retention_ms=OFFSETS_RETENTION_MS,
                     fs=NoSyncFS()) as led:
        for line in lines:  # a batch per line: segments and checkpoints fall between any two
            list(led.apply([line]))
        led.log.settle()  # list a segment still sealing in the background
        times = [line["ts"] for line in lines]
        points = sorted({T0 - 1, *times, *(t - 1 for t in times), max(times) + 1})
        for t in points:
            want = full_query(led, ts=t)
            got = led.state_at(ts=t)
            assert got.schema == want.schema
            assert got.to_pylist() == want.to_pylist(), t
            # and both are the reference model's answer
            assert [tuple(r.values()) for r in got.to_pylist()] == model.state_at(t), t
        for s in range(0, led.log.next_seq + 2, 3):
            assert led.state_at(seq=s).to_pylist() == full_query(led, seq=s).to_pylist(), s
        for g in GROUPS:  # one group: in Arrow while it clusters (keyed_state), else DuckDB
            for t in [times[len(times) // 2], *points[::3]]:
                got = led.state_at(ts=t, group=g)
                assert got.schema == STATE_AT_SCHEMA
                assert got.to_pylist() == full_query(led, ts=t, group=g).to_pylist(), (g, t)
                assert [tuple(r.values()) for r in got.to_pylist()] == model.state_at(t, g)
        # the maybe-broadcast groups through STATE_AT_SQL over their fetched rows
        monkeypatch.setattr(timeline, "BROADCAST_PYTHON_ROWS_MAX", 0)
        for t in points[::3]:
            assert led.state_at(ts=t).to_pylist() == full_query(led, ts=t).to_pylist(), t
        monkeypatch.undo()


def test_broadcast_set_in_the_range_and_at_the_checkpoint(tmp_path):
    """A group at broadcast at the checkpoint, one set to it after, one set back to clustering,
    one deleted: every branch of the split, against the full query."""
    clock = FakeClock()
    with Ledger.open(tmp_path / "d", backfill=True, clock=clock, segment_events_max=1000,
                     checkpoint_interval_events=12) as led:
        cmds = [{"op": "queue_append", "topic": t, "queue_id": q, "count": 100}
                for t in TOPICS for q in QUEUES]
        cmds += [{"op": "group_set", "group": "b0", "mode": "broadcast", "client_timeout": 2000},
                 {"op": "group_set", "group": "back", "mode": "broadcast"}]
        list(led.apply(cmds))
        for i in range(12):
            clock.advance(700)
            for g in ("b0", "b1", "back", "gone", "plain"):
                for c in CLIENTS[: 1 + i % 3]:
                    list(led.apply([
                        {"op": "pull", "group": g, "topic": "t", "queue_id": i % 2,
                         "client": c, "max": 3},
                        {"op": "commit", "group": g, "topic": "t", "queue_id": i % 2,
                         "client": c, "offset": 10 * i + CLIENTS.index(c)}]))
            if i == 4:
                list(led.apply([{"op": "group_set", "group": "b1", "mode": "broadcast"},
                                {"op": "group_set", "group": "back", "mode": "clustering"}]))
            if i == 7:
                list(led.apply([{"op": "group_delete", "group": "gone"}]))
        led.log.settle()  # list a segment still sealing in the background
        assert led.log.checkpoints(), "the test needs a checkpoint inside the history"
        data = led.log.read(columns=["ts"]).column("ts").to_pylist()
        for t in sorted(set(data))[::2] + [data[-1] + 10_000]:
            assert led.state_at(ts=t).to_pylist() == full_query(led, ts=t).to_pylist(), t
        assert any(r["consumer_group"] == "b0" for r in led.state_at(ts=data[-1]).to_pylist())


# ------------------------------------------------------------ first_seq_after at boundaries


@pytest.fixture
def small_row_groups(monkeypatch) -> Iterator[int]:
    """Segments of 20 events in row groups of 4: the statistics pick one of five."""
    make = writer_mod.log_settings

    def settings_with_small_row_groups(cfg):
        return msgspec.structs.replace(make(cfg), row_group_events=4, cluster_row_group_events=4)

    monkeypatch.setattr(writer_mod, "log_settings", settings_with_small_row_groups)
    yield 4


def _ledger_with_ts_steps(root, clock, groups: tuple[str | None, ...]) -> None:
    """67 events whose ts advances every 3 (equal ts values straddle the 4-event row groups),
    then a tail of two more at one ts; events of `groups` in turn (None: queue appends)."""
    with Ledger.open(root, backfill=True, clock=clock, segment_events_max=20) as led:
        list(led.apply([{"op": "queue_append", "topic": "t", "queue_id": 0, "count": 1000}]))
        for i in range(66):
            if i % 3 == 0:
                clock.advance(10)
            g = groups[i % len(groups)]
            list(led.apply([{"op": "queue_append", "topic": "t", "queue_id": 0, "count": 1}
                            if g is None else
                            {"op": "sync", "group": g, "topic": "t", "queue_id": 0,
                             "offset": i, "source": "s"}]))
    with Ledger.open(root, backfill=True, clock=clock) as led:  # every full segment listed
        clock.advance(10)
        for _ in range(2):
            list(led.apply([{"op": "queue_append", "topic": "t", "queue_id": 0, "count": 1}]))


@pytest.mark.parametrize("groups", [(None,), ("g1", None, "g2", "g3")],
                         ids=["seq order", "clustered by group"])
@pytest.mark.parametrize("time_index", [False, True], ids=["row groups read", "time index"])
def test_first_seq_after_and_ts_before_at_row_group_boundaries(
        tmp_path, small_row_groups, monkeypatch, groups, time_index):
    import storage.reads

    if time_index:  # every question about a time answered by the segment's time index
        monkeypatch.setattr(storage.reads, "TIME_INDEX_ROWS_MIN", 0)
    clock = FakeClock()
    root = tmp_path / "d"
    _ledger_with_ts_steps(root, clock, groups)
    with Ledger.open(root, backfill=True, clock=clock) as led:
        segments = led.log.segments()
        assert len(segments) == 3 and led.log.tail().num_rows == led.log.next_seq - 60
        assert all(pq.read_metadata(s.path).num_row_groups >= 5 for s in segments)
        ts = led.log.read(columns=["ts"]).column("ts").to_pylist()
        last_sealed = led.log.read(seq_lt=segments[-1].end_seq, columns=["ts"]).column("ts")
        points = {T0 - 1, T0, ts[0] - 1, last_sealed[-1].as_py(), ts[-1], ts[-1] + 1,
                  ts[-1] + 10_000}
        points |= {t + d for t in ts for d in (-1, 0, 1)}
        for t in sorted(points):
            assert state_at_mod.first_seq_after(led.log, t) == brute_first_seq_after(led, t), t
        for seq in range(1, led.log.next_seq + 1):
            assert state_at_mod.ts_before(led.log, seq) == ts[seq - 1], seq


def test_one_clustering_group_is_answered_without_duckdb_and_a_broadcast_one_with_it(
        tmp_path, monkeypatch):
    """`keyed_state` answers a clustering group's state (checkpoint rows and events after
    them); a group at broadcast goes to DuckDB."""
    with Ledger.open(tmp_path, clock=FakeClock(), checkpoint_interval_events=4) as led:
        led.group_set("b", mode="broadcast")
        for i, (group, topic, queue, offset) in enumerate(
                [("a", "t", 0, 5), ("a", "t", 1, 7), ("b", "t", 0, 3), ("a", "u", 0, 2),
                 ("a", "t", 0, 9), ("b", "t", 0, 4), ("a", "t", 1, 8)]):
            led.commit(group, topic, queue, offset, client=f"c{i % 2}")
        at = led.now_ms()
        calls = []
        real = state_at_mod.state_at_table

        def counted(*args, **kwargs):
            calls.append(args[-1])
            return real(*args, **kwargs)

        monkeypatch.setattr(state_at_mod, "state_at_table", counted)
        got = led.state_at(ts=at, group="a").to_pylist()
        assert calls == []
        assert [(r["topic"], r["queue_id"], r["committed_offset"]) for r in got] == \
            [("t", 0, 9), ("t", 1, 8), ("u", 0, 2)]
        assert led.log.checkpoints()  # the answer took the checkpoint's rows too
        assert led.state_at(ts=at, group="b").to_pylist() == \
            full_query(led, ts=at, group="b").to_pylist()
        assert calls == ["b"]
