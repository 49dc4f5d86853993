"""Burrow's evaluator cases, each built as a real ledger through `apply` lines with `ts` and
judged by `offset-ledger lag --at`: the ledger reproduces every lag Burrow's table holds, and
gives Burrow's status except where `burrow_cases` says why not."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger import Ledger
from ledger.lag.health import ERR, HealthSettings, queue_status
from tests.ledger.burrow_cases import CASES, BurrowCase
from tests.support.cli import Cli
from tests.support.clock import FakeClock

G, T = "burrow", "topic"
GROUP_OF = {"OK": "OK", "WARN": "WARN", "STOP": ERR, "STALL": ERR, "REWIND": ERR}


def build(case: BurrowCase, root: Path) -> None:
    """Appends up to offset + lag before each entry (store time = its ts), then the commit (or
    the sync, for a move backwards), then the appends after the last entry."""
    clock = FakeClock(0)
    max_offset = 0
    with Ledger.open(root, backfill=True, clock=clock) as led:
        for i, (ts, offset, lag) in enumerate(case.entries):
            lines = []
            if offset + lag > max_offset:
                lines.append({"op": "queue_append", "topic": T, "queue_id": 0,
                              "count": offset + lag - max_offset, "store_time": ts, "ts": ts})
                max_offset = offset + lag
            if i not in case.sync_entries:
                lines.append({"op": "commit", "group": G, "topic": T, "queue_id": 0,
                              "offset": offset, "ts": ts})
            assert all("error" not in r for r in led.apply(lines))
            if i in case.sync_entries:
                clock.now = ts
                assert led.sync([(G, T, 0, offset)], source="broker")
        lines = []
        for ts, target in case.appends_after:
            lines.append({"op": "queue_append", "topic": T, "queue_id": 0,
                          "count": target - max_offset, "store_time": ts, "ts": ts})
            max_offset = target
        assert all("error" not in r for r in led.apply(lines))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"burrow-{c.number}")
def test_burrow_case_built_as_a_ledger(tmp_path: Path, case: BurrowCase) -> None:
    build(case, tmp_path / "data")
    doc = Cli(tmp_path / "data").json(
        "lag", "--at", str(case.now_s * 1000), "--window", str(len(case.entries)),
        "--allowed-lag", str(case.allowed_lag))
    assert len(doc) == 1 and doc[0]["consumer_group"] == G
    (queue,) = doc[0]["queues"]
    assert [(e["ts"], e["offset"], e["lag"]) for e in queue["window"]] == list(case.entries)
    assert queue["lag"] == case.current_lag
    assert queue["complete"] == 1.0
    assert queue["status"] == case.ledger, case.about
    assert doc[0]["status"] == GROUP_OF[case.ledger]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"burrow-{c.number}")
def test_burrow_case_through_the_pure_evaluator(case: BurrowCase) -> None:
    """The same judgement from the data alone; a status that differs from Burrow's says why."""
    entries = list(case.entries)
    last = case.entries[-1]
    # the queue moved past the last commit at it (lag then) or at the first append after it
    moved = last[0] if last[2] > 0 else (case.appends_after[0][0] if case.appends_after else None)
    status = queue_status(entries, case.current_lag, case.now_s * 1000,
                          HealthSettings(len(entries), case.allowed_lag), moved)
    assert status == case.ledger
    assert case.ledger == case.burrow or case.note, f"case {case.number} differs unexplained"
