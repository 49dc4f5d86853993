"""Spark replay equals the DuckDB state-at query (Ledger.state_at) on random ledgers."""

from __future__ import annotations

import json
import random

import pytest

from cli import invoke
from ledger import HistoryUnavailable, Ledger
from spark_compaction import compact, replay
from tests.spark.conftest import random_ledger
from tests.support.clock import T0, FakeClock

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replay_equals_state_at_on_random_ledgers(spark, tmp_path, seed):
    root = tmp_path / "data"
    clock, times = random_ledger(root, seed=seed, commands=260)
    rng = random.Random(seed)
    with Ledger.open(root, clock=clock) as led:
        end = led.log.next_seq
        at_times = [*rng.sample(times, 2), times[-1] + 3_600_000]
        if seed == 1:
            at_times.append(T0 - 1)  # before the first event: empty
        for ts in at_times:
            assert replay(root, at_ts=ts) == led.state_at(ts=ts).to_pylist(), f"seed {seed} ts {ts}"
        seq = rng.randrange(1, end)
        assert replay(root, at_seq=seq) == led.state_at(seq=seq).to_pylist(), (seed, seq)
        group = rng.choice(["g1", "g2", "gb"])
        ts = rng.choice(times)
        assert replay(root, at_ts=ts, group=group) == led.state_at(
            ts=ts, group=group).to_pylist()
    assert any(replay(root, at_ts=t) for t in at_times)  # the ledgers are not empty


def test_replay_is_the_same_after_compaction_and_log_retention(spark, tmp_path):
    root = tmp_path / "data"
    clock, times = random_ledger(root, seed=9, commands=300)
    probe = times[200]
    compact(root, target_events=400, target_bytes=10**9, row_group_events=32)
    with Ledger.open(root, clock=clock) as led:
        assert replay(root, at_ts=probe) == led.state_at(ts=probe).to_pylist()
        clock.advance(10 * 24 * 3_600_000)
        led.retention(log_retention_ms=3_600_000)  # expires every offset, retires the segments
        assert led.log.start_seq > 0
        before = times[-1]  # retired: the offset expiries after it are in the checkpoint
        with pytest.raises(HistoryUnavailable, match="earliest time still answerable"):
            led.state_at(ts=before)
        with pytest.raises(HistoryUnavailable, match="earliest time still answerable"):
            replay(root, at_ts=before)
        late = led.now_ms()
        assert replay(root, at_ts=late) == led.state_at(ts=late).to_pylist() == []


def test_cli_replay_prints_what_at_prints(spark, tmp_path, capsys):
    root = tmp_path / "data"
    _, times = random_ledger(root, seed=4, commands=200)
    for when in (str(times[120]), str(times[-1] + 1)):
        assert invoke(["--data-dir", str(root), "at", when, "--json"]) == 0
        expected = json.loads(capsys.readouterr().out)
        assert invoke(["--data-dir", str(root), "replay", "--at", when, "--json"]) == 0
        out = capsys.readouterr().out
        assert json.loads(out) == expected and expected
    assert invoke(["--data-dir", str(root), "replay", "--json"]) == 2
    assert "exactly one of --at TIME or --seq N" in capsys.readouterr().err


def test_replay_reads_each_event_in_the_mode_its_group_had_then(spark, tmp_path):
    """c1 committed while the group was clustering (the group's own offset), c2 after it turned
    broadcast (a client offset): the group's offset is c2's, not the minimum of both."""
    root = tmp_path / "data"
    clock = FakeClock()
    with Ledger.open(root, clock=clock) as led:
        led.queue_append("t", 0, 100)
        led.group_set("g", initial="earliest")
        led.pull("g", "t", 0, client="c1")
        assert led.commit("g", "t", 0, 30, client="c1").accepted
        clock.advance(10)
        led.group_set("g", mode="broadcast")
        led.pull("g", "t", 0, client="c2")
        assert led.commit("g", "t", 0, 40, client="c2").accepted
        clock.advance(10)
        expected = led.state_at(ts=clock.now).to_pylist()
    assert [r["committed_offset"] for r in expected] == [40]
    assert replay(root, at_ts=clock.now) == expected
