"""Appends: dense seqs, splits at segment_events_max, rolls by events, bytes and injected age,
and exactly the fsyncs each durability setting promises."""

from __future__ import annotations

from pathlib import Path

from storage import LogSettings, names
from tests.storage.storage_helpers import make_rows, open_log
from tests.support.clock import FakeClock
from tests.support.faults import FaultyFS


def _fsyncs(fs: FaultyFS, since: int) -> list[str]:
    return [name for op, name in fs.ops[since:] if op == "fsync"]


def test_a_large_append_is_one_frame_sealed_into_full_segments_and_the_rest_carried(
    tmp_path: Path,
) -> None:
    """One frame per append (a crash keeps all of it or none), fsynced once; the seal then
    splits it into full segments and carries the rest into the next WAL, fsynced before the
    manifest commit, so a roll leaves no small segment behind."""
    fs = FaultyFS()
    log = open_log(tmp_path, LogSettings(segment_events_max=10), fs=fs)
    log.append(make_rows(4))
    mark = len(fs.ops)
    result = log.append(make_rows(23))
    assert (result.first_seq, result.end_seq) == (4, 27)
    assert [(s.base_seq, s.end_seq) for s in result.sealed] == [(0, 10), (10, 20)]
    writes = [name for op, name in fs.ops[mark:] if op == "write" and name.endswith(".wal")]
    # header + payload of the append's frame, then of the carried rest
    assert writes == [names.wal_name(0)] * 2 + [names.wal_name(20)] * 2
    wal_fsyncs = [n for n in _fsyncs(fs, mark) if n.endswith(".wal")]
    assert wal_fsyncs == [names.wal_name(0), names.wal_name(20)]
    ops = [name for _, name in fs.ops[mark:]]
    assert ops.index(names.wal_name(20)) < ops.index(names.MANIFEST_FILE)
    assert log.tail().column("seq").to_pylist() == list(range(20, 27))
    log.close()


def test_a_segment_rolls_by_age_on_the_injected_clock(tmp_path: Path) -> None:
    clock = FakeClock(50_000)
    log = open_log(tmp_path, LogSettings(segment_age_ms_max=1000,
                                         batch_fsync_interval_ms=10), clock=clock)
    assert log.append(make_rows(2, ts=10)).sealed == ()  # old ts do not age a new segment
    clock.advance(999)
    assert log.append(make_rows(2, ts=20)).sealed == ()
    clock.advance(1)
    result = log.append(make_rows(1, ts=30))
    assert [s.events for s in result.sealed] == [4] and log.tail().num_rows == 1
    clock.advance(1000)
    assert [s.events for s in log.append(make_rows(0)).sealed] == [1]  # an empty append too
    log.close()


def test_a_segment_rolls_once_its_wal_reaches_the_byte_limit(tmp_path: Path) -> None:
    log = open_log(tmp_path, LogSettings(segment_bytes_max=4096))
    sealed = []
    for i in range(40):
        sealed += log.append(make_rows(3, salt=i)).sealed
    assert len(sealed) >= 3
    for info in sealed:
        assert info.events % 3 == 0
    assert log.read().column("seq").to_pylist() == list(range(120))
    log.close()


def test_durability_batch_fsyncs_by_events_or_interval_and_none_only_on_request(
    tmp_path: Path,
) -> None:
    clock = FakeClock(1000)
    fs = FaultyFS()
    settings = LogSettings(durability="batch", batch_fsync_events=10,
                           batch_fsync_interval_ms=100)
    log = open_log(tmp_path / "batch", settings, fs=fs, clock=clock)
    mark = len(fs.ops)
    for _ in range(4):
        log.append(make_rows(3))  # 3, 6, 9, 12 unsynced events: the fourth fsyncs
    assert len(_fsyncs(fs, mark)) == 1
    mark = len(fs.ops)
    log.append(make_rows(1))
    clock.advance(100)
    log.append(make_rows(1))  # the interval passed
    assert len(_fsyncs(fs, mark)) == 1
    log.close()

    fs = FaultyFS()
    log = open_log(tmp_path / "none", LogSettings(durability="none"), fs=fs, clock=clock)
    mark = len(fs.ops)
    for _ in range(5):
        log.append(make_rows(50))
    assert _fsyncs(fs, mark) == [] and not [op for op, _ in fs.ops[mark:] if op == "fsync_dir"]
    log.sync()
    assert _fsyncs(fs, mark) == [names.wal_name(0)]
    log.close()
