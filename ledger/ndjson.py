"""NDJSON input in batches of whole lines: as large as `max_lines` while more input is ready
at once, cut early when the input pauses (a pipe fed by a live producer), so every line that
arrived is answered without waiting for the rest of a batch."""

from __future__ import annotations

import select
from collections.abc import Iterator
from typing import IO

READ_BYTES = 1 << 20


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


def line_batches(stream: IO[bytes], max_lines: int) -> Iterator[list[bytes]]:
    """Lines (without their newline) in batches of at most `max_lines`."""
    read = getattr(stream, "read1", stream.read)
    lines: list[bytes] = []
    partial = b""
    while True:
        data = read(READ_BYTES)
        if not data:
            break
        parts = (partial + data).split(b"\n")
        partial = parts.pop()
        lines += parts
        while len(lines) >= max_lines:
            yield lines[:max_lines]
            lines = lines[max_lines:]
        if lines and not _ready(stream):
            yield lines
            lines = []
    if partial:
        lines.append(partial)
    if lines:
        yield lines
