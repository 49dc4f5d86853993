"""Shared by the tests of the column-wise folds of syncs and appends: run one stream per
command and column-wise, and compare what each answered, wrote and holds."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import ledger.executor.columnar as columnar
from ledger import Ledger
from ledger.store.checkpoint import state_to_table
from tests.support.clock import FakeClock

ROWS = 6000  # above the column-wise path's minimum


def table_of(lines: list[dict[str, Any]]) -> pa.Table:
    """Lines as a command table (every field any line has; null: absent)."""
    names = sorted({k for line in lines for k in line})
    return pa.table({k: [line.get(k) for line in lines] for k in names})


def state_rows(led: Ledger) -> list[dict[str, Any]]:
    """The whole state (a checkpoint's rows), in a fixed order."""
    table = state_to_table(led.writer.state)
    keys = ["row", "consumer_group", "topic", "queue_id", "client_id", "min_offset", "store_ts"]
    order = pc.sort_indices(table, sort_keys=[(k, "ascending") for k in keys])
    rows = table.take(order).to_pylist()
    for row in rows:  # a position's client generations: a dict, in whichever order they came
        if row["row"] in ("position", "client") and row["detail"]:
            row["detail"] = json.loads(row["detail"])
    return rows


def both_paths(tmp_path: Path, lines: list[dict[str, Any]], policy: str | None = None,
               before: Sequence[dict[str, Any]] = (),
               **settings: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(results, log, state) per command, then column-wise (`settings`: the latter's), each
    ledger given the `before` lines first (their results not kept)."""
    out = []
    for name, by_columns in (("commands", False), ("columns", True)):
        root = tmp_path / name
        root.mkdir()
        if policy is not None:
            (root / "reset-policy.toml").write_text(policy)
        with Ledger.open(root, clock=FakeClock(), offsets_retention_ms=10**12,
                         **(settings if by_columns else {})) as led:
            list(led.apply(list(before)))
            if by_columns:
                results = list(led.apply(table_of(lines)))
            else:  # batches below the column path's minimum: every line per command
                results = []
                for start in range(0, len(lines), 1000):
                    part = led.apply([{k: v for k, v in line.items() if v is not None}
                                      for line in lines[start:start + 1000]])
                    results += [{**r, "line": r["line"] + start} for r in part]
            out.append((results, led.log.read(), state_rows(led)))
    return out[0], out[1]


def typed_path(root: Path, lines: list[dict[str, Any]],
               before: Sequence[dict[str, Any]] = ()) -> tuple[Any, ...]:
    """(results, log, state) of the lines as typed commands in one batch, as importers and the
    Kafka follower hand them over (`apply` of dicts: above the column path's minimum, the
    fold takes a table built from the commands), after the `before` lines."""
    root.mkdir()
    with Ledger.open(root, clock=FakeClock(), offsets_retention_ms=10**12) as led:
        list(led.apply(list(before)))
        results = list(led.apply([{k: v for k, v in line.items() if v is not None}
                                  for line in lines]))
        return results, led.log.read(), state_rows(led)


def counted(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """The rows of each plan `columnar.<name>` (fold_syncs, fold_appends) folds from now on."""
    counts: list[int] = []
    real = getattr(columnar, name)

    def counting(state: Any, plan: Any, *args: Any) -> Any:
        counts.append(len(plan.rows))
        return real(state, plan, *args)

    monkeypatch.setattr(columnar, name, counting)
    return counts


def assert_answers_as_per_command(tmp_path: Path, lines: list[dict[str, Any]]) -> None:
    """`apply` prints the very bytes msgspec writes for each result, and `apply_arrow` holds
    the result's other fields as `detail`, whichever path folded the line."""
    data = b"".join(json.dumps({k: v for k, v in line.items() if v is not None}).encode()
                    + b"\n" for line in lines)
    printed = []
    for name, batch in (("per-line", 1000), ("bulk", ROWS)):  # 1000: below the bulk minimum
        with Ledger.open(tmp_path / name, clock=FakeClock(), offsets_retention_ms=10**12,
                         apply_batch_commands=batch) as led:
            printed.append(b"".join(bytes(text) for text, _, _ in
                                    led.apply_ndjson(io.BytesIO(data))))
    assert printed[1] == printed[0]
    with Ledger.open(tmp_path / "arrow", clock=FakeClock(), offsets_retention_ms=10**12) as led:
        table = led.apply_arrow(table_of([{k: v for k, v in line.items() if v is not None}
                                          for line in lines]))
    fields = ("line", "op", "seq", "error", "accepted", "reason", "offset", "next_offset",
              "generation", "count")
    for row, text in zip(table.to_pylist(), printed[0].splitlines(), strict=True):
        want = json.loads(text)
        assert {k: row[k] for k in fields if row[k] is not None} == \
            {k: v for k, v in want.items() if k in fields and v is not None}
        rest = {k: v for k, v in want.items() if k not in fields and k != "refused"}
        assert (json.loads(row["detail"]) if row["detail"] else {}) == rest
