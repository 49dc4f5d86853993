"""A data directory written before issue 22 (segments sealed in seq order, prev_offset of
commits and pulls not stored: tests/fixtures/legacy_seq_order, built with main's code at the
start of the branch) opens and answers what that code answered, read-only and as a writer, and
keeps answering it for its old events after today's code appends to it and its segments are
compacted into the clustered layout (prev_offset still derived for the old events only)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ledger import Ledger
from ledger.store import settings as settings_mod
from tests.fixtures.legacy_seq_order import build
from tests.support.clock import FakeClock
from tests.support.compacting import compact_in_place


def _json(doc: Any) -> Any:
    return json.loads(json.dumps(doc))


@pytest.fixture
def legacy(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    root = tmp_path / "data"
    shutil.copytree(build.DATA, root)
    return root, json.loads(build.ANSWERS.read_text())


def _assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    for section in ("history", "state_at", "lag", "export", "sql"):
        for name, rows in want[section].items():
            assert got[section][name] == rows, (section, name)


def test_a_reader_answers_what_the_old_code_answered(legacy):
    root, want = legacy
    clock = FakeClock(want["times"][-2])
    with Ledger.open(root, clock=clock, readonly=True) as led:
        assert led.writer.prev_offset_stored_from is None  # no writer of today opened it
        _assert_same(_json(build.answers(led, want["times"])), want)
    assert not (root / "view.duckdb").exists()  # a reader writes nothing


def test_a_writer_answers_the_same_and_appends_events_that_store_prev_offset(legacy):
    root, want = legacy
    clock = FakeClock(want["times"][-2])
    with Ledger.open(root, clock=clock) as led:
        end = led.log.next_seq
        assert led.writer.prev_offset_stored_from == end
        assert settings_mod.load(root).prev_offset_stored_from_seq == end
        _assert_same(_json(build.answers(led, want["times"])), want)
        position = led.state.positions[("g1", "t1", 0)]
        pulled_before, committed_before = position.pulled, position.committed
        clock.advance(60_000)
        led.queue_append("t1", 0, count=50)
        pulled = led.pull("g1", "t1", 0, client="c1", max_count=8)
        led.commit("g1", "t1", 0, pulled.next_offset + 8, client="c1")
        led.log.roll()  # old WAL rows and new ones sealed into one segment
        assert compact_in_place(led) >= 2  # old seq-ordered segments merged, clustered
    with Ledger.open(root, clock=clock) as led:
        assert led.writer.prev_offset_stored_from == end  # recorded once
        new = led.history(group="g1", since_ms=clock.now).to_pylist()
        assert [(e["kind"], e["prev_offset"]) for e in new] == [
            ("pull", pulled_before), ("commit", committed_before)]
        raw = led.log.read(seq_gte=end).to_pylist()
        assert [e["prev_offset"] for e in raw if e["kind"] in ("pull", "commit")] == [
            pulled_before, committed_before]  # stored, not derived
        got = _json(build.answers(led, want["times"]))
    # every answer about the old events is unchanged; whole-history answers gained the new ones
    for name, rows in want["history"].items():
        if "-" in name:  # a time window of the old events
            assert got["history"][name] == rows, name
        elif "newest" not in name and "limit" not in name:
            assert got["history"][name][:len(rows)] == rows, name
    for name, rows in want["sql"].items():
        assert got["sql"][name][:len(rows)] == rows, name
    for name, rows in want["state_at"].items():
        if int(name.split("/")[0]) < clock.now - 60_000:
            assert got["state_at"][name] == rows, name
    for name, doc in want["lag"].items():
        if int(name.split("/")[0]) < clock.now - 60_000:
            assert got["lag"][name] == doc, name
