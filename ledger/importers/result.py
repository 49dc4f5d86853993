"""What every importer returns, and the one way an importer names a bad line.

Importers read what operators' tools print (kafka-consumer-groups, kafka-console-consumer,
mqadmin) and turn it into the command dicts a user could put in an `apply` file. They are all or
nothing: a malformed line raises `InvalidInput` before any command is returned, so the ledger
never records half a file. Lines that are known noise (log lines, notes a tool prints on stderr)
or records the ledger has no use for are skipped and counted by reason, so the CLI can say what
it passed over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.commands.command import check_source
from ledger.errors import InvalidInput
from ledger.limits import NAME_LENGTH_MAX, OFFSET_MAX, check_name, name_from

SHOWN_CHARS_MAX = 80
Row = tuple[str, str, int, int]  # (consumer_group, topic, queue_id, offset)


@dataclass(frozen=True, slots=True)
class ImportResult:
    """Commands parsed from one tool output, in the order they must be applied.

    `records` counts the rows or records that carried an offset or a bound (whether or not they
    produced a command); `skipped` counts what was passed over, by reason; `groups` are the
    consumer groups seen; `notes` are lines the tool printed for a person (a group with no active
    members, an error of the tool) that the CLI should pass on.
    """

    commands: list[dict[str, Any]]
    records: int
    skipped: dict[str, int]
    groups: tuple[str, ...]
    notes: tuple[str, ...]


def shown(text: str) -> str:
    """The bad text as an error message shows it: quoted, cut to 80 characters."""
    return repr(text if len(text) <= SHOWN_CHARS_MAX else text[:SHOWN_CHARS_MAX] + "...")


def line_error(line_no: int, what: str, text: str | None = None) -> InvalidInput:
    """`line N: <what is wrong>: <the bad text>`, the form of every importer error."""
    if text is None:
        return InvalidInput(f"line {line_no}: {what}")
    return InvalidInput(f"line {line_no}: {what}: {shown(text)}")


def int_cell(cell: str, what: str, line_no: int, line: str, hi: int = OFFSET_MAX) -> int:
    """A non-negative decimal integer cell (an offset, a partition), or an error naming the line."""
    if not cell.isascii() or not cell.isdigit() or int(cell) > hi:
        raise line_error(line_no, f"{what} {cell!r} is not an integer between 0 and {hi}", line)
    return int(cell)


def name_cell(value: str, what: str, line_no: int, line: str) -> str:
    """A group or topic name that passes `check_name`, or an error naming the line and value."""
    try:
        return check_name(value, what)
    except InvalidInput as e:
        raise line_error(line_no, str(e), line) from None


class ImportTally:
    """The mutable side of one parse: commands, counters and notes, frozen by `result()`."""

    __slots__ = ("commands", "records", "skipped", "groups", "notes", "source", "max_offsets")

    def __init__(self, source: str) -> None:
        self.source = check_source(source)
        self.commands: list[dict[str, Any]] = []
        self.records = 0
        self.skipped: Counter[str] = Counter()
        self.groups: dict[str, None] = {}
        self.notes: list[str] = []
        self.max_offsets: dict[tuple[str, int], int] = {}

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] += count

    def sync(self, group: str, topic: str, queue_id: int, offset: int | None,
             ts: int | None = None) -> None:
        """Overwrite the committed offset (None removes it, as a Kafka tombstone does)."""
        self.syncs(((group, topic, queue_id, offset, ts),))

    def syncs(self, rows: Iterable[tuple[str, str, int, int | None, int | None]]) -> None:
        """`sync` for many (group, topic, queue id, offset, ts) rows; a ts of None is left out."""
        source, groups, append = self.source, self.groups, self.commands.append
        for group, topic, queue_id, offset, ts in rows:
            cmd: dict[str, Any] = {"op": "sync", "group": group, "topic": topic,
                                   "queue_id": queue_id, "offset": offset, "source": source}
            if ts is not None:
                cmd["ts"] = ts
            if group not in groups:
                groups[group] = None
            append(cmd)

    def max_offset(self, topic: str, queue_id: int, value: int) -> None:
        """Remember a queue's MaxOffset reading; the highest one wins.

        A tool that describes several groups reads each queue's end once per group, at slightly
        different times: the highest reading is the newest, and bounds only ever rise.
        """
        key = (topic, queue_id)
        if value > self.max_offsets.get(key, -1):
            self.max_offsets[key] = value

    def result(self) -> ImportResult:
        """Bounds first (queues in sorted order), then the syncs in the order they were made, so
        that every sync lands on a queue whose MaxOffset the ledger already knows."""
        bounds = [queue_bounds_command(topic, queue_id, self.source, max_offset=value)
                  for (topic, queue_id), value in sorted(self.max_offsets.items())]
        return ImportResult(bounds + self.commands, self.records,
                            dict(sorted(self.skipped.items())), tuple(self.groups),
                            tuple(self.notes))


def queue_bounds_command(topic: str, queue_id: int, source: str, *, max_offset: int | None = None,
                         min_offset: int | None = None, ts: int | None = None) -> dict[str, Any]:
    """Raise what the ledger knows of a queue's MaxOffset / MinOffset (never lowers them)."""
    if max_offset is None and min_offset is None:
        raise ValueError("queue_bounds needs max_offset or min_offset")
    cmd: dict[str, Any] = {"op": "queue_bounds", "topic": topic, "queue_id": queue_id}
    if max_offset is not None:
        cmd["max_offset"] = max_offset
    if min_offset is not None:
        cmd["min_offset"] = min_offset
    cmd["source"] = source
    if ts is not None:
        cmd["ts"] = ts
    return cmd


def source_name(kind: str, path: str, given: str | None) -> str:
    """The source an import records (`kind:file name`, or stdin), unless the user named it."""
    if given is not None:
        return given
    return f"{kind}:{name_from(Path(path).name if path != '-' else 'stdin')}"[:NAME_LENGTH_MAX]
