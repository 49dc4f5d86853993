"""Queue appends fold column-wise (ledger/executor/append_fold.py) on queues no line folded per
command reads, and write what the per-command fold writes: the same log, results and state
(MaxOffset, every append, the time index), store times given or not, in or out of order."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.ledger.column_paths import assert_answers_as_per_command, both_paths, counted
from tests.support.clock import T0

KEYS = [(f"g{g}", t, q) for g in range(4) for t in ("t", "u") for q in range(4)]


def _stream(seed: int, n: int = 6000) -> list[dict[str, Any]]:
    """Producers appending (store times given now and then, some earlier than the last),
    consumers pulling 32 ahead and committing what they pulled, on keys that exist."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for t in ("t", "u"):
        for q in range(4):
            out.append({"op": "queue_append", "topic": t, "queue_id": q, "count": 1000,
                        "ts": T0})
    for g, t, q in KEYS:  # every key's first line: a pull (it starts column-wise)
        out.append({"op": "pull", "group": g, "topic": t, "queue_id": q, "client": "c0",
                    "ts": T0})
    pulled = {k: 0 for k in KEYS}
    for i in range(n):
        ts = T0 + 1 + i // 4
        r = rng.random()
        if r < 0.25:
            line: dict[str, Any] = {"op": "queue_append", "topic": rng.choice(["t", "u"]),
                                    "queue_id": rng.randrange(4), "count": rng.randrange(1, 40),
                                    "ts": ts}
            if rng.random() < 0.5:
                line["store_time"] = ts - rng.randrange(0, 3000)
            out.append(line)
        elif r < 0.6:
            g, t, q = rng.choice(KEYS)
            out.append({"op": "pull", "group": g, "topic": t, "queue_id": q, "client": "c0",
                        "ts": ts})
            pulled[(g, t, q)] += 32
        else:
            g, t, q = rng.choice(KEYS)
            out.append({"op": "commit", "group": g, "topic": t, "queue_id": q,
                        "offset": min(pulled[(g, t, q)], 1000), "client": "c0", "ts": ts})
    return out


@pytest.mark.parametrize(("seed", "batch"), [(1, 131_072), (2, 131_072), (3, 1000)])
def test_appends_fold_column_wise_as_per_command(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 seed: int, batch: int) -> None:
    """(batch 1000: many runs, each queue's time index carried from run to run)"""
    folded = counted(monkeypatch, "fold_appends")
    lines = _stream(seed)
    per_command, by_columns = both_paths(tmp_path, lines, apply_column_batch_commands=batch)
    assert by_columns[0] == per_command[0]
    assert by_columns[1].equals(per_command[1])
    assert by_columns[2] == per_command[2]
    appends = sum(line["op"] == "queue_append" for line in lines)
    assert sum(folded) > appends // 2
    index = [r for r in by_columns[2] if r["row"] == "index"]
    assert len(index) > 8  # store times above the queue's highest entered its index


def test_appends_answer_as_per_command_in_json_and_arrow(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    folded = counted(monkeypatch, "fold_appends")
    assert_answers_as_per_command(tmp_path, _stream(4))
    assert sum(folded) > 0
