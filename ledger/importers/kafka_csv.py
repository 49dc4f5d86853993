"""Kafka's reset-offsets CSV (`kafka-consumer-groups --reset-offsets --export`): read and written.

`topic,partition,offset` (the group given apart) or `group,topic,partition,offset`, no header;
blank lines are skipped; a queue given twice is refused (Kafka would take the last silently).
Every error is an `InvalidInput` naming the line.
"""

from __future__ import annotations

import re

from ledger.errors import InvalidInput
from ledger.importers.result import Row
from ledger.limits import OFFSET_MAX, QUEUE_ID_MAX, check_name

_DIGITS = re.compile(r"[0-9]+")


def parse_kafka_csv(text: str, group: str | None = None) -> list[Row]:
    """Rows of Kafka's reset-offsets CSV: `topic,partition,offset` (the group is `group`) or
    `group,topic,partition,offset`; no header; blank lines are skipped."""
    if group is not None:
        check_name(group, "group")
    rows: list[Row] = []
    seen: dict[tuple[str, str, int], int] = {}  # queue -> the line that gave it
    for line_no, raw in enumerate(text.removeprefix("\ufeff").splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3:
            if group is None:
                raise InvalidInput(
                    f"line {line_no}: {line!r} names no group: give --group or use "
                    "group,topic,partition,offset")
            g, (topic, part, off) = group, fields
        elif len(fields) == 4:
            g, topic, part, off = fields
        else:
            raise InvalidInput(
                f"line {line_no}: expected topic,partition,offset or "
                f"group,topic,partition,offset, got {len(fields)} fields: {line[:80]!r}")
        try:
            check_name(g, "group")
            check_name(topic, "topic")
        except InvalidInput as e:
            raise InvalidInput(f"line {line_no}: {e}") from None
        if _DIGITS.fullmatch(part) is None or int(part) > QUEUE_ID_MAX:
            raise InvalidInput(
                f"line {line_no}: invalid partition {part!r}: must be an integer between 0 and "
                f"{QUEUE_ID_MAX}")
        if _DIGITS.fullmatch(off) is None or int(off) > OFFSET_MAX:
            raise InvalidInput(
                f"line {line_no}: invalid offset {off!r}: must be an integer between 0 and "
                f"{OFFSET_MAX}")
        first = seen.setdefault((g, topic, int(part)), line_no)
        if first != line_no:
            raise InvalidInput(
                f"line {line_no}: duplicate queue {topic}:{part} of group {g!r} (line {first} "
                "gives it too): one offset per queue")
        rows.append((g, topic, int(part), int(off)))
    return rows


def to_kafka_csv(rows: list[tuple[str, int, int]]) -> str:
    """`topic,partition,offset` lines (the format `parse_kafka_csv` reads back)."""
    return "".join(f"{t},{q},{o}\n" for t, q, o in rows)
