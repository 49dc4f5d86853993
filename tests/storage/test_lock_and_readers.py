"""One writer per data directory; readers need no lock and always see a consistent prefix."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage import LockedError, LogSettings, ReadOnlyError, StorageError
from tests.storage.storage_helpers import SCHEMA, concat, make_rows, open_log, with_seqs

ROOT = Path(__file__).resolve().parents[2]


def test_a_second_writer_is_refused_naming_the_holders_pid(tmp_path: Path) -> None:
    with open_log(tmp_path):
        with pytest.raises(LockedError, match=f"process {os.getpid()}") as info:
            open_log(tmp_path)
        assert info.value.pid == os.getpid()
    with open_log(tmp_path):  # released on close
        pass


def test_a_lock_held_by_another_process_names_it_and_dies_with_it(tmp_path: Path) -> None:
    script = (
        "import sys, time, pyarrow as pa\n"
        "from storage import SegmentedLog\n"
        "schema = pa.schema([('seq', pa.int64()), ('ts', pa.int64())])\n"
        "log = SegmentedLog.open(sys.argv[1], schema)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        stdout=subprocess.PIPE, cwd=ROOT, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        schema = pa.schema([("seq", pa.int64()), ("ts", pa.int64())])
        from storage import SegmentedLog

        with pytest.raises(LockedError, match=f"process {child.pid}"):
            SegmentedLog.open(tmp_path, schema)
        child.kill()  # a killed writer's lock is released by the kernel
        child.wait(timeout=10)
        with SegmentedLog.open(tmp_path, schema) as log:
            assert log.next_seq == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)


def test_a_reader_needs_no_lock_and_refuses_changes(tmp_path: Path) -> None:
    with open_log(tmp_path) as writer:
        writer.append(make_rows(3))
        with open_log(tmp_path, writer=False) as reader:
            assert reader.read().num_rows == 3
            with pytest.raises(ReadOnlyError):
                reader.append(make_rows(1))
            with pytest.raises(ReadOnlyError):
                reader.roll()


def test_a_reader_of_a_missing_log_gets_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="no log at"):
        open_log(tmp_path, writer=False)


def test_a_reader_snapshot_is_stable_until_refreshed(tmp_path: Path) -> None:
    settings = LogSettings(segment_events_max=4)
    with open_log(tmp_path, settings) as writer:
        writer.append(make_rows(6))
        reader = open_log(tmp_path, settings, writer=False)
        writer.append(make_rows(5))
        assert reader.next_seq == 6 and reader.read().num_rows == 6
        reader.refresh()
        assert reader.next_seq == 11
        assert reader.read().equals(writer.read())
        reader.close()


def test_a_reader_retries_when_a_swap_or_retention_removed_its_files(tmp_path: Path) -> None:
    settings = LogSettings(segment_events_max=4)
    with open_log(tmp_path, settings) as writer:
        tables = [with_seqs(make_rows(4, salt=i), 4 * i) for i in range(4)]
        for t in tables:
            writer.append(make_rows(4, salt=t.column("seq")[0].as_py() // 4))
        reader = open_log(tmp_path, settings, writer=False)
        old = writer.segments()[:3]
        merged = pa.concat_tables([pq.read_table(s.path, schema=SCHEMA) for s in old])
        staged = tmp_path / "merged.parquet"
        pq.write_table(merged, staged)
        writer.replace(old, [staged])
        got = reader.read()  # its snapshot named deleted files: it re-reads the manifest
        assert got.equals(concat(tables))
        assert [s.end_seq for s in reader.segments()] == [12, 16]
        reader.close()


def test_readers_see_a_consistent_prefix_while_a_writer_appends_and_seals(
    tmp_path: Path,
) -> None:
    settings = LogSettings(segment_events_max=7, durability="none")
    batches = [make_rows(1 + i % 5, ts=1000 + i, salt=i) for i in range(3000)]
    tables, seq = [], 0
    for batch in batches:
        tables.append(with_seqs(batch, seq))
        seq += batch.num_rows
    everything = concat(tables)
    # Paced by events, not by a time budget: at each of these batches the writer waits until a
    # reader check has finished since it got there, so reads land all along the history however
    # slow the machine (a 1.5 s window of reads could end before the writer got anywhere); the
    # reader stops the writer once it has seen enough.
    pace_at = set(range(100, len(batches), 100))
    checked, stop = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    writer = open_log(tmp_path, settings)

    def write() -> None:
        try:
            for i, batch in enumerate(batches):
                if stop.is_set():
                    break
                if i in pace_at:
                    checked.clear()
                    if not checked.wait(120):
                        raise AssertionError(f"no reader check finished within 120 s (batch {i})")
                writer.append(batch)
                if i % 9 == 8:
                    writer.roll()
                if i % 50 == 49:  # compact the first two segments now and then
                    old = writer.segments()[:2]
                    if len(old) == 2:
                        merged = pa.concat_tables(
                            [pq.read_table(s.path, schema=SCHEMA) for s in old]
                        )
                        staged = tmp_path / f"staged-{i}.parquet"
                        pq.write_table(merged, staged)
                        writer.replace(old, [staged])
                time.sleep(0)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        checks, sizes = 0, set()
        while thread.is_alive() and not (checks > 5 and len(sizes) > 2):
            with open_log(tmp_path, settings, writer=False) as reader:
                got = reader.read()
                assert got.num_rows == reader.next_seq
            assert got.equals(everything.slice(0, got.num_rows))
            checks += 1
            sizes.add(got.num_rows)
            checked.set()
        assert checks > 5 and len(sizes) > 2, "the writer finished before the reads"
    finally:
        stop.set()
        checked.set()  # a writer waiting at a pace point goes on, and stops
        thread.join()
        writer.close()
    assert not errors
