"""SIGKILL `offset-ledger apply` 25 times (the nightly runs 200: `python
tests/tools/crash_harness.py --kills 200`): no acknowledged event lost, none invented or
reordered, the view a replay of the log, and the ledger writable after every kill. Plus checks
that the harness itself catches what it is there to catch."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from ledger import Ledger
from tests.tools.crash_harness import (
    Config,
    HarnessFailure,
    Reference,
    RunResult,
    Stats,
    build_stream,
    check_acks,
    check_log,
    check_view_file,
    reference_run,
    run,
)

KILLS = 25
SEED = 20251122


def test_25_sigkills_lose_no_acknowledged_event(tmp_path: Path) -> None:
    stats = run(Config(kills=KILLS, seed=SEED, commands_per_round=12_000,
                       workdir=tmp_path / "harness"))
    assert stats.kills == KILLS
    assert stats.events_lost == 0 and stats.events_invented == 0
    assert stats.commands_acknowledged > 1000 and stats.events_acknowledged > 1000
    assert stats.reader_checks == KILLS and stats.writer_checks >= KILLS // 2
    assert stats.verify_runs >= KILLS // 2
    assert stats.view_file_checks == KILLS  # the view file as each kill left it
    assert {"time", "targeted"} <= set(stats.kills_by_mode)


def _reference(events_per_command: list[int]) -> Reference:
    """A made-up stream of commits; command i commits offset i with its last event."""
    cum = [0]
    for n in events_per_command:
        cum.append(cum[-1] + n)
    offsets = [i for i, n in enumerate(events_per_command) for _ in range(n)]
    events = pa.table({"seq": list(range(cum[-1])), "kind": ["commit"] * cum[-1],
                       "consumer_group": ["g"] * cum[-1], "topic": ["t"] * cum[-1],
                       "queue_id": [0] * cum[-1], "offset": offsets})
    commands = [{"op": "commit", "group": "g", "topic": "t", "queue_id": 0, "offset": i}
                for i in range(len(events_per_command))]
    lines = [b'{"op":"commit"}\n'] * len(events_per_command)
    results = [{"op": "commit", "seq": cum[i + 1] - 1} if n else {"op": "commit", "error": "x"}
               for i, n in enumerate(events_per_command)]
    return Reference(lines, commands, results, cum, events)


def test_the_harness_catches_a_lost_event_a_torn_command_and_an_invented_one() -> None:
    ref = _reference([1, 2, 0, 1])  # command 1 has two events (seqs 1, 2)
    stats = Stats()
    # resume at command 2: event-less, so sent again (it appends nothing either way)
    assert check_log(ref.events.slice(0, 3), ref, 1, "ok", stats) == 2
    assert check_log(ref.events.slice(0, 3), ref, 3, "ok", stats) == 3  # acknowledged: not resent
    with pytest.raises(HarnessFailure, match="acknowledged events lost"):
        check_log(ref.events.slice(0, 1), ref, 2, "lost", stats)
    with pytest.raises(HarnessFailure, match="inside the events of command 1"):
        check_log(ref.events.slice(0, 2), ref, 1, "torn", stats)
    changed = ref.events.set_column(1, "kind", pa.array(["commit", "reset", "commit", "commit"]))
    changed = changed.slice(0, 3)
    with pytest.raises(HarnessFailure, match="not a prefix"):
        check_log(changed, ref, 0, "invented", stats)
    assert stats.events_lost == 2  # commands 0 and 1 hold 3 events, the log 1


def test_the_harness_checks_each_acknowledgement_against_the_reference() -> None:
    ref = _reference([1, 1])
    good = RunResult("time", 0, 2, [{"line": 1, **ref.results[0]}], True, -9, "", None, None)
    assert check_acks(good, ref, "ok") == 1
    wrong = RunResult("time", 0, 2, [{"line": 1, "op": "commit", "seq": 7}], True, -9, "", None,
                      None)
    with pytest.raises(HarnessFailure, match="acknowledged as"):
        check_acks(wrong, ref, "wrong")
    ref.events = ref.events.set_column(5, "offset", pa.array([0, 9]))  # the event disagrees
    with pytest.raises(HarnessFailure, match="whose offset is 9, not 1"):
        check_acks(RunResult("time", 1, 1, [{"line": 1, **ref.results[1]}], True, -9, "", None,
                             None), ref, "mismatch")


def test_the_harness_checks_the_view_file_as_a_kill_left_it(tmp_path: Path) -> None:
    """A view at the log end passes; a view past the log end, or whose rows are not the
    model's state at its position, fails, before any writer could rebuild it."""
    lines = build_stream(400, seed=3)
    ref = reference_run(lines)
    data = tmp_path / "data"
    with Ledger.open(data) as led:
        assert sum(1 for _ in led.apply(json.loads(x) for x in lines)) == len(lines)
        end = led.log.next_seq
    assert end == ref.cum[-1]
    stats = Stats()
    check_view_file(data, ref, end, stats, "ok")
    assert stats.view_file_checks == 1
    with pytest.raises(HarnessFailure, match="past the log end"):
        check_view_file(data, ref, end - 1, stats, "short log")
    with duckdb.connect(str(data / "view.duckdb")) as con:
        con.execute("UPDATE offsets SET committed_offset = committed_offset + 1 "
                    "WHERE rowid = (SELECT min(rowid) FROM offsets)")
    with pytest.raises(HarnessFailure, match="view table offsets differs from the reference"):
        check_view_file(data, ref, end, stats, "changed row")
