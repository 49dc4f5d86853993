"""A writer that closes while the segment its last append filled still seals: the checkpoint at
the log's end is taken beside the seal, not after it (a CLI's `apply` waited for the two one
after the other), once; and one whose file could not be written is written again by the close."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import ledger.store.writer as writer_module
from ledger import Commit, Ledger
from storage import checkpoints
from storage.log import SegmentedLog
from tests.support.clock import FakeClock

EVENTS = 2_000


def _filled(root: Path) -> Ledger:
    """A ledger whose last append filled a segment: its seal runs when the caller closes."""
    led = Ledger.open(root, clock=FakeClock(), segment_events_max=EVENTS)
    led.submit([Commit(group="g", topic="t", queue_id=i % 4, offset=i // 4 + 1)
                for i in range(EVENTS)])
    assert led.writer.log.sealing  # (else the test would prove nothing)
    return led


def _at_settle(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int | None, int]]:
    """(newest checkpoint, next seq) each time the log lists a running seal."""
    seen: list[tuple[int | None, int]] = []
    settle = SegmentedLog.settle

    def spy(self: SegmentedLog) -> Any:
        seen.append((self.newest_checkpoint_seq(), self.next_seq))
        return settle(self)

    monkeypatch.setattr(SegmentedLog, "settle", spy)
    return seen


def test_the_checkpoint_at_close_is_taken_while_the_seal_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    led = _filled(tmp_path)
    seen = _at_settle(monkeypatch)
    built: list[int] = []
    build = writer_module.state_to_table

    def counted(state: Any) -> Any:
        built.append(1)
        return build(state)

    monkeypatch.setattr(writer_module, "state_to_table", counted)
    led.close()
    assert seen and seen[0] == (EVENTS, EVENTS)  # started before the seal was listed
    assert built == [1]  # and its state not built again after it
    monkeypatch.undo()
    with Ledger.open(tmp_path, clock=FakeClock()) as again:
        assert again.writer.log.checkpoints()[-1] == EVENTS
        assert [s.events for s in again.writer.log.segments()] == [EVENTS]
        assert [again.committed("g", "t", q) for q in range(4)] == [EVENTS // 4] * 4


def test_a_checkpoint_that_failed_beside_the_seal_is_written_by_the_close(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    led = _filled(tmp_path)
    calls: list[int] = []
    write = checkpoints.write_checkpoint_file

    def first_fails(segments: Any, settings: Any, path: Path, table: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return write(segments, settings, path, table)

    monkeypatch.setattr(checkpoints, "write_checkpoint_file", first_fails)
    with caplog.at_level(logging.WARNING):
        led.close()
    assert len(calls) == 2
    assert "No space left on device" in caplog.text
    monkeypatch.undo()
    with Ledger.open(tmp_path, clock=FakeClock()) as again:
        assert again.writer.log.checkpoints()[-1] == EVENTS
