"""The column path's time rule: a run folds column-wise only while each line's ledger time
(max of its ts and the ledger's time at the run's start) never goes back, and only lines that
can write no event (those that could not be decoded) are left out of that order: the log's
ts never goes backwards, whichever lines of a run fold per command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest

import ledger.executor.columnar as columnar
from ledger import Ledger
from ledger.executor.batch import COLUMN_MIN
from tests.support.clock import T0, FakeClock

N = COLUMN_MIN + 1000  # above the column path's minimum


def _commits(n: int) -> list[dict]:
    return [{"op": "commit", "group": f"g{i % 40}", "topic": "t", "queue_id": i % 4,
             "offset": i + 1} for i in range(n)]


def test_a_denied_reset_among_lines_timed_ahead_keeps_the_logs_time_in_order(
        tmp_path: Path) -> None:
    """A reset its sender may not make is recorded (`reset_refused`) at the ledger's time when
    it runs, though its row of the column table has no op: it must not be stamped before the
    lines ahead of the clock that come before it."""
    ahead = T0 + 5_000  # within the clock skew
    before, after = _commits(1000), _commits(N)
    commands = [*({**c, "ts": ahead} for c in before),
                {"op": "reset", "group": "g1", "topic": "t", "to_earliest": True,
                 "execute": True},
                *({**c, "ts": ahead} for c in after)]
    denied = [*([None] * len(before)), "role: may not reset", *([None] * len(after))]
    with Ledger.open(tmp_path, clock=FakeClock(T0)) as led:
        results = led.submit(commands, denied=denied)
        assert results[len(before)].error is not None
        log = led.log.read()
    refused = log.filter(pc.equal(log.column("kind"), "reset_refused"))
    assert refused.num_rows == 1 and refused.column("ts")[0].as_py() == ahead
    assert np.all(np.diff(log.column("ts").to_numpy()) >= 0)


def test_a_line_that_could_not_be_decoded_does_not_stop_the_column_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An undecodable line (no time of its own: the clock's, behind the others' given times)
    writes nothing, so it does not count in the run's time order."""
    whole_runs: list[int] = []
    real = columnar._per_command

    def per_command(job: Any, batch: Any, line_base: int) -> Any:
        whole_runs.append(batch.num_rows)
        return real(job, batch, line_base)

    monkeypatch.setattr(columnar, "_per_command", per_command)
    lines = [{**c, "ts": T0 + 10_000 + i} for i, c in enumerate(_commits(N))]
    lines[100] = {"op": "commit", "group": "g1"}  # no topic: an error
    with Ledger.open(tmp_path / "a", clock=FakeClock(T0 + 20_000)) as led:
        results = led.submit(lines)
        log = led.log.read()
    assert results[100].error is not None
    assert sum(r.error is None for r in results) == N - 1
    assert np.all(np.diff(log.column("ts").to_numpy()) >= 0)
    assert whole_runs == []  # no run went per command as a whole


class _TickingClock(FakeClock):
    """A clock one millisecond later at every reading (a run takes time)."""

    def __call__(self) -> int:
        self.now += 1
        return self.now


def test_a_denied_reset_inside_a_column_run_takes_the_runs_time(tmp_path: Path) -> None:
    """Lines without a time of their own take the run's; a denied reset among them is recorded
    at that time too, not at a later reading of the clock (the lines after it would then be
    stamped before it)."""
    commands = [*_commits(1000), {"op": "reset", "group": "g1", "topic": "t",
                                  "to_earliest": True, "execute": True}, *_commits(N)]
    denied = [*([None] * 1000), "role: may not reset", *([None] * N)]
    with Ledger.open(tmp_path, clock=_TickingClock(T0)) as led:
        led.submit(commands, denied=denied)
        log = led.log.read()
    assert log.filter(pc.equal(log.column("kind"), "reset_refused")).num_rows == 1
    assert np.all(np.diff(log.column("ts").to_numpy()) >= 0)
