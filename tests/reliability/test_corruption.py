"""Damaged files are found, never skipped: on open or on read with an error naming the file and
its seq range, and by `offset-ledger verify` (exit 1), which reads every page of every segment,
the seq chain, the WAL frames and replays the log against the newest checkpoint and the view."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ledger import Ledger
from ledger.store.checkpoint import state_to_table
from storage import CorruptManifestError, CorruptSegmentError, names
from tests.reliability.helpers import G, T, build_history
from tests.reliability.helpers import flip_byte as _flip
from tests.reliability.helpers import verify_json as _verify
from tests.support.cli import Cli, assert_one_line_error
from tests.support.clock import FakeClock

SEGMENT_EVENTS = 5


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger of several sealed segments, checkpoints and a WAL tail."""
    root = tmp_path_factory.mktemp("corruption") / "data"
    with Ledger.open(root, clock=FakeClock(), segment_events_max=SEGMENT_EVENTS) as led:
        build_history(led, queues=3, rounds=4)
        assert len(led.log.segments()) >= 4 and led.log.tail().num_rows > 0
    return root


@pytest.fixture
def data(template: Path, tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(template, root)
    return root


def _segments(root: Path) -> list[dict]:
    manifest = json.loads((root / "log" / "MANIFEST").read_text())
    return manifest["segments"]


def test_a_clean_ledger_verifies(data: Path) -> None:
    code, report = _verify(data)
    assert code == 0 and report["ok"] and report["problems"] == []
    assert report["segments"] >= 4 and report["checkpoints"] >= 1
    assert report["checkpoint_replayed_seq"] is not None and report["view_checked"]
    assert report["events"] == report["next_seq"]
    text = Cli(data)("verify")
    assert text.exit_code == 0 and "0 problem(s)" in text.stdout


def _first_page_offset(path: Path) -> int:
    md = pq.ParquetFile(path).metadata
    return md.row_group(0).column(md.schema.names.index("offset")).data_page_offset


@pytest.mark.parametrize("where", ["data page", "footer", "every byte"])
def test_a_flipped_byte_in_a_sealed_segment_is_found_on_read_and_by_verify(
    data: Path, where: str,
) -> None:
    entry = _segments(data)[1]
    path = data / "log" / entry["file"]
    size = path.stat().st_size
    positions = {"data page": [_first_page_offset(path) + 20], "footer": [size - 40],
                 "every byte": range(0, size, max(1, size // 25))}[where]
    seqs = f"seq {entry['base_seq']}..{entry['end_seq']}"
    for position in positions:
        _flip(path, position)
        code, report = _verify(data)
        assert code == 1 and not report["ok"], position
        assert any(p.startswith(f"log/{entry['file']} ({seqs})") for p in report["problems"])
        # on read: the Python API and DuckDB-backed CLI reads both refuse, naming file and seqs
        with Ledger.open(data) as led, pytest.raises(CorruptSegmentError) as raised:
            led.log.read()
        assert raised.value.path.name == entry["file"] and seqs in str(raised.value)
        r = Cli(data)("history", "--group", G)
        assert_one_line_error(r, 2, entry["file"], seqs)
        _flip(path, position)  # undo, for the next position


def test_a_truncated_parquet_footer_is_refused_on_open(data: Path) -> None:
    entry = _segments(data)[2]
    path = data / "log" / entry["file"]
    path.write_bytes(path.read_bytes()[:-9])
    seqs = f"seq {entry['base_seq']}..{entry['end_seq']}"
    with pytest.raises(CorruptSegmentError, match=f"{entry['file']} \\({seqs}\\).*bytes"):
        Ledger.open(data)
    r = Cli(data)("commit", "--group", G, "--topic", T, "--queue", "0", "--offset", "60")
    assert_one_line_error(r, 2, entry["file"], seqs)
    code, report = _verify(data)
    assert code == 1 and any(entry["file"] in p and seqs in p for p in report["problems"])


def test_a_deleted_middle_segment_is_refused_on_open_and_on_read(data: Path) -> None:
    entry = _segments(data)[1]
    (data / "log" / entry["file"]).unlink()
    seqs = f"seq {entry['base_seq']}..{entry['end_seq']}"
    with pytest.raises(CorruptSegmentError, match=f"\\({seqs}\\): listed in the manifest but "
                                                  "missing"):
        Ledger.open(data)
    with Ledger.open(data, readonly=True) as reader, pytest.raises(CorruptSegmentError):
        reader.log.read()
    assert_one_line_error(Cli(data)("history"), 2, entry["file"], seqs, "missing")
    code, report = _verify(data)
    assert code == 1 and any("missing" in p and seqs in p for p in report["problems"])


def test_a_checkpoint_that_disagrees_with_the_log_is_found_by_verify(data: Path) -> None:
    with Ledger.open(data, clock=FakeClock()) as led:
        led.queue_append("t", 0)  # a seq no checkpoint holds yet (a listed one is never rewritten)
        seq = led.log.next_seq
        assert seq not in led.log.checkpoints()
        state = led.state  # the state at the log end...
        table = state_to_table(state)
        rows = table.to_pylist()
        position = next(r for r in rows if r["row"] == "position")
        position["committed"] += 7  # ...and one offset off
        rows[-1]["max_offset"] = seq  # keep the cheap open-time invariant (events applied)
        led.log.write_checkpoint(seq, type(table).from_pylist(rows, schema=table.schema))
        name = led.log.checkpoint_path(seq).name
    code, report = _verify(data)
    assert code == 1
    [problem] = report["problems"]
    assert problem.startswith(f"checkpoints/{name} (seq 0..{seq}): disagrees with a replay")
    text = Cli(data)("verify")
    assert text.exit_code == 1 and f"problem: checkpoints/{name}" in text.stdout


def test_a_flipped_byte_in_the_newest_checkpoint_is_refused_on_open(data: Path) -> None:
    with Ledger.open(data) as led:
        seq = led.log.checkpoints()[-1]
        path = led.log.checkpoint_path(seq)
    _flip(path, path.stat().st_size - 30)  # in the footer: no page checksum covers it
    with pytest.raises(CorruptSegmentError, match=f"{path.name} \\(seq 0..{seq}\\): crc32c"):
        Ledger.open(data)
    assert_one_line_error(Cli(data)("progress", "--group", G), 2, path.name, f"seq 0..{seq}")
    code, report = _verify(data)
    assert code == 1 and any(path.name in p for p in report["problems"])


def test_a_checkpoint_of_another_position_is_refused_on_open(data: Path) -> None:
    with Ledger.open(data, clock=FakeClock()) as led:
        older = led.log.checkpoints()[0]
        led.queue_append("t", 0)  # a seq no checkpoint holds yet (a listed one is never rewritten)
        seq = led.log.next_seq
        led.log.write_checkpoint(seq, led.log.read_checkpoint(older))
        name = led.log.checkpoint_path(seq).name
    with pytest.raises(CorruptSegmentError, match=f"{name} \\(seq 0..{seq}\\): holds the state "
                                                  f"after {older} events"):
        Ledger.open(data)
    assert _verify(data)[0] == 1


def test_a_damaged_wal_frame_with_frames_after_it_is_refused_not_cut(data: Path) -> None:
    with Ledger.open(data, clock=FakeClock()) as led:
        for q in range(3):
            led.queue_append(T, q, 1)  # three more frames in the WAL
        base = led.log.segments()[-1].end_seq
        wal = data / "log" / names.wal_name(base)
        end = led.log.next_seq
    _flip(wal, 12)  # inside the first frame's payload
    with pytest.raises(CorruptSegmentError, match=f"{wal.name} \\(seq {base}..\\).*not a torn "
                                                  "last write"):
        Ledger.open(data)
    assert wal.stat().st_size > 12  # nothing was cut
    code, report = _verify(data)
    assert code == 1 and any(wal.name in p and f"seq {base}.." in p for p in report["problems"])
    _flip(wal, 12)
    with Ledger.open(data) as led:
        assert led.log.next_seq == end


def test_a_torn_last_frame_is_cut_on_open_and_verify_only_notes_it(data: Path) -> None:
    with Ledger.open(data, clock=FakeClock()) as led:
        led.queue_append(T, 0, 1)
        acknowledged = led.log.next_seq
        wal = data / "log" / names.wal_name(led.log.segments()[-1].end_seq)
    with open(wal, "ab") as f:  # a crash in the middle of writing the next frame
        f.write(struct.pack("<II", 900, 12345) + b"half a payload")
    code, report = _verify(data)
    assert code == 0 and report["torn_tail_bytes"] == 8 + len(b"half a payload")
    assert any("torn last write" in n for n in report["notes"])
    with Ledger.open(data) as led:
        assert led.log.recovery.bytes_cut > 0 and led.log.next_seq == acknowledged
    code, report = _verify(data)
    assert code == 0 and report["torn_tail_bytes"] == 0


def test_a_view_ahead_of_a_durable_log_is_a_problem(data: Path) -> None:
    """With durability "always" the view is flushed after the log is fsynced: a view that
    saw events the log no longer holds means acknowledged events were lost."""
    with Ledger.open(data, clock=FakeClock()) as led:
        led.queue_append(T, 0, 1)
        wal = data / "log" / names.wal_name(led.log.segments()[-1].end_seq)
    wal.write_bytes(wal.read_bytes()[:-3])
    code, report = _verify(data)
    assert code == 1 and any(wal.name in p and "the view view.duckdb, at seq" in p
                             for p in report["problems"])


def test_a_damaged_manifest_is_refused_by_its_checksum(data: Path) -> None:
    manifest = data / "log" / "MANIFEST"
    text = manifest.read_text()
    entry = _segments(data)[1]
    damaged = text.replace(f'"ts_max": {entry["ts_max"]}', f'"ts_max": {entry["ts_max"] + 1}', 1)
    assert damaged != text
    manifest.write_text(damaged)
    with pytest.raises(CorruptManifestError, match="checksum mismatch"):
        Ledger.open(data)
    assert_one_line_error(Cli(data)("progress", "--group", G), 2, "MANIFEST", "checksum")
    code, report = _verify(data)
    assert code == 1 and "MANIFEST" in report["problems"][0]


def test_verify_of_a_missing_ledger_is_one_line_exit_2(tmp_path: Path) -> None:
    assert_one_line_error(Cli(tmp_path / "none")("verify"), 2, "no ledger at")
