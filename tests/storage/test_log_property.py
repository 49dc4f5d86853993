"""Property: whatever appends, rolls and reopens happen, the log gives back exactly what was
appended, in seq order, through `read()` and through `segments()` + `tail()`."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import LogSettings
from tests.storage.storage_helpers import SCHEMA, concat, make_rows, open_log, with_seqs
from tests.support.clock import FakeClock
from tests.support.faults import NoSyncFS

operation = st.one_of(
    st.tuples(st.just("append"), st.sampled_from([0, 1, 1, 2, 3, 5, 8, 13, 21])),
    st.tuples(st.just("roll"), st.just(0)),
    st.tuples(st.just("reopen"), st.just(0)),
    st.tuples(st.just("tick"), st.integers(0, 40)),
)


def check_log(log, expected: pa.Table, data: st.DataObject) -> None:  # noqa: ANN001
    assert log.next_seq == expected.num_rows
    assert log.read().equals(expected)
    segments = log.segments()
    pieces = [pq.read_table(s.path, schema=SCHEMA) for s in segments] + [log.tail()]
    assert concat(pieces).equals(expected)
    position = 0
    for segment in segments:
        assert segment.base_seq == position
        assert segment.events == segment.end_seq - segment.base_seq
        assert segment.events <= log.settings.segment_events_max
        position = segment.end_seq
    if expected.num_rows:
        seq_gte = data.draw(st.none() | st.integers(0, expected.num_rows))
        seq_lt = data.draw(st.none() | st.integers(0, expected.num_rows + 1))
        ts = expected.column("ts")
        low, high = pc.min(ts).as_py(), pc.max(ts).as_py()
        ts_gte = data.draw(st.none() | st.integers(low - 1, high + 1))
        ts_lt = data.draw(st.none() | st.integers(low - 1, high + 2))
        got = log.read(seq_gte=seq_gte, seq_lt=seq_lt, ts_gte=ts_gte, ts_lt=ts_lt)
        mask = pa.array([True] * expected.num_rows)
        for column, op, value in (
            ("seq", pc.greater_equal, seq_gte), ("seq", pc.less, seq_lt),
            ("ts", pc.greater_equal, ts_gte), ("ts", pc.less, ts_lt),
        ):
            if value is not None:
                mask = pc.and_(mask, op(expected.column(column), value))
        assert got.equals(expected.filter(mask))
        narrow = log.read(seq_gte=seq_gte, ts_lt=ts_lt, columns=["offset", "kind"])
        assert narrow.column_names == ["offset", "kind"]


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    ops=st.lists(operation, max_size=25),
    segment_events_max=st.integers(1, 7),
    durability=st.sampled_from(["always", "batch", "none"]),
    data=st.data(),
)
def test_log_returns_exactly_what_was_appended(
    ops: list[tuple[str, int]], segment_events_max: int, durability: str, data: st.DataObject
) -> None:
    settings_ = LogSettings(
        segment_events_max=segment_events_max,
        segment_age_ms_max=100,
        durability=durability,  # type: ignore[arg-type]
        batch_fsync_interval_ms=10,
        batch_fsync_events=4,
        row_group_events=3,
    )
    clock = FakeClock(10_000)
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        fs = NoSyncFS()  # fsync calls are made, but a busy disk must not slow the property
        log = open_log(root, settings_, clock=clock, fs=fs)
        expected: list[pa.Table] = []
        try:
            for op, size in ops:
                if op == "append":
                    batch = make_rows(size, ts=clock.now, salt=log.next_seq)
                    result = log.append(batch)
                    assert result.first_seq == sum(t.num_rows for t in expected)
                    assert result.end_seq == result.first_seq + size
                    for info in result.sealed:
                        assert info.events <= segment_events_max
                    expected.append(with_seqs(batch, result.first_seq))
                    clock.advance(1)
                elif op == "roll":
                    tail_rows = log.tail().num_rows
                    info = log.roll()
                    if tail_rows == 0:
                        assert info is None
                    else:
                        assert info == log.segments()[-1] and info.end_seq == log.next_seq
                        assert log.tail().num_rows == 0
                elif op == "reopen":
                    log.close()
                    log = open_log(root, settings_, clock=clock, fs=fs)
                    assert log.recovery.bytes_cut == 0
                else:
                    clock.advance(size)
            check_log(log, concat(expected), data)
            log.close()
            reader = open_log(root, settings_, clock=clock, writer=False, fs=fs)
            check_log(reader, concat(expected), data)
            reader.close()
        finally:
            log.close()
