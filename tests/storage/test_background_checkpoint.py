"""A checkpoint started in the background (`start_checkpoint`) is written while appends go on,
listed once durable, waited for by whoever lists checkpoints and by close; its failed fsync
fails the log as any fsync does, any other failure leaves it unlisted and the log writable."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from storage import LogSettings, names
from storage.errors import LogFailedError
from tests.storage.storage_helpers import live_files, make_rows, open_log
from tests.support.faults import FaultyFS

SETTINGS = LogSettings(segment_events_max=1_000, segment_age_ms_max=10**9)
STATE = pa.table({"key": ["a", "b"], "value": [1, 2]})


class _HeldCheckpointFS(FaultyFS):
    """Holds the first write of a checkpoint file until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.writing, self.release = threading.Event(), threading.Event()

    def open_write(self, path: Path):  # type: ignore[no-untyped-def]
        if ".checkpoint." in Path(path).name and not self.writing.is_set():
            self.writing.set()
            assert self.release.wait(30), "the test never released the checkpoint"
        return super().open_write(path)


def test_appends_go_on_while_a_checkpoint_is_written_and_readers_wait_for_it(
        tmp_path: Path) -> None:
    fs = _HeldCheckpointFS()
    log = open_log(tmp_path, SETTINGS, fs=fs)
    try:
        log.append(make_rows(5))
        log.start_checkpoint(5, STATE)
        assert fs.writing.wait(30)
        log.append(make_rows(3, salt=5))  # not held by the checkpoint's write
        assert log.newest_checkpoint_seq() == 5  # the writer counts it before it is listed
        listed = threading.Thread(target=lambda: seen.append(log.checkpoints()))
        seen: list[list[int]] = []
        listed.start()
        listed.join(0.3)
        assert listed.is_alive() and not seen  # a reader waits for it...
        fs.release.set()
        listed.join(30)
        assert seen == [[5]]  # ...and then finds it listed
        assert log.read_checkpoint(5).equals(STATE)
        assert log.next_seq == 8
    finally:
        fs.release.set()
        log.close()


def test_close_finishes_a_checkpoint_being_written(tmp_path: Path) -> None:
    fs = _HeldCheckpointFS()
    log = open_log(tmp_path, SETTINGS, fs=fs)
    log.append(make_rows(4))
    log.start_checkpoint(4, STATE)
    assert fs.writing.wait(30)
    threading.Timer(0.2, fs.release.set).start()
    log.close()
    again = open_log(tmp_path, SETTINGS)
    try:
        assert again.checkpoints() == [4]
        assert again.recovery.files_deleted == ()
        assert again.read_checkpoint(4).equals(STATE)
    finally:
        again.close()


def test_a_failed_fsync_of_a_background_checkpoint_fails_the_log(tmp_path: Path) -> None:
    fs = FaultyFS()
    log = open_log(tmp_path, SETTINGS, fs=fs)
    log.append(make_rows(5))
    fs.only, fs.fsync_fail_after = ".checkpoint.parquet.tmp", 0
    log.start_checkpoint(5, STATE)
    assert log.checkpoints() == []
    with pytest.raises(LogFailedError):
        log.append(make_rows(1, salt=5))
    log.close()
    fs.clear()
    again = open_log(tmp_path, SETTINGS)
    try:
        assert again.checkpoints() == [] and again.next_seq == 5
        assert not any(".checkpoint." in f for f in live_files(tmp_path)[1])
    finally:
        again.close()


def test_another_failure_leaves_the_checkpoint_unlisted_and_the_log_writable(
        tmp_path: Path) -> None:
    fs = FaultyFS()
    log = open_log(tmp_path, SETTINGS, fs=fs)
    try:
        log.append(make_rows(5))
        fs.only = ".checkpoint.parquet.tmp"
        fs.fail_writes(errno.ENOSPC)
        log.start_checkpoint(5, STATE)
        assert log.checkpoints() == []
        fs.clear()
        assert log.append(make_rows(2, salt=5)).first_seq == 5
        log.start_checkpoint(7, STATE)  # the next one is written
        assert log.checkpoints() == [7]
        assert set(live_files(tmp_path)[1]) == {names.checkpoint_name(7)}
    finally:
        log.close()
