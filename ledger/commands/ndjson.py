"""NDJSON input: batches of whole lines, and the bulk reader that turns a batch into a command
table in one C++ pass (pyarrow's JSON reader) when it can say exactly what the line-by-line
decoder (`commands.decode_lines`) would.

Batches are as large as `max_lines` while more input is ready at once and are cut early when
the input pauses (a pipe fed by a live producer), so every line that arrived is answered without
waiting for the rest of a batch. `parsed_blocks` reads and parses the next batch on a thread of
its own while the caller folds this one.

The bulk reader gives up on a whole batch (None: the caller decodes it line by line) whenever
the two could differ: a `null` anywhere (JSON null and an absent field are different commands:
`"max": null` is an error, an absent max is 32), a field or a type the bulk schema does not
have, malformed JSON, blank lines or several objects on one line (the row count tells). Within
a table, the lines that name a field their op does not take are marked so that they are decoded
alone (the error names the field); every other check (names, ranges, required fields) is made
where the table is folded, exactly as for any command table.
"""

from __future__ import annotations

import queue
import re
import select
import threading
from collections.abc import Generator, Iterator
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from ledger.commands.command import BY_OP

READ_BYTES = 1 << 20
#: Bytes per block of input (about 130k lines of a typical feed): one fsync each.
BLOCK_BYTES = 16 << 20
#: The first block's bytes (about 17k lines), doubled block by block up to BLOCK_BYTES: the
#: fold waits for the first block to be read and parsed, and a full one cost 0.22 s of a 4.7 s
#: `apply` of 1M lines before anything else could run.
FIRST_BLOCK_BYTES = 2 << 20

#: Every field a command line may carry, typed as the bulk reader reads it. The reader is told
#: the types of the fields nearly every line has (CORE) and infers the others, whose types are
#: then checked against these; a batch that gives a field another type (a reviewed plan, a
#: number where this says text) is read line by line instead.
BULK_SCHEMA = pa.schema([
    ("op", pa.string()), ("group", pa.string()), ("topic", pa.string()),
    ("queue_id", pa.int64()), ("client", pa.string()), ("offset", pa.int64()),
    ("max", pa.int64()), ("generation", pa.int64()), ("count", pa.int64()),
    ("store_time", pa.int64()), ("min_offset", pa.int64()), ("max_offset", pa.int64()),
    ("source", pa.string()), ("ts", pa.int64()), ("to_offset", pa.int64()),
    ("to_datetime", pa.string()), ("to_earliest", pa.bool_()), ("to_latest", pa.bool_()),
    ("to_current", pa.bool_()), ("shift_by", pa.int64()), ("by_duration", pa.string()),
    ("to_state_at", pa.string()), ("from_csv", pa.string()), ("topics", pa.list_(pa.string())),
    ("all_topics", pa.bool_()), ("backward_only", pa.bool_()), ("reason", pa.string()),
    ("actor", pa.string()), ("execute", pa.bool_()), ("force", pa.bool_()),
    ("mode", pa.string()), ("initial", pa.string()), ("client_timeout", pa.string()),
    ("owner_only", pa.bool_()),
])
CORE = ("op", "group", "topic", "queue_id", "client", "offset", "max", "ts")
#: Bytes per block of the reader's own (it parses them one after another: see `_read`).
READ_BLOCK_BYTES = 1 << 20
_FIELDS_OF_OP = {op: frozenset(t.__struct_fields__) | {"op"} for op, t in BY_OP.items()}
#: Fields a command takes as a number or as text (times, durations): a batch that gives one of
#: them the other type throughout is read again with that type.
UNION_FIELDS = frozenset({"ts", "store_time", "to_datetime", "to_state_at", "by_duration",
                          "client_timeout"})
_TYPE_CHANGE = re.compile(r"Column\(/(\w+)\) changed from \w+ to (number|string)")


