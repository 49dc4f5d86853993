"""The background sealer (`seal_in_background`, what the ledger uses): a full segment's Parquet
files are written on another thread while appends go on, and listed by a later change. Rows are
readable throughout, the result equals a synchronous seal's, and a crash, a failed write or a
failed fsync at any step loses nothing acknowledged."""

from __future__ import annotations

import errno
import logging
import random
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from storage import LogSettings, SegmentedLog, SettingsError, names
from storage.errors import LogFailedError
from storage.sealer import Sealer
from tests.storage.storage_helpers import concat, make_rows, open_log, with_seqs
from tests.storage.test_recovery import _appended, _run_until_done
from tests.support.faults import FaultyFS

BACKGROUND = LogSettings(segment_events_max=10, seal_in_background=True)


def _append(log: SegmentedLog, n: int) -> tuple[pa.Table, list[tuple[int, int]]]:
    result = log.append(make_rows(n, salt=log.next_seq))
    rows = with_seqs(make_rows(n, salt=result.first_seq), result.first_seq)
    return rows, [(s.base_seq, s.end_seq) for s in result.sealed]


class _HeldRenames(FaultyFS):
    """Holds the sealer thread before it renames a Parquet file into place until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.held = threading.Event()

    def rename(self, src: Path, dst: Path) -> None:
        if names.is_log_file(Path(dst).name) and str(dst).endswith(".parquet"):
            self.held.set()
            assert self.release.wait(30), "the test never released the sealer"
        super().rename(src, dst)


def test_appends_go_on_while_a_segment_seals_and_a_later_change_lists_it(tmp_path: Path) -> None:
    fs = _HeldRenames()
    log = open_log(tmp_path, BACKGROUND, fs=fs)
    first, sealed = _append(log, 14)
    assert sealed == []  # the seal runs on the sealer thread
    assert fs.held.wait(30)
    second, sealed = _append(log, 3)  # goes on while the sealer is held
    assert sealed == [] and log.segments() == []
    want = concat([first, second])
    assert log.read().equals(want)  # the WAL is the source until the seal is listed
    assert log.tail().equals(want)
    with SegmentedLog.open(tmp_path, log.schema, writer=False) as reader:
        assert reader.read().equals(want)
    fs.release.set()
    assert [(s.base_seq, s.end_seq) for s in log.settle()] == [(0, 10)]
    assert [(s.base_seq, s.end_seq) for s in log.segments()] == [(0, 10)]
    assert log.tail().column("seq").to_pylist() == list(range(10, 17))
    assert log.read().equals(want)
    assert not (tmp_path / "log" / names.wal_name(0)).exists()
    log.close()
    with open_log(tmp_path, BACKGROUND) as reopened:
        assert reopened.read().equals(want)
        assert reopened.recovery.files_deleted == () and reopened.recovery.sealed == ()


def test_background_seals_end_exactly_where_synchronous_ones_do(tmp_path: Path) -> None:
    rng = random.Random(7)
    sizes = [rng.choice((1, 3, 9, 10, 17, 31)) for _ in range(40)]
    logs = {}
    for background in (False, True):
        settings = LogSettings(segment_events_max=10, seal_in_background=background)
        with open_log(tmp_path / str(background), settings) as log:
            wrote = [_append(log, n)[0] for n in sizes]
            log.settle()
            logs[background] = ([(s.base_seq, s.end_seq) for s in log.segments()],
                                log.tail().column("seq").to_pylist(), log.read())
            assert logs[background][2].equals(concat(wrote))
    assert logs[True][0] == logs[False][0]
    assert logs[True][1] == logs[False][1]
    assert all(end - base == 10 for base, end in logs[True][0])


def test_close_lists_a_running_seal(tmp_path: Path) -> None:
    with open_log(tmp_path, BACKGROUND) as log:
        rows, _ = _append(log, 25)
    with open_log(tmp_path, BACKGROUND) as reopened:
        assert [(s.base_seq, s.end_seq) for s in reopened.segments()] == [(0, 10), (10, 20)]
        assert reopened.recovery.files_deleted == () and reopened.recovery.sealed == ()
        assert reopened.read().equals(rows)


def test_crash_at_every_step_of_a_background_seal(tmp_path: Path) -> None:
    """Crash before each file operation of either thread: the acknowledged rows survive whole,
    the unacknowledged append is there whole or not at all, and the open reseals."""
    settings = BACKGROUND

    def action(log: SegmentedLog) -> None:
        log.append(make_rows(5, salt=9))  # 14 rows: the sealer takes the first 10
        log.append(make_rows(3, salt=14))  # lists it if done, else runs on
        log.settle()

    def check(log: SegmentedLog, finished: bool) -> None:
        got = log.read()
        assert got.num_rows in (9, 14, 17)
        assert got.column("seq").to_pylist() == list(range(got.num_rows))
        if got.num_rows > 9:
            assert [s.end_seq for s in log.segments()] == [10]
            assert log.tail().column("seq").to_pylist() == list(range(10, got.num_rows))

    points = _run_until_done(tmp_path, _appended, action, check, settings, exact=False)
    assert points > 12


def test_a_failed_sealer_write_is_logged_and_retried_by_the_next_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    fs = FaultyFS()
    log = open_log(tmp_path, BACKGROUND, fs=fs)
    def full_disk_for_the_sealer(op: str, path: Path) -> None:
        if op == "open_write" and path.name.endswith(".parquet" + names.TMP_SUFFIX):
            fs.fail_writes(errno.ENOSPC)  # its Parquet write hits a full disk, once
            fs.on_step = None

    fs.on_step = full_disk_for_the_sealer
    first, _ = _append(log, 12)
    assert log.wait_for_sealer(30)
    with caplog.at_level(logging.WARNING, logger="storage.sealer"):
        second, sealed = _append(log, 2)  # reports the failure and seals again at once
    assert sealed == [(0, 10)]
    assert "No space left on device" in caplog.text and "retrying it now" in caplog.text
    want = concat([first, second])
    assert log.read().equals(want)
    assert not [p for p in (tmp_path / "log").iterdir() if p.name.endswith(names.TMP_SUFFIX)]
    log.close()
    with open_log(tmp_path, BACKGROUND) as reopened:
        assert reopened.read().equals(want)


def test_a_failed_fsync_in_the_sealer_fails_the_log_and_reopening_keeps_every_row(
    tmp_path: Path,
) -> None:
    fs = FaultyFS()
    log = open_log(tmp_path, BACKGROUND, fs=fs)
    first, _ = _append(log, 4)
    fs.fsync_fail_after = fs.fsyncs + 1  # the append's own fsync passes, the sealer's fails
    second, _ = _append(log, 8)
    assert log.wait_for_sealer(30)
    with pytest.raises(LogFailedError):
        log.append(make_rows(1))
    with pytest.raises(LogFailedError):
        log.append(make_rows(1))  # and stays failed until reopened
    log.close()
    with open_log(tmp_path, BACKGROUND) as reopened:
        assert reopened.read().equals(concat([first, second]))
        assert [(s.base_seq, s.end_seq) for s in reopened.segments()] == [(0, 10)]


def test_seal_in_background_must_be_a_boolean() -> None:
    with pytest.raises(SettingsError, match="seal_in_background must be true or false"):
        LogSettings(seal_in_background=1)  # type: ignore[arg-type]


def _published(log: SegmentedLog, n: int) -> pa.Table:
    """`n` rows appended (the first 10 sealed in the background), then a row at a time until an
    append publishes the seal without waiting for it: each after the sealer (and its carry)
    finished, so the active segment never fills first (a roll would wait for the seal and
    delete the old WAL on the writer thread). Returns the rows written."""
    written, sealed = _append(log, n)
    while not sealed:
        assert log.wait_for_sealer(30)
        more, sealed = _append(log, 1)
        written = concat([written, more])
    assert sealed == [(0, 10)]
    return written


class _RecordedRemoves(FaultyFS):
    """Records which thread deletes each file."""

    def __init__(self) -> None:
        super().__init__()
        self.removed: list[tuple[str, str]] = []

    def remove(self, path: Path) -> None:
        self.removed.append((Path(path).name, threading.current_thread().name))
        super().remove(path)


def test_the_wal_a_published_seal_replaces_is_deleted_on_the_sealer_thread(
        tmp_path: Path) -> None:
    """An append that publishes a finished seal leaves the old WAL's unlink (27 ms for a full
    100 MB WAL) to the sealer thread; closing waits for it, and a crash before it leaves a
    file the next open deletes."""
    fs = _RecordedRemoves()
    log = open_log(tmp_path, BACKGROUND, fs=fs)
    written = _published(log, 14)
    log.close()
    wal = names.wal_name(0)
    assert [thread for name, thread in fs.removed if name == wal] == ["log-sealer_0"]
    assert not (tmp_path / "log" / wal).exists()
    with open_log(tmp_path, BACKGROUND) as reopened:
        assert reopened.read().equals(written)
        assert reopened.recovery.files_deleted == ()


def test_a_crash_before_the_sealer_deletes_the_old_wal_leaves_a_file_the_open_deletes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Sealer, "_remove_later", lambda self, path: None)  # it never runs
    log = open_log(tmp_path, BACKGROUND)
    written = _published(log, 14)
    log.close()
    wal = tmp_path / "log" / names.wal_name(0)
    assert wal.exists()  # the replaced WAL, whole, beside the one the manifest names
    with open_log(tmp_path, BACKGROUND) as reopened:
        assert reopened.read().equals(written)
        assert names.wal_name(0) in [Path(p).name for p in reopened.recovery.files_deleted]
    assert not wal.exists()


class _ThreadedSteps(FaultyFS):
    """Records each file operation with the thread that made it."""

    def __init__(self) -> None:
        super().__init__()
        self.by_thread: list[tuple[str, str, str]] = []

    def step(self, op: str, path: Path) -> None:
        super().step(op, path)
        self.by_thread.append((op, Path(path).name, threading.current_thread().name))


def test_the_rows_after_a_seal_are_written_as_the_next_wal_on_the_sealer_thread(
        tmp_path: Path) -> None:
    """A finished seal with rows after it is listed one change later: the sealer thread first
    writes and fsyncs those rows as the next WAL, and the change that lists it writes only the
    rows appended since (a server's writer thread spent 54-82 ms carrying ~100k rows)."""
    fs = _ThreadedSteps()
    log = open_log(tmp_path, BACKGROUND, fs=fs)
    first, _ = _append(log, 14)  # the sealer takes rows 0-9
    assert log.wait_for_sealer(30)
    second, sealed = _append(log, 3)  # starts writing rows 10-13 as the next WAL, then 14-16
    assert sealed == [] and log.segments() == []
    assert log.wait_for_sealer(30)
    assert log.read().equals(concat([first, second]))  # the old WAL is still the source
    third, sealed = _append(log, 2)  # lists the seal, carrying 14-16 itself; then its own rows
    assert sealed == [(0, 10)]
    nxt = names.wal_name(10)
    ops = [(op, thread.split("_")[0]) for op, name, thread in fs.by_thread if name == nxt]
    frame = [("write", "MainThread"), ("write", "MainThread"), ("fsync", "MainThread")]
    assert ops == [("remove", "log-sealer"), ("open_append", "log-sealer"),
                   ("write", "log-sealer"), ("write", "log-sealer"), ("fsync", "log-sealer"),
                   *frame, *frame]  # the carried rows 14-16, then the append's rows 17-18
    want = concat([first, second, third])
    assert log.read().equals(want)
    assert log.tail().column("seq").to_pylist() == list(range(10, 19))
    log.close()
    with open_log(tmp_path, BACKGROUND) as reopened:
        assert reopened.read().equals(want)
        assert [(s.base_seq, s.end_seq) for s in reopened.segments()] == [(0, 10)]
        assert reopened.recovery.files_deleted == () and reopened.recovery.sealed == ()


def test_a_failed_write_of_the_next_wal_is_logged_and_the_listing_carries_the_rows(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fs = FaultyFS()
    log = open_log(tmp_path, BACKGROUND, fs=fs)
    first, _ = _append(log, 14)
    assert log.wait_for_sealer(30)

    def full_disk_for_the_next_wal(op: str, path: Path) -> None:
        if op == "open_append" and path.name == names.wal_name(10):
            fs.only = path.name
            fs.fail_writes(errno.ENOSPC)  # the sealer thread's write of it, once
            fs.on_step = None

    fs.on_step = full_disk_for_the_next_wal
    second, sealed = _append(log, 3)
    assert sealed == [] and log.wait_for_sealer(30)
    assert not (tmp_path / "log" / names.wal_name(10)).exists()  # removed after the failure
    with caplog.at_level(logging.WARNING, logger="storage.sealer"):
        third, sealed = _append(log, 2)
    assert sealed == [(0, 10)]
    assert "No space left on device" in caplog.text and "carrying its rows now" in caplog.text
    want = concat([first, second, third])
    assert log.read().equals(want)
    log.close()
    with open_log(tmp_path, BACKGROUND) as reopened:
        assert reopened.read().equals(want)
        assert reopened.recovery.files_deleted == ()


def test_a_failed_fsync_of_the_next_wal_fails_the_log_and_reopening_keeps_every_row(
        tmp_path: Path) -> None:
    fs = FaultyFS()
    log = open_log(tmp_path, BACKGROUND, fs=fs)
    first, _ = _append(log, 14)
    assert log.wait_for_sealer(30)
    # the next WAL's fsync fails (on the sealer thread, which may run it before or after
    # the append's own fsync: only that file's fsyncs are counted)
    fs.only, fs.fsync_fail_after, fs.fsyncs = names.wal_name(10), 0, 0
    second, sealed = _append(log, 3)
    assert sealed == [] and log.wait_for_sealer(30)
    with pytest.raises(LogFailedError):
        log.append(make_rows(1))
    log.close()
    with open_log(tmp_path, BACKGROUND) as reopened:
        assert reopened.read().equals(concat([first, second]))
        assert [(s.base_seq, s.end_seq) for s in reopened.segments()] == [(0, 10)]
