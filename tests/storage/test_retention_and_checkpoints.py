"""Retention deletes whole covered segments and moves the log start; earlier history then gets
a clear error. Checkpoints are atomic, listed in the manifest, and pruned once useless."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from storage import LogRangeError, LogSettings, StorageError, names
from tests.storage.storage_helpers import assert_no_orphans, concat, make_rows, open_log, with_seqs
from tests.support.clock import FakeClock

SETTINGS = LogSettings(segment_events_max=10, segment_age_ms_max=10**9)


def _ten_segments(root: Path, clock: FakeClock):
    log = open_log(root, SETTINGS, clock=clock)
    tables = []
    for i in range(10):  # segment i holds ts 1000*i .. 1000*i + 9
        made = make_rows(10, ts=1000 * i, salt=i)
        tables.append(with_seqs(made, log.append(made).first_seq))
    log.append(make_rows(3, ts=20_000))
    return log, concat(tables)


def test_retention_deletes_only_covered_old_segments_and_moves_the_start(tmp_path: Path) -> None:
    clock = FakeClock(100_000)
    log, expected = _ten_segments(tmp_path, clock)
    for seq in (0, 20, 35, 60):
        log.write_checkpoint(seq, pa.table({"seq_at": [seq]}))
    result = log.retain(covered_seq=45, age_ms_max=100_000 - 5_500)
    # old enough: segments with ts_max < 5500, i.e. 0..4; covered: end_seq <= 45, i.e. 0..3
    assert [s.base_seq for s in result.deleted] == [0, 10, 20, 30]
    assert result.start_seq == log.start_seq == 40
    assert result.checkpoints_deleted == (0, 20)
    assert log.checkpoints() == [35, 60]
    assert all(not s.path.exists() for s in result.deleted)
    assert log.read(seq_gte=40, seq_lt=100).equals(expected.slice(40))
    assert_no_orphans(log)
    log.close()
    with open_log(tmp_path, SETTINGS, clock=clock) as log:
        assert log.start_seq == 40 and log.checkpoints() == [35, 60]
        assert log.read().num_rows == 63


def test_reading_before_the_start_names_the_earliest_seq_and_ts(tmp_path: Path) -> None:
    """The ts named is the first a read by time is answered from: after the last retired
    event's (2009), not the first retained event's."""
    clock = FakeClock(100_000)
    log, _ = _ten_segments(tmp_path, clock)
    log.retain(covered_seq=30, age_ms_max=0)
    for bounds in ({"seq_gte": 0}, {"seq_gte": 29}, {"seq_lt": 30}, {"ts_gte": 2009},
                   {"ts_lt": 100}):
        with pytest.raises(LogRangeError, match="seq 30; reads by time start at ts 2010") as info:
            log.read(**bounds)
        assert (info.value.start_seq, info.value.earliest_ts) == (30, 2010)
    assert log.read(seq_gte=30).num_rows == 73
    assert log.read(ts_gte=2010).num_rows == 73
    assert log.read().num_rows == 73  # unbounded: what is held
    log.close()


def test_retention_by_bytes_keeps_the_newest_within_the_limit(tmp_path: Path) -> None:
    log, _ = _ten_segments(tmp_path, FakeClock(100_000))
    sizes = [s.bytes for s in log.segments()]
    wal_bytes = (tmp_path / "log" / names.wal_name(100)).stat().st_size
    # the limit counts sealed segments and the active one, as Kafka's retention.bytes
    result = log.retain(covered_seq=100, bytes_max=sum(sizes[-3:]) + wal_bytes)
    assert log.start_seq == result.start_seq == 70
    result = log.retain(covered_seq=100, bytes_max=sum(sizes[-3:]) + wal_bytes - 1)
    assert log.start_seq == result.start_seq == 80
    nothing = log.retain(covered_seq=100)
    assert nothing.deleted == () and nothing.start_seq == 80
    log.close()


def test_retention_never_passes_covered_seq_or_touches_the_tail(tmp_path: Path) -> None:
    log, _ = _ten_segments(tmp_path, FakeClock(100_000))
    assert log.retain(covered_seq=9, age_ms_max=0).deleted == ()
    result = log.retain(covered_seq=10**6, bytes_max=0)
    assert len(result.deleted) == 10 and log.start_seq == 100
    assert log.segments() == [] and log.tail().num_rows == 3
    assert log.read().column("seq").to_pylist() == [100, 101, 102]
    with pytest.raises(LogRangeError, match="seq 100; reads by time start at ts 9010"):
        log.read(seq_gte=99)
    log.close()


def test_checkpoints_round_trip_and_refuse_bad_seqs(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(make_rows(5))
        state = pa.table({"key": ["a", None], "value": [1, 2]})
        path = log.write_checkpoint(5, state)
        assert path == log.checkpoint_path(5) and path.name.endswith(".checkpoint.parquet")
        assert log.read_checkpoint(5).equals(state)
        # the state at a seq never changes: a listed checkpoint is kept, never rewritten in
        # place (a crash mid-rewrite would have torn the listed file)
        log.write_checkpoint(5, pa.table({"key": ["b"], "value": [3]}))
        assert log.checkpoints() == [5] and log.read_checkpoint(5).equals(state)
        with pytest.raises(StorageError, match="outside"):
            log.write_checkpoint(6, state)
        with pytest.raises(StorageError, match="no checkpoint at seq 3"):
            log.read_checkpoint(3)
    with open_log(tmp_path, writer=False) as reader:
        assert reader.checkpoints() == [5] and reader.read_checkpoint(5).equals(state)
