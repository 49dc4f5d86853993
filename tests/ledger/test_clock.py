"""The clock rule folds alike on both paths: a batch folded column-wise refuses exactly the
lines, with exactly the messages, that the per-command fold refuses, and a per-sender
backfill flag is honoured by both."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger import Ledger
from tests.ledger.test_columnar import _count_folds
from tests.support.clock import T0, FakeClock

HOUR = 3_600_000
KEYS = [(f"g{g}", q) for g in range(7) for q in range(3)]


def _lines(n: int) -> list[dict]:
    """Queues, groups and a first pull per key, then commits that climb (the common case the
    vector path takes), every 500th of them an hour ahead of the clock."""
    head: list[dict] = [{"op": "queue_append", "topic": "t", "queue_id": q, "count": 10**6,
                         "ts": T0} for q in range(3)]
    head += [{"op": "group_set", "group": f"g{g}", "initial": "earliest", "ts": T0}
             for g in range(7)]
    head += [{"op": "pull", "group": g, "topic": "t", "queue_id": q, "client": "c", "ts": T0}
             for g, q in KEYS]
    body = [{"op": "commit", "group": KEYS[i % len(KEYS)][0], "topic": "t",
             "queue_id": KEYS[i % len(KEYS)][1], "client": "c", "offset": i + 1,
             "ts": T0 + i + (HOUR if i % 500 == 499 else 0)} for i in range(n)]
    return head + body


@pytest.mark.parametrize("backfill", [False, True], ids=["refused", "backfilled"])
def test_column_wise_and_per_command_refuse_the_same_future_lines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backfill: bool) -> None:
    head, lines = 31, _lines(3000)
    flags = [backfill and i % 1000 == head + 499 for i in range(len(lines))]
    folded = _count_folds(monkeypatch)
    out = []
    for name, batch in (("columns", len(lines)), ("per_command", 100)):
        with Ledger.open(tmp_path / name, clock=FakeClock()) as led:
            results = []
            for lo in range(0, len(lines), batch):  # batches under 2048 fold per command
                results += led.submit(lines[lo:lo + batch], backfill=flags[lo:lo + batch])
            out.append(([r.error for r in results], led.log.read().to_pylist()))
    if not backfill:  # (a backfilled time out of order sends its run per command)
        assert sum(v for v, _ in folded) > 2000, folded  # the commits went column-wise
    (errors, events), (errors_again, events_again) = out
    assert errors == errors_again and events == events_again
    refused = [i for i, e in enumerate(errors) if e is not None]
    assert refused == [i for i in range(head + 499, len(lines), 500) if not flags[i]]
    assert all("more than clock_skew_ms 10000 ahead of the ledger's clock "
               "(2025-11-20T00:53:20.000Z)" in errors[i] for i in refused)
