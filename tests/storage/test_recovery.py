"""Crash recovery: torn and corrupt active tails are cut to the intact prefix, and a crash
between any two file operations of a seal, a checkpoint or a swap leaves a consistent log with
every acknowledged record exactly once and no unlisted file left behind."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from storage import CorruptSegmentError, LogSettings, SegmentedLog, names
from storage.active import ActiveSegment
from storage.frames import frame_bytes
from tests.storage.storage_helpers import SCHEMA, assert_no_orphans, concat, make_rows, open_log, with_seqs
from tests.support.clock import FakeClock
from tests.support.faults import Crash, FaultyFS, NoSyncFS

SIZES = (1, 4, 2)


def _frames() -> tuple[bytes, list[int], list[pa.Table]]:
    """Three frames as the log writes them, the byte offset where each ends, and their rows."""
    tables, ends, data, seq = [], [], b"", 0
    for i, n in enumerate(SIZES):
        table = with_seqs(make_rows(n, ts=100 + seq, salt=i), seq)
        data += frame_bytes(table.to_batches()[0])
        ends.append(len(data))
        tables.append(table)
        seq += n
    return data, ends, tables


def _recover(directory: Path, content: bytes) -> tuple[ActiveSegment, int, int]:
    path = directory / names.wal_name(0)
    path.write_bytes(content)
    segment = ActiveSegment(NoSyncFS(), directory, 0, SCHEMA, 0, 1)
    tail = segment.load(truncate=True)
    return segment, tail.bytes_cut, path.stat().st_size


def test_truncation_at_every_byte_keeps_exactly_the_intact_prefix(tmp_path: Path) -> None:
    data, ends, tables = _frames()
    for cut in range(len(data) + 1):
        intact = sum(1 for end in ends if end <= cut)
        kept = ends[intact - 1] if intact else 0
        segment, bytes_cut, size = _recover(tmp_path, data[:cut])
        assert (bytes_cut, size) == (cut - kept, kept), cut
        assert segment.events == sum(SIZES[:intact]), cut
        assert segment.table().equals(concat(tables[:intact])), cut


def test_a_flipped_byte_in_the_last_frame_cuts_it_and_in_an_earlier_one_is_refused(
    tmp_path: Path,
) -> None:
    """A crash can only tear the last write; a bad frame with bytes after it is corruption of
    acknowledged data, which the writer refuses (naming the file and seq) instead of cutting,
    also when a damaged length field makes it look like a frame running past the end of the
    file: the intact frames after it were written after it."""
    data, ends, tables = _frames()
    starts = [0, *ends[:-1]]
    for index, (start, end) in enumerate(zip(starts, ends, strict=True)):
        for position in (start, start + 3, start + 4, start + 8, (start + end) // 2, end - 1):
            damaged = bytearray(data)
            damaged[position] ^= 0x5A
            if index == len(SIZES) - 1:  # looks like a torn last write
                segment, bytes_cut, size = _recover(tmp_path, bytes(damaged))
                assert size == start and bytes_cut == len(data) - start, (index, position)
                assert segment.table().equals(concat(tables[:index])), (index, position)
                continue
            with pytest.raises(CorruptSegmentError, match=rf"seq {start_seq(index)}\.\.\).*"
                               "not a torn last write") as raised:
                _recover(tmp_path, bytes(damaged))
            assert raised.value.path.name == names.wal_name(0)
            # a reader (no repair) still reads the intact prefix
            path = tmp_path / names.wal_name(0)
            reader = ActiveSegment(NoSyncFS(), tmp_path, 0, SCHEMA, 0, 1)
            assert reader.load(truncate=False).events == sum(SIZES[:index])
            assert path.stat().st_size == len(data)  # untouched


def start_seq(index: int) -> int:
    return sum(SIZES[:index])


def test_open_cuts_a_torn_tail_and_appends_continue_after_it(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        for n in SIZES:
            log.append(make_rows(n))
        wal = tmp_path / "log" / names.wal_name(0)
        full = wal.stat().st_size
    with open(wal, "r+b") as f:
        f.truncate(full - 5)
    with open_log(tmp_path) as log:
        assert log.recovery.bytes_cut > 0
        assert log.next_seq == sum(SIZES[:-1])
        log.append(make_rows(2))
        assert log.read().column("seq").to_pylist() == list(range(sum(SIZES[:-1]) + 2))
    with open_log(tmp_path) as log:
        assert log.recovery.bytes_cut == 0


def _run_until_done(
    tmp_path: Path,
    prepare: Callable[[SegmentedLog], list[pa.Table]],
    action: Callable[[SegmentedLog], object],
    check: Callable[[SegmentedLog, bool], None],
    settings: LogSettings | None = None,
    *,
    exact: bool = True,
) -> int:
    """Crash `action` before its 1st, 2nd, ... file operation until it completes.

    Each round starts from a fresh log built by `prepare` (which returns the acknowledged rows),
    then reopens after the crash and checks consistency: the acknowledged rows are there,
    exactly (or, if not `exact`, as a prefix). Returns the number of crash points.
    """
    crash_at = 1
    while True:
        root = tmp_path / f"round{crash_at}"
        with open_log(root, settings) as log:
            acknowledged = concat(prepare(log))
        fs = FaultyFS()
        log = open_log(root, settings, fs=fs)
        fs.crash_at = len(fs.ops) + crash_at
        finished = True
        try:
            action(log)
        except Crash:
            finished = False
        finally:
            log._abandon()
        with open_log(root, settings) as reopened:
            got = reopened.read()
            if not exact:
                got = got.slice(0, acknowledged.num_rows)
            assert got.equals(acknowledged), crash_at
            assert_no_orphans(reopened)
            check(reopened, finished)
        if finished:
            return crash_at
        crash_at += 1


def _appended(log: SegmentedLog, sizes: tuple[int, ...] = (3, 4, 2)) -> list[pa.Table]:
    out = []
    for n in sizes:
        result = log.append(make_rows(n, salt=log.next_seq))
        out.append(with_seqs(make_rows(n, salt=result.first_seq), result.first_seq))
    return out


def test_crash_at_every_step_of_a_seal(tmp_path: Path) -> None:
    def check(log: SegmentedLog, finished: bool) -> None:
        sealed = [s.end_seq for s in log.segments()]
        assert sealed in ([], [9])
        if finished:
            assert sealed == [9]

    points = _run_until_done(tmp_path, _appended, lambda log: log.roll(), check)
    assert points == 12  # 11 file operations, then a round without a crash


def test_crash_at_every_step_of_an_append_that_seals(tmp_path: Path) -> None:
    settings = LogSettings(segment_events_max=10)

    def check(log: SegmentedLog, finished: bool) -> None:
        # The interrupted append was not acknowledged: it is there whole (one frame) or not at
        # all, never in part, duplicated or out of order; a full segment is sealed on open and
        # the rest carried into the next WAL.
        got = log.read()
        assert got.num_rows in (9, 14)
        assert got.column("seq").to_pylist() == list(range(got.num_rows))
        if finished or got.num_rows == 14:
            assert [s.end_seq for s in log.segments()] == [10]
            assert log.tail().column("seq").to_pylist() == [10, 11, 12, 13]

    points = _run_until_done(
        tmp_path, _appended, lambda log: log.append(make_rows(5, salt=9)), check, settings,
        exact=False,
    )
    assert points > 12


def test_crash_at_every_step_of_a_checkpoint_write(tmp_path: Path) -> None:
    state = pa.table({"key": ["a", "b"], "value": [1, 2]})

    def check(log: SegmentedLog, finished: bool) -> None:
        assert log.checkpoints() in ([], [5])
        if log.checkpoints():
            assert log.read_checkpoint(5).equals(state)
        if finished:
            assert log.checkpoints() == [5]

    points = _run_until_done(
        tmp_path, _appended, lambda log: log.write_checkpoint(5, state), check
    )
    assert points == 11


def _staged(log: SegmentedLog, directory: Path, merge: slice) -> tuple[list, list[Path]]:
    """Merge some live segments into one staged file, rows ordered by another column."""
    old = log.segments()[merge]
    table = pa.concat_tables([pq.read_table(s.path, schema=SCHEMA) for s in old])
    table = table.take(pc.sort_indices(table, [("queue_id", "ascending"), ("seq", "ascending")]))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "part-0.parquet"
    pq.write_table(table, path)
    return old, [path]


def test_crash_at_every_step_of_a_replace(tmp_path: Path) -> None:
    settings = LogSettings(segment_events_max=4)
    staging = tmp_path / "staging"
    old_ends: list[int] = []

    def prepare(log: SegmentedLog) -> list[pa.Table]:
        tables = _appended(log, (4, 4, 4, 3))
        old_ends[:] = [s.end_seq for s in log.segments()]
        return tables

    def action(log: SegmentedLog) -> None:
        old, files = _staged(log, staging, slice(0, 3))
        log.replace(old, files)

    def check(log: SegmentedLog, finished: bool) -> None:
        ends = [s.end_seq for s in log.segments()]
        assert ends in (old_ends, [12])
        if finished:
            assert ends == [12]
            name = log.segments()[0].path.name  # a name no earlier file had
            assert names.parse_seq_prefix(name) == 0 and name != names.parquet_name(0)

    points = _run_until_done(tmp_path, prepare, action, check, settings)
    assert points == 12  # move, fsync, fsync dir, manifest (5), 3 removals, then no crash


def test_a_crash_after_the_seal_commit_deletes_the_old_wal_on_open(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(make_rows(3))
    wal = tmp_path / "log" / names.wal_name(0)
    kept = wal.read_bytes()
    with open_log(tmp_path) as log:
        log.roll()
    wal.write_bytes(kept)  # as if the removal never reached the disk
    with open_log(tmp_path) as log:
        assert "log/" + wal.name in log.recovery.files_deleted
        assert log.read().num_rows == 3 and log.tail().num_rows == 0
        assert_no_orphans(log)


def test_open_seals_a_full_active_segment_left_by_a_crash(tmp_path: Path) -> None:
    with open_log(tmp_path, LogSettings(segment_events_max=100)) as log:
        log.append(make_rows(8))
    with open_log(tmp_path, LogSettings(segment_events_max=3)) as log:
        assert [s.events for s in log.recovery.sealed] == [3, 3]
        assert [s.events for s in log.segments()] == [3, 3]
        assert log.tail().column("seq").to_pylist() == [6, 7]  # carried into the next WAL
        assert log.read().column("seq").to_pylist() == list(range(8))
        assert_no_orphans(log)


def test_unknown_files_are_left_alone(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        log.append(make_rows(2))
    (tmp_path / "log" / "README").write_text("mine")
    with open_log(tmp_path):
        pass
    assert (tmp_path / "log" / "README").read_text() == "mine"
    assert os.path.exists(tmp_path / "log" / names.MANIFEST_FILE)


def test_a_missing_manifest_with_segments_present_is_refused(tmp_path: Path) -> None:
    from storage import CorruptManifestError

    with open_log(tmp_path) as log:
        log.append(make_rows(2))
        log.roll()
    (tmp_path / "log" / names.MANIFEST_FILE).unlink()
    with pytest.raises(CorruptManifestError, match="refusing"):
        open_log(tmp_path)


def test_every_acknowledged_append_survives_a_crash_without_close(tmp_path: Path) -> None:
    log = SegmentedLog.open(tmp_path, SCHEMA, LogSettings(segment_events_max=4), clock=FakeClock())
    tables = _appended(log, (3, 3, 3))
    log._abandon()
    with open_log(tmp_path, LogSettings(segment_events_max=4)) as reopened:
        assert reopened.read().equals(concat(tables))


def test_a_checkpoint_beyond_a_lost_tail_is_dropped_on_open(tmp_path: Path) -> None:
    """Durability "none": the WAL tail can be lost in a power cut after a checkpoint at its end
    was written; that checkpoint describes events the log no longer has and must not be used
    once the seq it names is reached again by other events."""
    settings = LogSettings(durability="none")
    with open_log(tmp_path, settings) as log:
        log.append(make_rows(3))
        log.write_checkpoint(3, pa.table({"a": [1]}))
        log.append(make_rows(4))
        log.write_checkpoint(7, pa.table({"a": [2]}))
        wal = tmp_path / "log" / names.wal_name(0)
        size_at_3 = len(frame_bytes(with_seqs(make_rows(3), 0).to_batches()[0]))
    with open(wal, "r+b") as f:
        f.truncate(size_at_3)  # the power cut took the last frame
    with open_log(tmp_path, settings) as log:
        assert log.next_seq == 3 and log.checkpoints() == [3]
        assert "checkpoints/" + names.checkpoint_name(7) in log.recovery.files_deleted
        assert not (tmp_path / "checkpoints" / names.checkpoint_name(7)).exists()
        assert_no_orphans(log)
