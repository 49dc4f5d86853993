"""Injected disk faults: a failed fsync makes the log refuse changes until reopened (never a
retried fsync over possibly lost pages); ENOSPC and short writes leave no torn frame behind."""

from __future__ import annotations

import errno
from pathlib import Path

import pyarrow as pa
import pytest

from storage import LogFailedError, LogSettings, SchemaError, StorageError
from tests.storage.storage_helpers import concat, make_rows, open_log, with_seqs
from tests.support.faults import FaultyFS


def test_an_fsync_failure_fails_the_append_and_every_later_change(tmp_path: Path) -> None:
    fs = FaultyFS()
    log = open_log(tmp_path, fs=fs)
    acknowledged = []
    for i in range(3):
        made = make_rows(4, salt=i)
        acknowledged.append(with_seqs(made, log.append(made).first_seq))
    fs.fsync_fail_after = fs.fsyncs
    with pytest.raises(LogFailedError, match="fsync"):
        log.append(make_rows(4, salt=9))
    assert log.failed
    fs.fsync_fail_after = None  # even if the disk "recovers", the log does not retry
    with pytest.raises(LogFailedError):
        log.append(make_rows(1))
    with pytest.raises(LogFailedError):
        log.roll()
    with pytest.raises(LogFailedError):
        log.sync()
    with pytest.raises(LogFailedError):
        log.write_checkpoint(0, pa.table({"a": [1]}))
    log.close()
    with open_log(tmp_path) as reopened:
        got = reopened.read()
        assert got.slice(0, 12).equals(concat(acknowledged))
        assert got.column("seq").to_pylist() == list(range(got.num_rows))
        reopened.append(make_rows(1))  # usable again after the reopen


def test_an_fsync_failure_during_a_seal_fails_the_log(tmp_path: Path) -> None:
    fs = FaultyFS()
    settings = LogSettings(segment_events_max=5)
    log = open_log(tmp_path, settings, fs=fs)
    log.append(make_rows(3))
    fs.fsync_fail_after = fs.fsyncs + 1  # the WAL fsync passes, the Parquet one fails
    with pytest.raises(LogFailedError):
        log.append(make_rows(4))  # one frame: 7 rows fill segment 0, whose seal fails
    assert log.next_seq == 7  # the frame was written and fsynced before the seal
    with pytest.raises(LogFailedError):
        log.append(make_rows(1))
    log.close()
    with open_log(tmp_path, settings) as reopened:
        assert reopened.read().column("seq").to_pylist() == list(range(7))
        assert reopened.segments()[0].events == 5  # the seal was redone on open
        assert reopened.tail().num_rows == 2  # and the rest carried into the next WAL


def test_enospc_mid_frame_is_undone_and_the_log_stays_usable(tmp_path: Path) -> None:
    fs = FaultyFS()
    log = open_log(tmp_path, fs=fs)
    first = make_rows(3)
    log.append(first)
    fs.fail_writes(errno.ENOSPC)
    with pytest.raises(OSError, match="No space"):
        log.append(make_rows(5, salt=100))
    assert log.next_seq == 3 and not log.failed
    second = make_rows(2, salt=200)
    log.append(second)
    log.close()
    with open_log(tmp_path) as reopened:
        assert reopened.recovery.bytes_cut == 0
        assert reopened.read().equals(concat([with_seqs(first, 0), with_seqs(second, 3)]))


def test_short_writes_are_completed(tmp_path: Path) -> None:
    fs = FaultyFS()
    fs.short_writes = True
    settings = LogSettings(segment_events_max=4)
    with open_log(tmp_path, settings, fs=fs) as log:
        made = make_rows(10)
        log.append(made)
        log.write_checkpoint(10, pa.table({"a": [1, 2, 3]}))
    with open_log(tmp_path, settings) as reopened:
        assert reopened.read().equals(concat([with_seqs(made, 0)]))
        assert reopened.read_checkpoint(10).num_rows == 3


def test_a_failed_rename_during_a_seal_keeps_the_wal_as_the_source(tmp_path: Path) -> None:
    fs = FaultyFS()
    log = open_log(tmp_path, fs=fs)
    made = make_rows(4)
    log.append(made)
    fs.rename_fails = 1
    with pytest.raises(OSError, match="injected rename"):
        log.roll()
    assert not log.failed and log.segments() == [] and log.tail().num_rows == 4
    info = log.roll()
    assert info is not None and info.events == 4
    log.close()
    with open_log(tmp_path) as reopened:
        assert reopened.read().equals(concat([with_seqs(made, 0)]))


def test_appends_check_the_schema(tmp_path: Path) -> None:
    with open_log(tmp_path) as log:
        made = make_rows(2)
        with pytest.raises(SchemaError, match="missing .'detail'"):
            log.append(made.drop_columns(["detail"]))
        with pytest.raises(SchemaError, match="queue_id is int64"):
            log.append(made.set_column(4, "queue_id", pa.array([1, 2], pa.int64())))
        with pytest.raises(SchemaError, match="kind holds nulls"):
            log.append(made.set_column(2, "kind", pa.array([None, "x"], pa.string())))
        reordered = made.select(list(reversed(made.schema.names)))
        assert log.append(reordered).end_seq == 2
        assert log.append(pa.Table.from_batches([made, made])).end_seq == 6
        assert log.append(made.slice(0, 0)).end_seq == 6
    other = pa.schema([("seq", pa.int64()), ("ts", pa.int64())])
    from storage import SegmentedLog

    with pytest.raises(SchemaError, match="created with schema"):
        SegmentedLog.open(tmp_path, other)
    with pytest.raises(SchemaError, match="int64"):
        SegmentedLog.open(tmp_path / "x", pa.schema([("seq", pa.int32()), ("ts", pa.int64())]))
    with pytest.raises(StorageError, match="closed"):
        log.read()
