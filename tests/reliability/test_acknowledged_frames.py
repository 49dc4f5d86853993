"""A damaged WAL frame that something proves acknowledged is corruption: a writer open refuses it,
naming the file and seq, and never cuts it as a torn tail; `verify` says the same. The proofs
(DESIGN.md, Security rules): an intact frame after it, and under durability "always" a checkpoint
or the view holding its seqs. Only a torn tail that nothing proves acknowledged is cut."""

from __future__ import annotations

import struct
from pathlib import Path

from ledger import Ledger
from storage import names
from tests.reliability.helpers import G, T
from tests.reliability.helpers import flip_byte as _flip
from tests.reliability.helpers import verify_json as _verify
from tests.support.cli import Cli, assert_one_line_error
from tests.support.clock import FakeClock


def _frame_starts(wal: Path) -> list[int]:
    data = wal.read_bytes()
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        pos += 8 + struct.unpack_from("<I", data, pos)[0]
    return starts


def _ledger(root: Path, **settings: object) -> tuple[Path, list[int]]:
    """Appends and commits, one WAL frame each; returns the WAL and the first seq of each frame."""
    firsts = []
    with Ledger.open(root, clock=FakeClock(), **settings) as led:
        led.group_set(G, initial="earliest")
        led.queue_append(T, 0, 1000)
        for offset in range(10, 90, 10):
            firsts.append(led.log.next_seq)
            assert led.commit(G, T, 0, offset).accepted
        wal = root / "log" / names.wal_name(led.log.segments()[-1].end_seq
                                             if led.log.segments() else 0)
    assert len(_frame_starts(wal)) >= len(firsts)
    return wal, firsts


def _committed(root: Path) -> int:
    return Cli(root).json("progress", "--group", G)[0]["committed_offset"]


def test_a_flipped_byte_in_the_last_frame_that_the_view_holds_is_refused_not_cut(
    tmp_path: Path,
) -> None:
    """The issue's first reproduction: `verify` shows the view at the log end, one byte of the
    last frame flipped; the next writer open cut it as a torn tail and accepted a lower commit."""
    root = tmp_path / "data"
    wal, firsts = _ledger(root)
    code, report = _verify(root)
    assert code == 0 and report["view_checked"] and report["view_position"] == report["next_seq"]
    size = wal.stat().st_size
    _flip(wal, size - 5)  # inside the last frame's payload
    code, report = _verify(root)
    assert code == 1, report
    assert any(wal.name in p and f"seq {firsts[-1]}.." in p
               and f"acknowledged (the view view.duckdb, at seq {firsts[-1] + 1}" in p
               for p in report["problems"]), report["problems"]
    # a writer (any change) refuses to open: exit 2, one line naming the file and the seq
    refused = Cli(root)("commit", "--group", G, "--topic", T, "--queue", "0", "--offset", "75")
    assert_one_line_error(refused, 2, wal.name, f"seq {firsts[-1]}..", "not a torn last write")
    assert wal.stat().st_size == size  # nothing cut
    _flip(wal, size - 5)
    assert _committed(root) == 80
    assert _verify(root)[0] == 0


def test_a_damaged_length_field_is_refused_when_intact_frames_follow(tmp_path: Path) -> None:
    """The issue's second reproduction: under durability "batch" (a view or a checkpoint ahead of
    the log proves nothing there) `verify` said 0 problems and the next open cut every frame
    after a frame whose length field was damaged: the intact frames after it prove it."""
    root = tmp_path / "data"
    wal, firsts = _ledger(root, durability="batch")
    starts = _frame_starts(wal)
    damaged = starts[-4]  # three frames after it
    _flip(wal, damaged + 2, 0x40)  # the length now runs past the end of the file
    assert struct.unpack_from("<I", wal.read_bytes(), damaged)[0] > wal.stat().st_size
    code, report = _verify(root)
    assert code == 1, report
    problem = next(p for p in report["problems"] if wal.name in p)
    assert "an intact frame follows" in problem and "not a torn last write" in problem
    size = wal.stat().st_size
    refused = Cli(root)("commit", "--group", G, "--topic", T, "--queue", "0", "--offset", "85")
    assert_one_line_error(refused, 2, wal.name, f"seq {firsts[-4]}..", "an intact frame follows",
                          f"discard seq {firsts[-4]} onwards")
    assert wal.stat().st_size == size
    _flip(wal, damaged + 2, 0x40)
    assert _committed(root) == 80 and _verify(root)[0] == 0


def test_a_checkpoint_holding_a_damaged_last_frame_proves_it_acknowledged(tmp_path: Path) -> None:
    """Durability "always", a checkpoint after every append and no view file: the checkpoint at
    the log end holds the last frame's seqs, so a damaged last frame is refused."""
    root = tmp_path / "data"
    wal, firsts = _ledger(root, checkpoint_interval_events=1)
    (root / "view.duckdb").unlink()
    size = wal.stat().st_size
    _flip(wal, size - 5)
    code, report = _verify(root)
    assert code == 1 and any(wal.name in p and "the checkpoint at seq" in p
                             for p in report["problems"]), report["problems"]
    refused = Cli(root)("commit", "--group", G, "--topic", T, "--queue", "0", "--offset", "75")
    assert_one_line_error(refused, 2, wal.name, f"seq {firsts[-1]}..", "the checkpoint at seq")
    assert wal.stat().st_size == size


def test_a_torn_last_frame_that_nothing_proves_is_still_cut(tmp_path: Path) -> None:
    """A crash in the middle of the last write, before anything derived saw it: the view is at
    the frame's first seq, so it was never acknowledged; verify notes it, a writer cuts it."""
    root = tmp_path / "data"
    wal, _ = _ledger(root)
    with open(wal, "ab") as f:
        f.write(struct.pack("<II", 900, 12345) + b"\xff\xff\xff\xff half a payload")
    code, report = _verify(root)
    assert code == 0 and report["torn_tail_bytes"] > 0
    r = Cli(root)("commit", "--group", G, "--topic", T, "--queue", "0", "--offset", "90")
    assert r.exit_code == 0, r.stderr
    assert _committed(root) == 90
    code, report = _verify(root)
    assert code == 0 and report["torn_tail_bytes"] == 0
