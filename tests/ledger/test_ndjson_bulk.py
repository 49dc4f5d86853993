"""NDJSON `apply` in bulk (pyarrow's JSON reader, the column-wise fold, results written by
Arrow kernels) prints byte for byte what the line-by-line decoder and the per-command fold
print, and writes the same events, whatever the lines hold."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import ledger.commands.ndjson as ndjson
import ledger.executor.batch as executor
from bench.workload import generate
from ledger import Ledger
from tests.support.clock import T0, FakeClock


def _apply(root: Path, data: bytes, monkeypatch: pytest.MonkeyPatch, bulk: bool
           ) -> tuple[bytes, Any, int]:
    taken = []
    real = ndjson.bulk_table

    def counted(block: bytes, n: int) -> Any:
        out = real(block, n) if bulk else None
        taken.append(out is not None)
        return out

    monkeypatch.setattr(ndjson, "bulk_table", counted)
    if not bulk:
        monkeypatch.setattr(executor, "COLUMN_MIN", 10**12)
    with Ledger.open(root, clock=FakeClock(), segment_events_max=4000,
                     apply_batch_commands=3000) as led:
        out = b"".join(chunk for chunk, _, _ in led.apply_ndjson(io.BytesIO(data)))
        events = led.log.read()
    monkeypatch.undo()
    return out, events, sum(taken)


def _same(tmp_path: Path, data: bytes, monkeypatch: pytest.MonkeyPatch) -> bytes:
    bulk_out, bulk_events, taken = _apply(tmp_path / "bulk", data, monkeypatch, bulk=True)
    line_out, line_events, _ = _apply(tmp_path / "lines", data, monkeypatch, bulk=False)
    assert bulk_out == line_out
    assert bulk_events.equals(line_events)
    return bulk_out if taken else b""


def test_the_generated_workload_in_bulk_prints_and_writes_the_same(tmp_path, monkeypatch):
    data = b"".join(json.dumps(c, separators=(",", ":")).encode() + b"\n"
                    for c in generate(12_000, seed=3, groups=6, topics=2, queues=3))
    out = _same(tmp_path, data, monkeypatch)
    assert out, "the bulk reader took no batch"
    assert len(out.splitlines()) == len(data.splitlines())


ODD_LINES = [
    {"op": "commit", "group": "g1", "topic": "t", "queue_id": 0, "offset": 5, "count": 3},
    {"op": "pull", "group": "g1", "topic": "t", "queue_id": 0, "client": "c", "offset": 1},
    {"op": "fly", "group": "g1"},
    {"group": "g1", "topic": "t", "queue_id": 0, "offset": 1},
    {"op": "commit", "group": "bad name", "topic": "t", "queue_id": 0, "offset": 1},
    {"op": "commit", "group": "g1", "topic": "t", "queue_id": -1, "offset": 1},
    {"op": "commit", "group": "g1", "topic": "t", "queue_id": 0},
    {"op": "commit", "group": "g1", "topic": "t", "queue_id": 0, "offset": 2**63 - 1},
    {"op": "pull", "group": "g1", "topic": "t", "queue_id": 0, "client": "c", "max": -1},
    {"op": "queue_append", "topic": "t", "queue_id": 0, "count": 0},
    {"op": "reset", "group": "g1", "topic": "t", "queue_id": 0, "to_offset": 0, "execute": True},
    {"op": "reset", "group": "g1", "topic": "t", "to_offset": 1, "to_latest": True},
    {"op": "group_set", "group": "g1", "mode": "fan"},
    {"op": "sync", "group": "g2", "topic": "t", "queue_id": 0, "offset": 9, "source": "m"},
    {"op": "queue_bounds", "topic": "u", "queue_id": 1, "max_offset": 30, "source": "m"},
    {"op": "commit", "group": "g1", "topic": "t", "queue_id": 0, "offset": 1,
     "ts": T0 - 10},
]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_odd_lines_among_many_are_answered_as_the_line_by_line_decoder_does(
        tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    lines: list[bytes] = [json.dumps({"op": "queue_append", "topic": "t", "queue_id": q,
                                      "count": 10**6, "ts": T0}).encode() for q in range(3)]
    offsets = [0, 0, 0]
    for i in range(8000):
        q = rng.randrange(3)
        if rng.random() < 0.02:
            lines.append(json.dumps(rng.choice(ODD_LINES)).encode())
            continue
        offsets[q] += rng.randrange(0, 3)
        op = rng.choice(["commit", "commit", "pull"])
        line = {"op": op, "group": f"g{rng.randrange(2)}", "topic": "t", "queue_id": q,
                "ts": T0 + i}
        if op == "commit":
            line |= {"offset": offsets[q], "client": rng.choice(["c", "d"])}
        else:
            line |= {"client": rng.choice(["c", "d"]), "max": rng.randrange(1, 40)}
        lines.append(json.dumps(line).encode())
    out = _same(tmp_path, b"\n".join(lines) + b"\n", monkeypatch)
    assert out, "the bulk reader took no batch"
    results = [json.loads(x) for x in out.splitlines()]
    assert any("unknown field 'count' in a commit command" in r.get("error", "")
               for r in results)


@pytest.mark.parametrize("spoiler", [
    b'{"op":"pull","group":"g1","topic":"t","queue_id":0,"client":"c","max":null}',
    b'{"op":"commit","group":"g1","topic":"t","queue_id":0,"offset":1,"ts":1}',
    b'',
    b'{"op":"commit","group":"g1","topic":"t","queue_id":0,"offset":1}{"op":"fly"}',
    b'{"op":"commit","group":"g1","topic":"t","queue_id":0,"offset":1.5}',
    b'[' * 1000,
])
def test_a_line_the_bulk_reader_cannot_say_exactly_sends_its_batch_line_by_line(
        tmp_path, monkeypatch, spoiler):
    """(the second: a time given as a number where the rest of the batch gives text)"""
    lines = [json.dumps({"op": "queue_append", "topic": "t", "queue_id": 0, "count": 10**6})
             .encode()]
    lines += [json.dumps({"op": "commit", "group": "g1", "topic": "t", "queue_id": 0,
                          "offset": i, "ts": "2026-01-01T00:00:00"}).encode()
              for i in range(2500)]
    lines.insert(700, spoiler)
    data = b"\n".join(lines) + b"\n"
    assert ndjson.bulk_table(data, len(lines)) is None
    _same(tmp_path, data, monkeypatch)


def test_times_given_as_text_read_in_bulk_the_same(tmp_path, monkeypatch):
    lines = [json.dumps({"op": "queue_append", "topic": "t", "queue_id": 0, "count": 10**6,
                         "store_time": 1767225600000}).encode()]
    lines += [json.dumps({"op": "commit", "group": "g1", "topic": "t", "queue_id": 0,
                          "offset": i, "ts": f"2026-01-01T00:00:{i % 60:02d}"}).encode()
              for i in range(2500)]
    data = b"\n".join(lines) + b"\n"
    assert ndjson.bulk_table(data, len(lines)) is not None
    assert _same(tmp_path, data, monkeypatch)


def _growing_names(blocks: int, per_block: int, seed: int) -> list[bytes]:
    """Blocks of `per_block` lines whose groups, topics and clients grow from block to block,
    on keys that recur across blocks (so their positions carry from one block to the next)."""
    rng = random.Random(seed)
    lines: list[bytes] = []
    offsets: dict[tuple[str, int], int] = {}
    for b in range(blocks):
        topics = [f"t{i}" for i in range(b + 1)]
        groups = [f"g{i}" for i in range(4 * (b + 1))]
        for t in topics:
            for q in range(3):
                lines.append(json.dumps({"op": "queue_append", "topic": t, "queue_id": q,
                                         "count": 500, "ts": T0 + len(lines)}).encode())
        while len(lines) < per_block * (b + 1):
            t, q = rng.choice(topics), rng.randrange(3)
            offsets[(t, q)] = offsets.get((t, q), 0) + rng.randrange(0, 3)
            line = {"op": rng.choice(["commit", "pull", "pull"]), "group": rng.choice(groups),
                    "topic": t, "queue_id": q, "ts": T0 + len(lines),
                    "client": f"c{rng.randrange(2 + b)}"}
            if line["op"] == "commit":
                line["offset"] = offsets[(t, q)]
            else:
                line["max"] = rng.randrange(1, 20)
            lines.append(json.dumps(line).encode())
    return lines


def test_keys_stay_resident_from_block_to_block_as_new_names_arrive(tmp_path, monkeypatch):
    """One NDJSON call's blocks share the column-wise residents (their names coded over the
    whole call): later blocks find earlier blocks' keys as columns, though new groups, topics
    and clients arrive, and every line is answered and logged as line by line."""
    from ledger.executor.resident import Resident

    resumed: list[int] = []
    real = Resident.resume

    def spied(self: Resident, state: Any) -> None:
        real(self, state)
        resumed.append(len(self))

    monkeypatch.setattr(Resident, "resume", spied)
    data = b"\n".join(_growing_names(4, 3000, seed=11)) + b"\n"
    out = _same(tmp_path, data, monkeypatch)
    assert len(out.splitlines()) == 12_000
    assert resumed[0] == 0 and all(n > 0 for n in resumed[1:4]), resumed


def test_a_write_between_blocks_is_seen_by_the_next_block(tmp_path, monkeypatch):
    """Between two blocks the positions are written back (a read sees them), and a write made
    then on a key kept resident is folded by the next block as by a second call made after
    that write (a commit far ahead: the next block's commits on the key are stale)."""
    from ledger.executor.resident import Resident

    held: list[list[Any]] = []
    real = Resident.hold

    def spied(self: Resident) -> None:
        real(self)
        held.append([self.state.table.key_of(r) for r in self.rows[self.slot].tolist()])

    monkeypatch.setattr(Resident, "hold", spied)
    lines = _growing_names(2, 3000, seed=12)
    later = {(d["group"], d["topic"], d["queue_id"]) for d in map(json.loads, lines[3000:])
             if d["op"] != "queue_append"}
    data = b"\n".join(lines) + b"\n"
    answers = []
    with Ledger.open(tmp_path / "one-call", clock=FakeClock(), apply_batch_commands=3000) as led:
        chunks = led.apply_ndjson(io.BytesIO(data))
        first, _, _ = next(chunks)
        key = next(k for k in held[0] if k in later)  # resident, and folded again next block
        answers.append(_write_between(led, key, first,
                                      lambda: b"".join(c for c, _, _ in chunks)))
    with Ledger.open(tmp_path / "two-calls", clock=FakeClock(), apply_batch_commands=3000) as led:
        first = b"".join(c for c, _, _ in led.apply_ndjson(io.BytesIO(
            b"\n".join(lines[:3000]) + b"\n")))
        answers.append(_write_between(led, key, first, lambda: b"".join(
            c for c, _, _ in led.apply_ndjson(io.BytesIO(b"\n".join(lines[3000:]) + b"\n")))))
    assert answers[0][:4] == answers[1][:4]
    assert answers[0][4].equals(answers[1][4])


def _write_between(led: Ledger, key: tuple[str, str, int], first: bytes,
                   rest: Callable[[], bytes]) -> tuple[Any, ...]:
    """Read the key, append to its queue and commit far ahead on it, then run the rest."""
    seen = led.committed(*key)
    led.queue_append(key[1], key[2], count=1000)
    assert led.commit(*key, 1400).accepted
    text = rest()
    # (a second call numbers its lines from 1)
    results = [{k: v for k, v in json.loads(x).items() if k != "line"} for x in text.splitlines()]
    return (first, seen, results, led.committed(*key),
            led.log.read().drop_columns(["store_ts"]))
