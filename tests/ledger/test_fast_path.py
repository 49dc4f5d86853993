"""The hot path for commits and pulls (State.fast_commit / fast_pull) writes exactly the events
the general rules write, and the per-command executor takes it for most lines."""

from __future__ import annotations

import pytest

import ledger.executor.batch as executor
from bench.workload import generate
from ledger import Ledger
from ledger.fold.state import State
from tests.support.clock import FakeClock


def _log(root, cmds, monkeypatch, fast: bool):
    taken = []
    monkeypatch.setattr(executor, "COLUMN_MIN", 10**9)  # every batch per command
    for name in ("fast_commit", "fast_pull"):
        real = getattr(State, name)

        def counting(self, *args, _real=real, **kw):
            r = _real(self, *args, **kw) if fast else None
            taken.append(r is not None)
            return r

        monkeypatch.setattr(State, name, counting)
    with Ledger.open(root, clock=FakeClock(), segment_events_max=5_000) as led:
        results = list(led.apply(cmds))
        log = led.log.read()
    monkeypatch.undo()
    assert (sum(taken) > len(cmds) // 2) is fast  # most commands take the hot path, or none
    return results, log


@pytest.mark.parametrize("seed", [1, 2])
def test_fast_path_writes_the_same_events_and_results_as_the_general_path(tmp_path, monkeypatch,
                                                                          seed):
    cmds = list(generate(20_000, seed=seed, groups=6, topics=2, queues=3))
    fast_results, fast_log = _log(tmp_path / "fast", cmds, monkeypatch, fast=True)
    slow_results, slow_log = _log(tmp_path / "slow", cmds, monkeypatch, fast=False)
    assert fast_results == slow_results
    assert fast_log.equals(slow_log)
    kinds = set(fast_log.column("kind").to_pylist())
    assert {"commit", "pull", "initial"} <= kinds
