"""Clustered sealed segments and the resident read index: whatever appends, rolls, reopens and
reader refreshes happen, keyed reads (`where`, `newest`) give exactly the rows a filter of
everything gives, in seq order; segments stay contiguous seq ranges whose rows are sorted by
the clustering key then seq; the first seq after a time and the time of a seq are exact."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import storage.reads
from storage import LogSettings, SchemaError, SegmentedLog
from tests.storage.storage_helpers import SCHEMA, concat, make_rows, open_log, with_seqs
from tests.support.clock import FakeClock

GROUPS = ("group-0", "group-1", "group-2", "group-3", "group-4")

operation = st.one_of(
    st.tuples(st.just("append"), st.sampled_from([1, 2, 3, 5, 8, 13, 40])),
    st.tuples(st.just("roll"), st.just(0)),
    st.tuples(st.just("reopen"), st.just(0)),
    st.tuples(st.just("tick"), st.integers(0, 3)),
)


def clustered(segment_events_max: int, row_group: int) -> LogSettings:
    return LogSettings(segment_events_max=segment_events_max, cluster_columns=("consumer_group",),
                       cluster_row_group_events=row_group, durability="none")


def expected_where(expected: pa.Table, name: str, values: list) -> pa.Table:
    mask = pc.fill_null(pc.is_in(expected.column(name), value_set=pa.array(values)), False)
    return expected.filter(mask)


def check(log: SegmentedLog, expected: pa.Table, data: st.DataObject) -> None:
    assert log.read().equals(expected)
    for segment in log.segments():  # sorted by (group, seq), nulls last, one seq range
        rows = pq.read_table(segment.path, schema=SCHEMA)
        assert sorted(rows.column("seq").to_pylist()) == list(range(segment.base_seq,
                                                                    segment.end_seq))
        keys = [(g is None, g or "", s) for g, s in zip(
            rows.column("consumer_group").to_pylist(), rows.column("seq").to_pylist(), strict=True)]
        assert keys == sorted(keys)
    if not expected.num_rows:
        return
    groups = data.draw(st.lists(st.sampled_from(GROUPS), min_size=1, max_size=2, unique=True))
    want = expected_where(expected, "consumer_group", groups)
    assert log.read(where={"consumer_group": groups}).equals(want)
    lo = data.draw(st.integers(0, expected.num_rows))
    ts = expected.column("ts")
    t_lo = data.draw(st.integers(pc.min(ts).as_py() - 1, pc.max(ts).as_py() + 1))
    bounded = log.read(seq_gte=lo, ts_gte=t_lo, where={"consumer_group": groups,
                                                       "queue_id": [0, 1, 2, 3]},
                       columns=["seq", "offset"])
    mask = pc.and_(pc.greater_equal(want.column("seq"), lo), pc.greater_equal(want.column("ts"), t_lo))
    want_bounded = expected_where(want.filter(mask), "queue_id", [0, 1, 2, 3])
    assert bounded.equals(want_bounded.select(["seq", "offset"]))
    newest = data.draw(st.integers(0, 12))
    got = log.read(where={"consumer_group": groups}, newest=newest)
    assert got.equals(want.slice(max(0, want.num_rows - newest)))
    # ts never decreases along seq here: the first seq after a time, the time of a seq
    stamps = ts.to_numpy()
    for t in {int(stamps[0]) - 1, int(stamps[-1]), data.draw(st.sampled_from(stamps.tolist()))}:
        assert log.seq_after_ts(t) == int(np.searchsorted(stamps, t, side="right"))
    seq = data.draw(st.integers(0, expected.num_rows - 1))
    assert log.ts_of_seq(seq) == int(stamps[seq])


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=st.lists(operation, max_size=20), segment_events_max=st.integers(3, 30),
       row_group=st.integers(1, 6), time_index=st.booleans(), data=st.data())
def test_keyed_reads_of_a_clustered_log_equal_a_filter_of_everything(ops, segment_events_max,
                                                                     row_group, time_index, data):
    # questions about a time answered by reading row groups, or by the segments' time index
    threshold = storage.reads.TIME_INDEX_ROWS_MIN
    storage.reads.TIME_INDEX_ROWS_MIN = 0 if time_index else threshold
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfg = clustered(segment_events_max, row_group)
        clock = FakeClock(1_000)
        log = open_log(root, cfg, clock=clock)
        reader = SegmentedLog.open(root, SCHEMA, cfg, clock=clock, writer=False)
        pieces: list[pa.Table] = []
        ts = 1_000
        try:
            for op, arg in ops:
                if op == "append":
                    stamps = sorted(ts + (i // 3) for i in range(arg))  # repeated ts too
                    ts = stamps[-1]
                    rows = make_rows(arg, ts=stamps, salt=log.next_seq)
                    pieces.append(with_seqs(rows, log.append(rows).first_seq))
                elif op == "roll":
                    log.roll()
                elif op == "reopen":
                    log.close()
                    log = open_log(root, cfg, clock=clock)
                else:
                    ts += arg
                reader.refresh()
                expected = concat(pieces)
                check(reader, expected, data)
            log.settle()
            check(log, concat(pieces), data)
        finally:
            storage.reads.TIME_INDEX_ROWS_MIN = threshold
            log.close()
            reader.close()


def test_a_reader_follows_the_tail_reading_only_new_frames(tmp_path: Path):
    cfg = clustered(1000, 4)
    log = open_log(tmp_path, cfg)
    reader = SegmentedLog.open(tmp_path, SCHEMA, cfg, writer=False, clock=FakeClock(1_000))
    log.append(make_rows(10))
    reader.refresh()
    before = reader.read(where={"consumer_group": ["group-1"]})
    active = reader._segments.active  # the same segment object: only new frames decoded
    log.append(make_rows(10, salt=10))
    reader.refresh()
    assert reader._segments.active is active
    after = reader.read(where={"consumer_group": ["group-1"]})
    assert after.num_rows > before.num_rows
    assert after.equals(log.read(where={"consumer_group": ["group-1"]}))
    log.roll()  # the manifest changed: a new snapshot
    reader.refresh()
    assert reader._segments.active is not active
    assert reader.read(where={"consumer_group": ["group-1"]}).equals(after)
    log.close()
    reader.close()


def test_a_keyed_read_opens_only_the_row_groups_of_its_key(tmp_path: Path):
    log = open_log(tmp_path, clustered(1000, 10))
    log.append(make_rows(1000))
    log.roll()
    got = log.read(where={"consumer_group": ["group-2"]})
    stats = log.last_read_stats
    assert got.num_rows > 100
    assert stats.row_groups_read <= got.num_rows // 10 + 2
    assert stats.row_groups_skipped >= 70
    md = pq.read_metadata(log.segments()[0].path)
    sorting = md.row_group(0).sorting_columns
    assert [SCHEMA.names[c.column_index] for c in sorting] == ["consumer_group", "seq"]
    log.close()


def test_the_clustering_key_must_name_columns_of_the_log(tmp_path: Path):
    with pytest.raises(SchemaError, match="not columns of the log"):
        open_log(tmp_path, LogSettings(cluster_columns=("nope",)))
    log = open_log(tmp_path, clustered(10, 2))
    with pytest.raises(SchemaError, match="unknown column"):
        log.read(where={"nope": [1]})
    with pytest.raises(SchemaError, match="list of non-null values"):
        log.read(where={"consumer_group": "group-1"})
    log.close()
