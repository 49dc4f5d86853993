"""NDJSON `apply` reads and parses the next block on a thread of its own while it folds this one:
an input that fails part-way answers every block read before the failure and then raises it,
and a caller that stops early is not held by the reading thread."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from ledger import Ledger
from tests.support.clock import T0, FakeClock


def _commits(n: int, first: int = 0) -> bytes:
    return b"".join(json.dumps({"op": "commit", "group": "g", "topic": "t", "queue_id": 0,
                                "offset": first + i, "ts": T0}).encode() + b"\n"
                    for i in range(n))


class _PipeThenFails:
    """An input whose first read gives whole lines and whose next read fails. Its fileno is an
    empty pipe's, so the input looks paused after the first read and that block is cut."""

    def __init__(self, data: bytes) -> None:
        self.reads, self._data = 0, data
        self._r, self._w = os.pipe()

    def fileno(self) -> int:
        return self._r

    def read1(self, n: int) -> bytes:
        self.reads += 1
        if self.reads == 1:
            return self._data
        raise OSError(5, "Input/output error (the disk under the input went away)")

    read = read1

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)


def test_an_input_that_fails_answers_the_blocks_before_and_raises(tmp_path: Path) -> None:
    stream = _PipeThenFails(_commits(300))
    try:
        with Ledger.open(tmp_path / "d", clock=FakeClock()) as led:
            chunks = led.apply_ndjson(stream)  # type: ignore[arg-type]
            text, lines, errors = next(chunks)
            assert (lines, errors) == (300, 0)
            assert [json.loads(x)["offset"] for x in bytes(text).splitlines()] == list(range(300))
            with pytest.raises(OSError, match="Input/output error"):
                next(chunks)
            assert led.committed("g", "t", 0) == 299  # what was answered is durable
    finally:
        stream.close()


def test_a_caller_that_stops_early_is_not_held_by_the_reader(tmp_path: Path) -> None:
    """A live producer that stays silent: the caller stops after the first block while the
    reading thread waits for input; closing the generator returns at once, and the thread
    ends once the input does, without handing over what it read."""
    r, w = os.pipe()
    reader = os.fdopen(r, "rb", buffering=0)
    try:
        os.write(w, _commits(200))
        with Ledger.open(tmp_path / "d", clock=FakeClock()) as led:
            chunks = led.apply_ndjson(reader)
            _, lines, _ = next(chunks)
            assert lines == 200
            started = time.monotonic()
            chunks.close()
            assert time.monotonic() - started < 5
            os.write(w, _commits(10, first=200))  # read by the thread, never folded
            os.close(w)
            w = -1
            deadline = time.monotonic() + 30
            while any(t.name == "ndjson-read-ahead" for t in threading.enumerate()):
                assert time.monotonic() < deadline, "the reading thread did not end"
                time.sleep(0.01)
            assert led.committed("g", "t", 0) == 199
    finally:
        reader.close()
        if w >= 0:
            os.close(w)


def test_the_first_blocks_are_small_and_grow_to_the_full_block() -> None:
    """The fold waits for the first block to be read and parsed: it is FIRST_BLOCK_BYTES, not
    BLOCK_BYTES, and each next block doubles up to BLOCK_BYTES; every line is in exactly one
    block, whole, in order."""
    import io

    from ledger.commands.ndjson import BLOCK_BYTES, FIRST_BLOCK_BYTES, line_blocks

    line = json.dumps({"op": "commit", "group": "g", "topic": "t", "queue_id": 0,
                       "offset": 1, "ts": T0}).encode() + b"\n"
    data = line * (3 * BLOCK_BYTES // len(line))
    blocks = list(line_blocks(io.BytesIO(data), max_lines=10**9))
    sizes = [len(b) for b, _ in blocks]
    assert b"".join(b for b, _ in blocks) == data
    assert all(b.endswith(b"\n") and n == b.count(b"\n") for b, n in blocks)
    limits = [min(FIRST_BLOCK_BYTES << i, BLOCK_BYTES) for i in range(len(sizes))]
    # each block is its limit cut back to a whole line (the last: what is left)
    assert all(limit - len(line) < size <= limit
               for size, limit in zip(sizes[:-1], limits[:-1], strict=True))
    assert sizes[0] <= FIRST_BLOCK_BYTES < BLOCK_BYTES
    assert max(sizes) > BLOCK_BYTES - len(line)


def test_lines_past_the_batch_limit_wait_for_the_next_block_while_more_input_is_ready() -> None:
    """A read holding more than `max_lines` lines, with more input ready, gives whole batches of
    `max_lines`: the lines after the last go with the next block instead of alone (a block of
    a few hundred lines was decoded line by line). Every line is in exactly one block, in
    order."""
    import io

    from ledger.commands.ndjson import FIRST_BLOCK_BYTES, line_blocks

    data = _commits(3 * FIRST_BLOCK_BYTES // len(_commits(1)))
    blocks = list(line_blocks(io.BytesIO(data), max_lines=1000))
    assert b"".join(b for b, _ in blocks) == data
    assert all(n == b.count(b"\n") for b, n in blocks)
    assert [n for _, n in blocks[:-1]] == [1000] * (len(blocks) - 1)
    assert 0 < blocks[-1][1] <= 1000


def test_a_pause_answers_every_line_that_arrived_past_the_batch_limit(tmp_path: Path) -> None:
    """A live producer that pauses after 2,500 lines (batches of 1,000): the lines after the
    last whole batch are answered at once, not held for input that may not come."""
    from ledger.commands.ndjson import line_blocks

    stream = _PipeThenFails(_commits(2500))  # looks paused after its first read
    try:
        blocks = line_blocks(stream, max_lines=1000)  # type: ignore[arg-type]
        assert [n for _, n in (next(blocks), next(blocks), next(blocks))] == [1000, 1000, 500]
        with pytest.raises(OSError, match="Input/output error"):
            next(blocks)
    finally:
        stream.close()


@pytest.mark.parametrize("seed", range(4))
def test_every_line_is_in_one_block_whatever_the_lengths_of_the_lines(seed: int) -> None:
    """Lines of very different lengths (empty to 5,000 bytes, the last with or without its
    newline), cut into batches of any size: one, two or many cuts per read, each found where
    the mean length puts it or, when it is not there, by listing every newline."""
    import io
    import random

    from ledger.commands.ndjson import line_blocks

    rnd = random.Random(seed)
    for _ in range(150):
        lines = [b"x" * rnd.choice([0, 1, 5, 50, 500, 5000]) for _ in range(rnd.randint(1, 400))]
        data = b"\n".join(lines) + (b"\n" if rnd.random() < 0.7 else b"")
        max_lines = rnd.randint(1, 250)
        blocks = list(line_blocks(io.BytesIO(data), max_lines))
        assert b"".join(b for b, _ in blocks) == data
        assert all(n == b.count(b"\n") + (not b.endswith(b"\n")) for b, n in blocks)
        assert all(n == max_lines and b.endswith(b"\n") for b, n in blocks[:-1])