def _ready(stream: IO[bytes]) -> bool:
    """More input can be read at once (true for files; for pipes: something is waiting)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return True  # an in-memory stream: all of it is there
    try:
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def line_blocks(stream: IO[bytes], max_lines: int) -> Iterator[tuple[bytes, int]]:
    """(bytes of whole lines, number of lines): blocks of about BLOCK_BYTES (the first ones
    smaller, from FIRST_BLOCK_BYTES) and at most `max_lines` lines, cut early when the input
    pauses; the last line of the input may lack its newline. Lines are only counted per block
    (and a block cut only where it holds more than `max_lines`).

    When a read's lines pass `max_lines` while more input is ready, the lines after the last
    whole `max_lines` go with the next block rather than alone: a few hundred lines cut off a
    16 MB block (mixed's 131.7k lines against 131,072) were decoded line by line, and the
    per-command fold in between made the next block read all its keys again."""
    read = getattr(stream, "read1", stream.read)
    parts: list[bytes] = []  # read since the last block (joined once per block)
    size = 0
    limit = FIRST_BLOCK_BYTES
    while True:
        data = read(READ_BYTES)
        if data:
            parts.append(data)
            size += len(data)
            if size < limit and _ready(stream):
                continue
        pending = b"".join(parts)
        cut = len(pending) if not data else pending.rfind(b"\n") + 1
        block, rest = pending[:cut], pending[cut:]
        # (a pause answers every line that arrived: nothing is held back then)
        held = yield from _at_most(block, max_lines, hold_rest=bool(data) and _ready(stream))
        if not data:
            return
        rest = held + rest
        parts, size = [rest], len(rest)
        limit = min(limit * 2, BLOCK_BYTES)


def parsed_blocks(stream: IO[bytes], max_lines: int, min_bulk_lines: int
                  ) -> Iterator[tuple[bytes, int, tuple[pa.Table, np.ndarray] | None]]:
    """`line_blocks`, each with its `bulk_table` when it holds at least `min_bulk_lines`
    lines, read and parsed one block ahead on a thread of their own: the next block is read
    from the input and parsed (pyarrow's reader runs without the GIL) while the caller folds
    this one. A pause in the input still cuts a block at once. An error reading the input is
    raised here, after the blocks read before it. The thread is a daemon: a caller that stops
    early leaves it blocked at most in one read of the input, which does not hold the
    process open."""
    ahead: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def offer(kind: str, item: Any) -> bool:
        """Hand one item over once the caller took the one before; False: it stopped."""
        while not stop.is_set():
            try:
                ahead.put((kind, item), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for block, n_lines in line_blocks(stream, max_lines):
                bulk = bulk_table(block, n_lines) if n_lines >= min_bulk_lines else None
                if not offer("block", (block, n_lines, bulk)):
                    return
            offer("end", None)
        except BaseException as e:  # noqa: BLE001 (raised again on the caller's thread)
            offer("error", e)

    reader = threading.Thread(target=read, name="ndjson-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            kind, item = ahead.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item
    finally:
        stop.set()


def _at_most(block: bytes, max_lines: int, *, hold_rest: bool = False
             ) -> Generator[tuple[bytes, int], None, bytes]:
    """A block of whole lines as blocks of at most `max_lines` lines; returns the lines after
    the last whole `max_lines` instead of yielding them when `hold_rest` and the block holds
    more than `max_lines` (b"" when none are held)."""
    if not block:
        return b""
    # (numpy compares without the GIL, which the fold on the other thread holds: bytes.count
    # held it for 10 ms of each 16 MB block)
    newline = np.frombuffer(block, np.uint8) == 0x0A
    newlines = int(np.count_nonzero(newline))
    n = newlines + (not block.endswith(b"\n"))
    if n <= max_lines:
        yield block, n
        return b""
    if newlines // max_lines <= 2:  # (a 16 MB block against 131,072 lines: one or two cuts)
        ends = [_after_newline(newline, k, newlines)
                for k in range(max_lines, newlines + 1, max_lines)]
    else:
        ends = (np.flatnonzero(newline)[max_lines - 1::max_lines] + 1).tolist()
    start = 0
    for end in ends:
        yield block[start:end], max_lines
        start = end
    if start == len(block):
        return b""
    if hold_rest:
        return block[start:]
    yield block[start:], n - (newlines // max_lines) * max_lines
    return b""


#: Bytes each side of where `_after_newline` expects the newline it looks for.
_CUT_WINDOW = 1 << 16


def _after_newline(newline: np.ndarray, k: int, newlines: int) -> int:
    """The offset just past the k-th newline (1-based) of a block whose `newline` mask holds
    `newlines`: looked for near where lines of the block's mean length put it (listing every
    newline of 16 MB took 8 ms of the GIL), the whole block listed only if it is not there."""
    guess = len(newline) * k // newlines
    lo, hi = max(guess - _CUT_WINDOW, 0), min(guess + _CUT_WINDOW, len(newline))
    local = np.flatnonzero(newline[lo:hi])
    i = k - int(np.count_nonzero(newline[:lo])) - 1
    if 0 <= i < len(local):
        return lo + int(local[i]) + 1
    return int(np.flatnonzero(newline)[k - 1]) + 1


def lines_bytes(lines: pa.ChunkedArray) -> bytes:
    """The strings of `lines` (each ending in its newline) as one bytes object: one copy of
    each chunk's characters, no object per line."""
    views = []
    for chunk in lines.chunks:
        if len(chunk):
            offsets = np.frombuffer(chunk.buffers()[1], np.int32, len(chunk) + 1, chunk.offset * 4)
            views.append(memoryview(chunk.buffers()[2])[offsets[0]:offsets[-1]])
    return b"".join(views)


def split_lines(block: bytes) -> list[bytes]:
    lines = block.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def bulk_table(block: bytes, n_lines: int) -> tuple[pa.Table, np.ndarray] | None:
    """The block's lines as a command table (only the fields they use) and the rows that name a
    field their op does not take; None when the block must be decoded line by line."""
    if b"null" in block:
        return None
    table = _read(block)
    if table is None or table.num_rows != n_lines:
        return None
    table = table.select([n for n in table.column_names
                          if table.column(n).null_count < table.num_rows])
    return table, _odd_rows(table)


def _read(block: bytes) -> pa.Table | None:
    """pyarrow's JSON reader over the block, told the CORE types (a number-or-text field is
    retyped, once each, when the block gives it the other type) and inferring the rest, whose
    types must then be BULK_SCHEMA's; None when it cannot read the block so."""
    schema = pa.schema([BULK_SCHEMA.field(name) for name in CORE])
    retyped: set[str] = set()
    while True:
        try:
            table = pajson.read_json(
                pa.BufferReader(block),  # (over the bytes: no copy, unlike a Python stream)
                # one core: the block is parsed beside the fold of the one before
                read_options=pajson.ReadOptions(block_size=READ_BLOCK_BYTES, use_threads=False),
                parse_options=pajson.ParseOptions(explicit_schema=schema,
                                                  unexpected_field_behavior="infer"))
            break
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError,
                ValueError) as e:
            m = _TYPE_CHANGE.search(str(e))
            if m is None or m.group(1) not in UNION_FIELDS or m.group(1) in retyped:
                return None
            name = m.group(1)
            retyped.add(name)
            to = pa.int64() if m.group(2) == "number" else pa.string()
            schema = schema.set(schema.get_field_index(name), pa.field(name, to))
    for f in table.schema:
        if f.name in CORE or f.name not in BULK_SCHEMA.names:
            continue  # (a field no command has marks its rows odd)
        want = BULK_SCHEMA.field(f.name).type
        if not (f.type == want or (f.name in UNION_FIELDS and f.type in (pa.int64(),
                                                                          pa.string()))):
            return None
    return table


def _odd_rows(table: pa.Table) -> np.ndarray:
    """Rows that name a field their op does not take (msgspec refuses them by name)."""
    odd = np.zeros(table.num_rows, bool)
    if "op" not in table.column_names:
        return odd
    ops = table.column("op")
    for op in pc.unique(ops).to_pylist():
        allowed = _FIELDS_OF_OP.get(op)
        if allowed is None:
            continue  # an unknown op (or none): refused by name where it is folded
        extra = [n for n in table.column_names if n not in allowed]  # (unknown fields too)
        if not extra:
            continue
        rows = pc.equal(ops, op)
        present = pc.is_valid(table.column(extra[0]))
        for name in extra[1:]:
            present = pc.or_(present, pc.is_valid(table.column(name)))
        odd |= pc.fill_null(pc.and_(rows, present), False).to_numpy(zero_copy_only=False)
    return odd
