"""Bugs the crash, fault and fuzz runs found, each pinned by the smallest test that shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger import Ledger
from tests.reliability.helpers import assert_view_is_a_replay
from tests.support.cli import Cli
from tests.support.clock import FakeClock
from tests.support.faults import Crash, FaultyFS
from tests.tools.crash_harness import decoded_commands

T0 = 1_700_000_000_000


def _crash_on_seal(op: str, path: Path) -> None:
    """The process dies as it starts writing a segment's Parquet file."""
    if op == "open_write" and path.name.endswith(".parquet.tmp"):
        raise Crash(path)


def test_a_crash_in_the_seal_after_an_append_never_leaves_half_a_command(tmp_path: Path) -> None:
    """A first pull writes two events (initial, pull). The log used to split an append at the
    segment limit into frames with a seal between them, so a crash in that seal left `initial`
    without its `pull`: half of an unacknowledged command in the audit log."""
    root, fs = tmp_path / "data", FaultyFS()
    led = Ledger.open(root, fs=fs, segment_events_max=3, clock=FakeClock(T0))
    led.queue_append("t", 0, 100)
    led.group_set("g", initial="earliest")
    fs.on_step = _crash_on_seal
    with pytest.raises(Crash):
        list(led.apply([{"op": "pull", "group": "g", "topic": "t", "queue_id": 0,
                         "client": "c1", "ts": T0 + 1}]))
        led.log.settle()  # the ledger seals in the background: its crash surfaces here
    led.log._abandon()
    led.view.close()
    events = assert_view_is_a_replay(root)
    kinds = events.column("kind").to_pylist()
    assert kinds in (["queue_append", "group_config"],
                     ["queue_append", "group_config", "initial", "pull"])


def test_apply_plans_a_reset_at_the_line_ts_not_the_wall_clock(tmp_path: Path) -> None:
    """`ts` is the ledger clock of an apply line; a reset planned at the wall clock found every
    client of a broadcast group expired ("no committed offset") while a replay found offsets."""
    lines = [
        {"op": "group_set", "group": "b", "mode": "broadcast", "initial": "earliest",
         "client_timeout": "PT10M", "ts": T0},
        {"op": "queue_append", "topic": "t", "queue_id": 0, "count": 100, "ts": T0},
        {"op": "pull", "group": "b", "topic": "t", "queue_id": 0, "client": "c1", "ts": T0 + 1},
        {"op": "commit", "group": "b", "topic": "t", "queue_id": 0, "client": "c1",
         "offset": 30, "ts": T0 + 2},
        {"op": "reset", "group": "b", "topic": "t", "queue_id": 0, "shift_by": -10,
         "execute": True, "ts": T0 + 3},
    ]
    raw = [json.dumps(x).encode() + b"\n" for x in lines]
    outcomes = []
    for name, now in (("at_ts", T0 + 3), ("a_year_later", T0 + 365 * 86_400_000)):
        with Ledger.open(tmp_path / name, clock=FakeClock(now)) as led:
            results = list(led.apply(decoded_commands(raw)))
            outcomes.append((results[-1], led.log.read().drop_columns(["seq"])))
    (reset_now, events_now), (reset_later, events_later) = outcomes
    assert reset_now["plan"][0]["to_offset"] == 20 and "error" not in reset_later
    assert reset_later == reset_now and events_later.equals(events_now)


def test_a_time_past_year_9999_is_refused_instead_of_breaking_every_later_read(
    tmp_path: Path,
) -> None:
    """A ts of 10**17 ms used to be accepted; `history` then failed with an internal error
    (exit 3) on every later call because the ISO form of that time does not exist."""
    cli = Cli(tmp_path / "data")
    lines = [{"op": "queue_append", "topic": "t", "queue_id": 0, "ts": 10**17},
             {"op": "queue_append", "topic": "t", "queue_id": 0, "ts": 253_402_300_799_999}]
    r = cli("apply", "-", "--backfill", "--json",  # the last instant is far in the future
            input="".join(json.dumps(x) + "\n" for x in lines))
    first, second = (json.loads(x) for x in r.stdout.splitlines())
    assert "out of range" in first["error"] and second["seq"] == 0
    r = cli("history", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)[0]["ts"] == "9999-12-31T23:59:59.999Z"


@pytest.mark.parametrize("batch", [2, 4096], ids=["per-command", "column-wise"])
def test_an_append_past_the_largest_offset_is_refused_not_a_broken_writer(
        tmp_path: Path, batch: int) -> None:
    """A queue whose MaxOffset a tool set near 2**63 (queue_bounds) took an append past int64:
    the state's offset array overflowed, the writer became unusable and, in the server, the
    whole group-commit batch of every client failed. It is bad input of that one command."""
    from ledger.commands.command import QueueAppend
    from ledger.limits import OFFSET_MAX

    led = Ledger.open(tmp_path / "data", clock=FakeClock(T0))
    led.queue_bounds("t", 0, max_offset=OFFSET_MAX - 1)
    results = led.submit_decoded([QueueAppend(topic="t", queue_id=0, count=1)] * batch
                                 + [QueueAppend(topic="t", queue_id=1, count=5)])
    assert results[0].error is None and results[-1].error is None
    assert all("would pass the largest offset" in (r.error or "") for r in results[1:-1])
    assert led.writer.unusable is None
    led.close()
    with Ledger.open(tmp_path / "data", readonly=True) as reader:
        assert [q["max_offset"] for q in reader.queues()] == [OFFSET_MAX, 5]
