"""RocketMQ's `consumerOffset.json`, as brokers write it: a pure function from text to rows.

RocketMQ brokers write `consumerOffset.json` with fastjson, whose integer map keys are not quoted
(`{"offsetTable":{"T@G":{0:12,1:7}}}`), so it is not strict JSON. We quote bare integer keys with
a scanner that respects string literals, then decode with msgspec; nothing is ever evaluated.
Every error is an `InvalidInput` naming the line, and the key where there is one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgspec

from ledger.commands.strict_json import duplicate_key
from ledger.errors import InvalidInput
from ledger.importers.result import ImportTally, Row
from ledger.limits import OFFSET_MAX, QUEUE_ID_MAX, check_name

_BARE_KEY = re.compile(rb"\s*(-?\d+)\s*:")
_DIGITS = re.compile(r"[0-9]+")
_BYTE_POS = re.compile(r"\s*\(byte \d+\)")
BROADCAST_SUFFIX = "broadcast"


@dataclass(frozen=True, slots=True)
class RocketMQSnapshot:
    """The offsets of one `consumerOffset.json`: rows, which groups are broadcast, its version."""

    rows: tuple[Row, ...]
    broadcast_groups: tuple[str, ...]
    data_version: dict[str, Any] | None = None


def quote_bare_keys(data: bytes) -> bytes:
    """Quote unquoted integer object keys (fastjson's `{0:12}`) outside string literals.

    Only a key right after `{` or `,` is touched, so numbers in values and strings never change.
    No newline is added or removed: line numbers of the result are those of the input.
    """
    out = bytearray()
    i, n = 0, len(data)
    in_string = False
    while i < n:
        c = data[i]
        if in_string:
            out.append(c)
            if c == 0x5C and i + 1 < n:  # backslash: copy the escaped byte too
                out.append(data[i + 1])
                i += 2
                continue
            if c == 0x22:
                in_string = False
            i += 1
            continue
        out.append(c)
        i += 1
        if c == 0x22:
            in_string = True
        elif c in (0x7B, 0x2C):  # '{' or ','
            m = _BARE_KEY.match(data, i)
            if m is not None:
                lead = data[i:m.start(1)]
                out += lead + b'"' + m.group(1) + b'"' + data[m.end(1):m.end()]
                i = m.end()
    return bytes(out)


def _line_of(data: bytes, byte_pos: int) -> int:
    return data.count(b"\n", 0, max(byte_pos, 0)) + 1


def _find_key(data: bytes, key: str, start: int = 0) -> int:
    """Byte position of object key `key` (quoted or bare, followed by `:`) at or after `start`."""
    k = re.escape(key.encode())
    m = re.compile(rb'"' + k + rb'"\s*:|(?<=[{,\s])' + k + rb"\s*:").search(data, start)
    return m.start() if m is not None else -1


def _where(data: bytes, *keys: str) -> str:
    """`line N: offsetTable[...]` for an error message, locating nested keys in order."""
    pos, line = _find_key(data, "offsetTable"), None
    for k in keys:
        found = _find_key(data, k, max(pos, 0))
        if found < 0:
            break
        pos, line = found, _line_of(data, found)
    path = "offsetTable" + "".join(f"[{k!r}]" for k in keys)
    return f"line {line}: {path}" if line is not None else path


def _decode_error_line(data: bytes, message: str) -> str:
    m = re.search(r"\(byte (\d+)\)", message)
    if m is None:
        return message
    line = _line_of(data, int(m.group(1)))
    return f"line {line}: {_BYTE_POS.sub('', message)}"


def parse_rocketmq_offsets(text: str | bytes) -> RocketMQSnapshot:
    """Rows of a RocketMQ broker's `consumerOffset.json` (fastjson; quoted keys accepted too).

    Keys are `topic@group` (retry topics such as `%RETRY%G@G` stay topics) or
    `topic@group@broadcast` for broadcast groups.
    """
    data = text.encode() if isinstance(text, str) else bytes(text)
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        raise InvalidInput("line 1: empty consumerOffset.json")
    quoted = quote_bare_keys(data)
    try:
        doc = msgspec.json.decode(quoted)
    except msgspec.DecodeError as e:
        raise InvalidInput(
            f"not a consumerOffset.json: {_decode_error_line(quoted, str(e))}") from None
    if not isinstance(doc, dict):
        raise InvalidInput("line 1: consumerOffset.json must be a JSON object")
    twice = duplicate_key(quoted, doc)
    if twice is not None:
        raise InvalidInput(f"consumerOffset.json gives key {twice!r} twice in one object: "
                           "each key once")
    table = doc.get("offsetTable")
    if table is None:
        raise InvalidInput("consumerOffset.json has no \"offsetTable\" key")
    if not isinstance(table, dict):
        line = _line_of(data, _find_key(data, "offsetTable"))
        raise InvalidInput(f"line {line}: \"offsetTable\" must be an object")
    rows: list[Row] = []
    broadcast: set[str] = set()
    seen: dict[tuple[str, str, int], str] = {}  # queue -> the key that gave it
    for key, queues in table.items():
        parts = key.split("@")
        if len(parts) == 3 and parts[2] == BROADCAST_SUFFIX:
            topic, group = parts[0], parts[1]
            broadcast.add(group)
        elif len(parts) == 2:
            topic, group = parts
        else:
            raise InvalidInput(
                f"{_where(data, key)}: key must be topic@group or topic@group@broadcast")
        try:
            check_name(topic, "topic")
            check_name(group, "group")
        except InvalidInput as e:
            raise InvalidInput(f"{_where(data, key)}: {e}") from None
        if not isinstance(queues, dict):
            raise InvalidInput(f"{_where(data, key)}: must be an object of queue id -> offset")
        for qkey, offset in queues.items():
            if _DIGITS.fullmatch(qkey) is None or int(qkey) > QUEUE_ID_MAX:
                raise InvalidInput(
                    f"{_where(data, key, qkey)}: queue id {qkey!r} must be an integer "
                    f"between 0 and {QUEUE_ID_MAX}")
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise InvalidInput(
                    f"{_where(data, key, qkey)}: offset {offset!r} is not an integer")
            if offset < 0 or offset > OFFSET_MAX:
                raise InvalidInput(
                    f"{_where(data, key, qkey)}: offset {offset} must be between 0 and "
                    f"{OFFSET_MAX}")
            first = seen.setdefault((group, topic, int(qkey)), f"{key}[{qkey}]")
            if first != f"{key}[{qkey}]":
                raise InvalidInput(
                    f"{_where(data, key, qkey)}: queue {topic}:{int(qkey)} of group {group!r} "
                    f"is given twice ({first} too): one offset per queue")
            rows.append((group, topic, int(qkey), offset))
    version = doc.get("dataVersion")
    return RocketMQSnapshot(tuple(rows), tuple(sorted(broadcast)),
                            version if isinstance(version, dict) else None)


def rocketmq_snapshot_commands(snapshot: RocketMQSnapshot, source: str) -> list[dict[str, Any]]:
    """The `apply` commands that make the ledger hold a snapshot: broadcast groups first (so their
    offsets are kept per client from the first sync on), then one sync per offset row."""
    tally = ImportTally(source)
    for group, topic, queue_id, offset in snapshot.rows:
        tally.sync(group, topic, queue_id, offset)
    modes: list[dict[str, Any]] = [{"op": "group_set", "group": group, "mode": "broadcast"}
                                   for group in snapshot.broadcast_groups]
    return modes + tally.commands
