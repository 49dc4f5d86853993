"""Processes sharing a data directory: one writer (a second is refused, naming the holder),
readers answering from a consistent prefix while a long `apply` runs, and the lock of a
SIGKILLed writer recovered by the kernel (flock), not by guessing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ledger import Ledger, LedgerError
from storage import LockedError
from tests.reliability.helpers import G, T
from tests.support.cli import Cli, assert_one_line_error
from tests.support.clock import FakeClock
from tests.support.oracle import log_view, rows, view_tables
from tests.tools.crash_harness import ROOT, _cli_command, build_stream

HOLDER = (
    "import sys\n"
    "from ledger import Ledger\n"
    "led = Ledger.open(sys.argv[1])\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def _hold_lock(root: Path) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, cwd=str(ROOT), text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


def test_a_second_writer_is_refused_naming_the_holder_pid(tmp_path: Path) -> None:
    root = tmp_path / "data"
    Ledger.open(root).close()
    child = _hold_lock(root)
    try:
        with pytest.raises(LockedError, match=f"locked by process {child.pid}"):
            Ledger.open(root)
        cli = Cli(root)
        r = cli("commit", "--group", G, "--topic", T, "--queue", "0", "--offset", "1")
        assert_one_line_error(r, 2, f"process {child.pid}", "one writer per data directory")
        r = cli("apply", "-", input='{"op":"queue_append","topic":"t","queue_id":0}\n')
        assert_one_line_error(r, 2, f"process {child.pid}")
        r = cli("queue", "list", "--json")  # reads still work (a snapshot)
        assert r.exit_code == 0 and json.loads(r.stdout) == []
        assert cli("history", "--json").exit_code == 0
        with Ledger.open_for_read(root) as reader:
            assert reader.readonly
            with pytest.raises(LedgerError, match="read-only"):
                reader.queue_append(T, 0, 1)
    finally:
        child.communicate("")
    with Ledger.open(root) as led:  # released on the holder's exit
        assert not led.readonly


def test_readers_never_take_the_writer_lock(tmp_path: Path) -> None:
    """A read that happens to start while no writer runs must not make the next writer fail
    (it did: `open_for_read` opened as the writer when the lock was free)."""
    root = tmp_path / "data"
    with Ledger.open(root) as led:
        led.queue_append(T, 0, 10)
    with Ledger.open(root, readonly=True) as reader:
        with Ledger.open(root) as writer:  # not refused by the reader
            writer.queue_append(T, 0, 5)
            r = Cli(root)("queue", "list", "--json")  # a CLI read while the writer runs
            assert r.exit_code == 0 and json.loads(r.stdout)[0]["max_offset"] == 15
        assert reader.queues()[0]["max_offset"] == 10  # its snapshot does not move


def test_a_lock_left_by_a_sigkilled_writer_is_released_by_the_kernel(tmp_path: Path) -> None:
    root = tmp_path / "data"
    with Ledger.open(root) as led:
        led.queue_append(T, 0, 10)
    child = _hold_lock(root)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert (root / "LOCK").read_text().strip() == str(child.pid)  # a stale pid stays behind...
    with Ledger.open(root) as led:  # ...but the flock died with its process
        assert (root / "LOCK").read_text().strip() == str(os.getpid())
        assert led.queue_append(T, 0, 5)["max_offset"] == 15
    r = Cli(root)("queue", "append", "--topic", T, "--queue", "0", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["max_offset"] == 16


def check_snapshot(reader: Ledger, events: object, group: str) -> None:
    """A reader's snapshot: dense seqs, its in-memory view the reference model's fold of them,
    answers sane."""
    n = events.num_rows  # type: ignore[attr-defined]
    assert events.column("seq").to_pylist() == list(range(n))  # type: ignore[attr-defined]
    assert view_tables(lambda sql: rows(reader.sql(sql))) == log_view(events)
    progress = reader.progress(group)
    assert all(p["committed_offset"] <= p["max_offset"] for p in progress)


def test_reads_during_a_long_apply_answer_from_a_consistent_prefix(tmp_path: Path) -> None:
    """`apply` reads its commands from a pipe fed in chunks, so it holds the writer lock (and
    DuckDB's file lock) between chunks for sure; every read in between answers, from a prefix
    that holds at least every event acknowledged before the read began."""
    root = tmp_path / "data"
    lines = build_stream(24_000, seed=11)
    cli = Cli(root)
    assert cli("init", "--segment-events", "3000").exit_code == 0
    batch = 128
    Ledger.open(root, apply_batch_commands=batch).close()
    group = json.loads(next(x for x in lines if b'"op":"commit"' in x))["group"]
    apply = subprocess.Popen([*_cli_command(), "--data-dir", str(root), "apply", "-", "--json"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, cwd=str(ROOT))
    acks: list[dict] = []
    acked = threading.Condition()  # notified on every acknowledgement, and when stdout ends
    ended = []

    def collect() -> None:
        for x in apply.stdout:  # type: ignore[union-attr]
            with acked:
                acks.append(json.loads(x))
                acked.notify_all()
        with acked:
            ended.append(True)
            acked.notify_all()

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    snapshots = []
    chunks = 4
    try:
        for part in range(chunks):
            sent = len(lines) * (part + 1) // chunks
            apply.stdin.write(b"".join(lines[len(lines) * part // chunks:sent]))  # type: ignore[union-attr]
            apply.stdin.flush()  # type: ignore[union-attr]
            # every line but the last batch's acknowledged (that batch waits for more input);
            # no time budget: a generous bound that fails loudly rather than reading early
            with acked:
                acked.wait_for(lambda sent=sent: len(acks) >= sent - batch or bool(ended), 600)
                assert len(acks) >= sent - batch, (
                    f"apply acknowledged {len(acks)} of {sent} lines (stdout ended: {ended})")
            assert apply.poll() is None
            acknowledged = max((a["seq"] + 1 for a in list(acks) if "seq" in a), default=0)
            with Ledger.open(root, readonly=True) as reader:
                events = reader.log.read()
                assert events.num_rows >= acknowledged
                check_snapshot(reader, events, group)
            snapshots.append(events)
            for args in (["progress", "--group", group, "--json"],
                         ["history", "--group", group, "--limit", "3", "--json"],
                         ["at", "now", "--group", group, "--json"],
                         ["sql", "SELECT count(*) AS n, max(seq) AS m, count(DISTINCT seq) AS d "
                                 "FROM events", "--format", "json"]):
                r = cli(*args)
                assert r.exit_code == 0, (args, r.stderr)
                assert "Traceback" not in r.stderr
                if args[0] == "sql":
                    [row] = json.loads(r.stdout)
                    assert row["n"] == row["d"] == (row["m"] or -1) + 1 >= acknowledged
            assert apply.poll() is None  # the reads happened while the writer was running
    finally:
        apply.stdin.close()  # type: ignore[union-attr]
        collector.join(timeout=600)
        err = apply.stderr.read()  # type: ignore[union-attr]
        apply.wait(timeout=600)
    assert not collector.is_alive(), "apply's stdout did not end within 600 s"
    assert apply.returncode == 0, err
    assert len(acks) == len(lines)
    with Ledger.open(root) as led:
        final = led.log.read()
    for events in snapshots:  # each reader saw a prefix of what the writer ended with
        assert events.equals(final.slice(0, events.num_rows))
    # (lines are applied as soon as they arrive: the last read may already see them all)
    assert snapshots[0].num_rows < snapshots[-1].num_rows <= final.num_rows


def test_a_view_file_held_by_another_process_is_one_line_exit_2(tmp_path: Path) -> None:
    """Someone's `duckdb view.duckdb -readonly` session blocks the writer's view: a clear error
    naming the holder (it was an internal error, exit 3)."""
    root = tmp_path / "data"
    Ledger.open(root).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1], "
         "read_only=True); print('ready', flush=True); sys.stdin.read()", str(root / "view.duckdb")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        r = Cli(root)("queue", "append", "--topic", T, "--queue", "0")
        assert_one_line_error(r, 2, "cannot open the view", f"(PID {holder.pid})")
        assert Cli(root)("queue", "list").exit_code == 0  # reads do not need the file
    finally:
        holder.communicate("")
    assert Cli(root)("queue", "append", "--topic", T, "--queue", "0").exit_code == 0


def test_a_reader_follows_the_writer_with_catch_up(tmp_path: Path) -> None:
    """The server's read side: a reader in the writer's process folds the durable log as it
    grows, and answers as a fresh reader would."""
    root = tmp_path / "data"
    clock = FakeClock()  # progress's lag_ms is judged at the clock: one for all
    with Ledger.open(root, clock=clock) as led:
        led.queue_append(T, 0, 100)
        reader = Ledger.open(root, readonly=True, clock=clock)
        try:
            assert reader.queues()[0]["max_offset"] == 100 and reader.catch_up() == 0
            led.group_set("g", initial="earliest")
            led.pull("g", T, 0, client="c1")
            led.commit("g", T, 0, 40, client="c1")
            assert reader.catch_up() == 4  # group_config, initial, pull, commit
            assert reader.progress("g")[0]["committed_offset"] == 40
            assert reader.committed("g", T, 0) == 40
            fresh = Ledger.open(root, readonly=True, clock=clock)
            try:
                assert reader.snapshot() == fresh.snapshot()
                assert reader.sql("SELECT * FROM progress").to_pylist() == \
                    fresh.sql("SELECT * FROM progress").to_pylist()
            finally:
                fresh.close()
        finally:
            reader.close()
