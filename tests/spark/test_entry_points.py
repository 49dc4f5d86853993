"""What the Spark jobs do before any JVM starts, so no `spark` mark: the compaction order is
checked first, and the audit's ledger handle and view export never take the writer lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from cli import invoke
from ledger import Ledger
from ledger.errors import InvalidInput
from spark_compaction import auditor, compact
from tests.spark.conftest import random_ledger
from tests.support.clock import FakeClock

KEY = ("consumer_group", "topic", "queue_id")


@pytest.fixture
def root(tmp_path) -> Path:
    root = tmp_path / "data"
    random_ledger(root, seed=5, commands=120)
    return root


def segments(root: Path) -> list[tuple[int, int]]:
    with Ledger.open(root, readonly=True) as led:
        return [(s.base_seq, s.end_seq) for s in led.log.segments()]


def by_key(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: tuple(r[k] for k in KEY))


def test_cli_compact_refuses_a_bad_order_in_one_line(root, capsys):
    before = segments(root)
    for extra in ([], ["--json"]):
        code = invoke(["--data-dir", str(root), "compact", "--order", "bogus", *extra])
        captured = capsys.readouterr()
        assert code == 2 and captured.out == ""
        assert captured.err.startswith("Error: ") and captured.err.count("\n") == 1
        assert "'bogus'" in captured.err and "cluster, seq, key" in captured.err
    assert segments(root) == before


def test_compact_checks_the_order_before_taking_the_lock(root):
    with Ledger.open(root), pytest.raises(InvalidInput, match="invalid order 'Key'"):
        compact(root, order="Key")  # not LockedError: nothing was tried


def test_the_audits_handle_lets_a_writer_open_and_append(root):
    clock = FakeClock(10**13)
    with auditor.open_ledger(root, clock) as handle:
        seen = handle.log.next_seq
        with Ledger.open(root, clock=clock) as writer:  # flock: refused if the handle held it
            writer.queue_append("t1", 0, 5)
            written = writer.log.next_seq
        assert handle.log.next_seq == seen  # the handle keeps its snapshot
    assert written == seen + 1
    with Ledger.open(root, readonly=True) as led:
        assert led.log.next_seq == written


def test_export_reads_the_view_file_as_the_writer_left_it(root):
    with duckdb.connect(str(root / "view.duckdb")) as con:  # what only the file can show
        con.execute("UPDATE offsets SET committed_offset = 999 WHERE consumer_group = 'g1'")
    out = auditor.export_view(root)
    assert out.source == "file"
    g1 = [r for r in out.rows if r["consumer_group"] == "g1"]
    assert g1 and {r["committed_offset"] for r in g1} == {999}
    with Ledger.open(root, readonly=True) as led:
        assert out.seq == led.log.next_seq


def test_export_uses_its_snapshot_when_a_writer_appends_meanwhile(root, monkeypatch):
    """A writer opens the ledger and appends while the export's handle is open; the view file
    then reflects more than the snapshot, so the export answers from the snapshot."""
    with Ledger.open(root, readonly=True) as led:
        seen = led.log.next_seq
        expected = by_key(led.sql(auditor.VIEW_QUERY).to_pylist())
    real = auditor._view_file_rows

    def writer_first(path: Path, now_ms: int):
        with Ledger.open(root) as writer:
            assert writer.group_delete("g1")["queues_deleted"] > 0
        return real(path, now_ms)

    monkeypatch.setattr(auditor, "_view_file_rows", writer_first)
    out = auditor.export_view(root)
    assert (out.source, out.seq) == ("snapshot", seen)
    assert by_key(out.rows) == expected
    with Ledger.open(root, readonly=True) as led:
        assert led.log.next_seq > seen
        assert led.progress("g1") == []


WRITER = textwrap.dedent("""
    import sys
    from ledger import Ledger
    with Ledger.open(sys.argv[1]) as led:
        print("open", flush=True)
        sys.stdin.readline()
        led.queue_append("t1", 1, 7)
        print(led.log.next_seq, flush=True)
""")


def test_export_beside_a_writer_process_answers_from_the_snapshot(root):
    with Ledger.open(root, readonly=True) as led:
        seen = led.log.next_seq
        expected = by_key(led.sql(auditor.VIEW_QUERY).to_pylist())
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "open"
        out = auditor.export_view(root)  # DuckDB keeps the writer's file to itself
        assert (out.source, out.seq) == ("snapshot", seen)
        assert by_key(out.rows) == expected
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert int(proc.stdout.readline()) == seen + 1  # and the writer went on
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
