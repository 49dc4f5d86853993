"""Disk faults at the file layer (storage/fs.py) under a Ledger and under the CLI: each is a clear
one-line error, the acknowledged prefix survives, and once the fault clears the ledger works.
A failed fsync is never retried as if the data were safe: writes are refused until a reopen,
which reads what is on disk."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger import Ledger, LedgerUnusable
from storage import LogFailedError, StorageError, WriteFailedError
from storage.fs import FileSystem, OsFileHandle
from tests.reliability.helpers import G, T, assert_view_is_a_replay, build_history
from tests.support.cli import Cli, assert_one_line_error
from tests.support.clock import FakeClock
from tests.support.faults import FaultyFS, injected

FAULTS = {"enospc": errno.ENOSPC, "eio": errno.EIO}


def _open(root: Path, fs: FaultyFS, clock: FakeClock, **settings: object) -> Ledger:
    return Ledger.open(root, fs=fs, clock=clock, **settings)


def _verify_ok(root: Path) -> None:
    from ledger.store.verify import verify_ledger

    report = verify_ledger(root)
    assert report.ok, [str(p) for p in report.problems]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_failed_write_is_undone_reported_in_one_line_and_the_ledger_recovers(
    tmp_path: Path, clock: FakeClock, fault: str,
) -> None:
    root, fs = tmp_path / "data", FaultyFS()
    led = _open(root, fs, clock)
    build_history(led)
    acknowledged = led.log.read()
    fs.fail_writes(FAULTS[fault])  # ENOSPC writes half of it first
    with pytest.raises(WriteFailedError) as raised:
        led.commit(G, T, 0, 50, client="c1")
    message = str(raised.value)
    assert "\n" not in message and "undone" in message
    assert injected(FAULTS[fault]).strerror in message
    assert isinstance(raised.value, StorageError) and raised.value.errno == FAULTS[fault]
    # The in-memory state already moved: the ledger refuses until reopened, even if the disk
    # recovers, rather than acknowledging on top of a state the log does not hold.
    fs.clear()
    with pytest.raises(LedgerUnusable, match="reopen"):
        led.commit(G, T, 0, 50, client="c1")
    led.close()
    with Ledger.open(root, fs=fs, clock=clock) as again:
        assert again.log.recovery.bytes_cut == 0  # the half-written frame was cut at once
        assert again.log.read().equals(acknowledged)
        assert again.commit(G, T, 0, 50, client="c1").accepted
        assert again.committed(G, T, 0) == 50
    assert assert_view_is_a_replay(root).num_rows == acknowledged.num_rows + 1
    _verify_ok(root)


def test_an_fsync_failure_refuses_writes_until_reopened_and_reopening_reads_the_disk(
    tmp_path: Path, clock: FakeClock,
) -> None:
    root, fs = tmp_path / "data", FaultyFS()
    led = _open(root, fs, clock)
    build_history(led)
    acknowledged = led.log.read()
    fs.only, fs.fsync_fail_after = ".wal", fs.fsyncs  # every fsync of the WAL from now on
    with pytest.raises(LogFailedError, match="fsync of .*00000000000000000000.wal failed") as e:
        led.commit(G, T, 0, 50, client="c1")
    assert "\n" not in str(e.value)
    fs.clear()  # the disk "recovers": the kernel may have dropped the dirty pages anyway
    with pytest.raises(LedgerUnusable):
        led.commit(G, T, 1, 50, client="c1")
    with pytest.raises(LogFailedError):
        led.log.sync()  # never retried as if the data were safe
    assert led.log.failed
    led.close()
    with Ledger.open(root, fs=fs, clock=clock) as again:
        got = again.log.read()
        # what is on disk decides: the acknowledged prefix, and the unacknowledged commit only
        # if its bytes made it (here they did, in the page cache)
        assert got.slice(0, acknowledged.num_rows).equals(acknowledged)
        assert got.num_rows in (acknowledged.num_rows, acknowledged.num_rows + 1)
        again.commit(G, T, 1, 60, client="c1")
        assert again.committed(G, T, 1) == 60
    assert_view_is_a_replay(root)
    _verify_ok(root)


def test_a_failed_rename_during_a_seal_keeps_the_wal_as_the_source_and_reports_it(
    tmp_path: Path, clock: FakeClock,
) -> None:
    root, fs = tmp_path / "data", FaultyFS()
    led = _open(root, fs, clock, segment_events_max=4)
    led.group_set(G, initial="earliest")
    led.queue_append(T, 0, 100)
    led.queue_append(T, 1, 100)
    fs.rename_fails, fs.only = 1_000, ".parquet.tmp"  # every seal's rename, until cleared
    # This append fills the segment: its rows are durable in the WAL, so it is acknowledged
    # although the seal after it failed...
    led.queue_append(T, 2, 100)
    assert led.log.wait_for_sealer(30)  # the ledger seals in the background
    assert led.log.segments() == [] and led.log.next_seq == 4
    acknowledged = led.log.read()
    # ...and the next change retries the seal first and reports why it cannot.
    with pytest.raises(WriteFailedError, match="rename of 00000000000000000000.parquet.tmp"):
        led.queue_append(T, 3, 100)
    led.close()
    fs.clear()
    with Ledger.open(root, fs=fs, clock=clock) as again:
        assert [s.events for s in again.log.recovery.sealed] == [4]  # the seal, redone
        assert again.log.read().equals(acknowledged)
        again.queue_append(T, 3, 100)
        assert len(again.queues()) == 4
    assert_view_is_a_replay(root)
    _verify_ok(root)


def test_short_writes_are_completed_and_nothing_is_torn(tmp_path: Path, clock: FakeClock) -> None:
    root, fs = tmp_path / "data", FaultyFS()
    fs.short_writes = True
    with _open(root, fs, clock, segment_events_max=5) as led:
        seqs = build_history(led, queues=3, rounds=4)
        assert len(led.log.segments()) >= 3 and led.log.checkpoints()
    events = assert_view_is_a_replay(root)
    assert events.num_rows == seqs[-1] + 1
    _verify_ok(root)


# ---------------------------------------------------------------------- through the CLI
def _raise(fault: Callable[[], OSError]):  # noqa: ANN202 - a stand-in for any file method
    def fail(*_args: object, **_kwargs: object) -> object:
        raise fault()  # a new exception each time: a raised one keeps its frames alive
    return fail


@pytest.mark.parametrize(("target", "fault", "fragment"), [
    ((OsFileHandle, "write"), lambda: injected(errno.ENOSPC), "No space left on device"),
    ((OsFileHandle, "write"), lambda: injected(errno.EIO), "Input/output error"),
    ((OsFileHandle, "fsync"), lambda: OSError(errno.EIO, "Input/output error"), "fsync of"),
])
def test_the_cli_reports_a_disk_fault_in_one_line_exit_2_and_keeps_what_it_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: tuple,
    fault: Callable[[], OSError], fragment: str,
) -> None:
    cli = Cli(tmp_path / "data")
    assert cli("queue", "append", "--topic", T, "--queue", "0", "--count", "10").exit_code == 0
    with monkeypatch.context() as patched:
        patched.setattr(*target, _raise(fault))
        r = cli("queue", "append", "--topic", T, "--queue", "0", "--count", "5", "--json")
        assert_one_line_error(r, 2, fragment)
        assert r.stdout == ""
    r = cli("queue", "list", "--json")
    assert r.exit_code == 0
    [queue] = __import__("json").loads(r.stdout)
    assert queue["max_offset"] in (10, 15)  # 15 only after a failed fsync whose bytes landed
    assert cli("queue", "append", "--topic", T, "--queue", "0", "--count", "1").exit_code == 0
    assert cli("verify").exit_code == 0


def test_apply_hit_by_a_full_disk_keeps_every_printed_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Results printed before the fault are durable; the fault is one line on stderr, exit 2."""
    import json

    root = tmp_path / "data"
    Ledger.open(root, apply_batch_commands=4, segment_events_max=6).close()
    lines = [{"op": "queue_append", "topic": T, "queue_id": q % 3, "count": 5, "ts": 1000 + q}
             for q in range(40)]
    original = OsFileHandle.write
    calls = {"n": 0}

    def write_then_fill_up(self: OsFileHandle, data: object) -> int:
        calls["n"] += 1
        if calls["n"] > 20:
            raise injected(errno.ENOSPC)
        return original(self, data)

    monkeypatch.setattr(OsFileHandle, "write", write_then_fill_up)
    r = Cli(root)("apply", "-", "--json", input="".join(json.dumps(x) + "\n" for x in lines))
    monkeypatch.undo()
    assert_one_line_error(r, 2, "No space left on device", stdout=True)
    printed = [json.loads(x) for x in r.stdout.splitlines()]
    assert 0 < len(printed) < len(lines)
    events = assert_view_is_a_replay(root)
    for result in printed:
        row = events.slice(result["seq"], 1).to_pylist()[0]
        assert (row["topic"], row["queue_id"], row["offset"]) == (
            result["topic"], result["queue_id"], result["max_offset"])


def test_the_cli_reports_a_failed_rename_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = tmp_path / "data"
    cli = Cli(root)
    assert cli("init", "--segment-events", "2").exit_code == 0
    assert cli("queue", "append", "--topic", T, "--queue", "0").exit_code == 0
    original = FileSystem.rename

    def no_parquet_renames(self: FileSystem, src: Path, dst: Path) -> None:
        if str(src).endswith(".parquet.tmp"):
            raise OSError(errno.EIO, "Input/output error (injected rename)")
        original(self, src, dst)

    with monkeypatch.context() as patched:
        patched.setattr(FileSystem, "rename", no_parquet_renames)
        # fills the segment: acknowledged (durable in the WAL), the seal after it fails quietly
        assert cli("queue", "append", "--topic", T, "--queue", "1").exit_code == 0
        r = cli("queue", "append", "--topic", T, "--queue", "2")
        assert_one_line_error(r, 2, "injected rename")
    assert cli("queue", "append", "--topic", T, "--queue", "2").exit_code == 0
    r = cli("verify", "--json")
    assert r.exit_code == 0, r.stdout
    assert __import__("json").loads(r.stdout)["events"] == 3
