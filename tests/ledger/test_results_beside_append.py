"""A bulk batch's results (the JSON lines of `apply_ndjson`, the table of `apply_arrow`) are built
on a thread of their own while the batch's events are written and fsynced, and handed out only
once the batch is durable: a batch whose fsync fails hands out none of them."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from ledger import Ledger
from ledger.executor.run_results import RunOutput
from ledger.store.writer import Writer
from storage import LogFailedError
from tests.support.clock import T0, FakeClock
from tests.support.faults import FaultyFS

BATCH = 3000  # lines per batch: above the column-wise path's minimum


def _commands(n: int) -> list[dict[str, Any]]:
    """Commits on 40 keys, each above the last (after appends that make room for them)."""
    out: list[dict[str, Any]] = [{"op": "queue_append", "topic": "t", "queue_id": q,
                                  "count": 10**9, "ts": T0} for q in range(8)]
    for i in range(n - len(out)):
        out.append({"op": "commit", "group": f"g{i % 5}", "topic": "t", "queue_id": i % 8,
                    "offset": i + 1, "client": "c", "ts": T0 + i})
    return out


def _ndjson(commands: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(c).encode() + b"\n" for c in commands)


def _table(commands: list[dict[str, Any]]) -> pa.Table:
    names = sorted({k for c in commands for k in c})
    return pa.table({k: [c.get(k) for c in commands] for k in names})


@pytest.mark.parametrize("form", ["ndjson", "arrow"])
def test_results_are_built_while_the_batch_is_written_and_handed_out_once_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str,
) -> None:
    seen: list[str] = []
    building = threading.Event()
    builders: set[str] = set()
    built_method = "json_lines" if form == "ndjson" else "result_table"
    real_build = getattr(RunOutput, built_method)
    real_append = Writer.append

    def build(self: RunOutput, first_seq: int) -> Any:
        builders.add(threading.current_thread().name)
        building.set()
        return real_build(self, first_seq)

    def append(self: Writer, events: Any, before_derived: Any = None) -> int:
        # the batch's results start building before its events are written (or never: a
        # timeout then fails the test below)
        seen.append("building" if building.wait(5) else "not building")
        first = real_append(self, events, before_derived=before_derived)
        seen.append("durable")
        building.clear()
        return first

    monkeypatch.setattr(RunOutput, built_method, build)
    monkeypatch.setattr(Writer, "append", append)
    commands = _commands(3 * BATCH)
    with Ledger.open(tmp_path / "d", clock=FakeClock(), apply_batch_commands=BATCH,
                     apply_column_batch_commands=BATCH) as led:
        if form == "ndjson":
            import io

            lines: list[bytes] = []
            for text, n, errors in led.apply_ndjson(io.BytesIO(_ndjson(commands))):
                seen.append("results")
                lines += bytes(text).splitlines()
                assert errors == 0 and n == len(bytes(text).splitlines())
            results = [json.loads(x) for x in lines]
        else:
            results = led.apply_arrow(_table(commands)).to_pylist()
            seen.append("results")
        assert [r["line"] for r in results] == list(range(1, len(commands) + 1))
        assert all(r.get("error") is None for r in results)
        assert [r["seq"] for r in results] == list(range(len(commands)))  # one event a line
    assert "not building" not in seen
    assert builders and threading.main_thread().name not in builders
    # every batch's results come after its append returned
    batches = seen.count("durable")
    assert batches >= 3
    if form == "ndjson":
        assert seen == ["building", "durable", "results"] * batches
    else:
        assert seen == ["building", "durable"] * batches + ["results"]


def test_a_batch_whose_fsync_fails_hands_out_none_of_its_results(tmp_path: Path) -> None:
    import io

    fs = FaultyFS()
    commands = _commands(3 * BATCH)
    root = tmp_path / "d"
    led = Ledger.open(root, fs=fs, clock=FakeClock(), apply_batch_commands=BATCH)
    chunks = led.apply_ndjson(io.BytesIO(_ndjson(commands)))
    text, n, _ = next(chunks)
    first = bytes(text).splitlines()
    assert n == len(first) > 0
    fs.only, fs.fsync_fail_after = ".wal", fs.fsyncs  # the next batch's fsync fails
    with pytest.raises(LogFailedError, match="fsync"):
        next(chunks)
    led.close()
    with Ledger.open(root) as again:
        # what was handed out is durable, and nothing after it was acknowledged
        assert again.log.next_seq >= json.loads(first[-1])["seq"] + 1
        assert again.log.next_seq <= 2 * BATCH
