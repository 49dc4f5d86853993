"""JSON objects that give a key twice are refused: msgspec, like most decoders, keeps the last
value silently, so `{"offset": 10, "offset": 900}` would commit 900 whatever the sender meant.

The check costs a byte count per document: every key of valid JSON is followed by exactly one
`:` outside strings, so a document holding as many colons as its decoded objects hold keys has
no key twice. Only a document with more (a colon inside a string, a time like 10:00, or a key
given twice) is scanned again, by the standard library's decoder, to find the key.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ledger.commands.input_text import utf8_error
from ledger.errors import InvalidInput

_loose = msgspec.json.Decoder()
_BOM = b"\xef\xbb\xbf"


def _keys(value: Any) -> int:
    """Keys of every object in a decoded JSON value."""
    if isinstance(value, dict):
        return len(value) + sum(_keys(v) for v in value.values() if isinstance(v, dict | list))
    if isinstance(value, list):
        return sum(_keys(v) for v in value if isinstance(v, dict | list))
    return 0


def duplicate_key(data: bytes, decoded: Any) -> str | None:
    """The first key given twice in one object of `data` (valid JSON, `decoded` its value), or
    None."""
    colons = data.count(b":")
    # colons >= keys of every object >= keys of the outer one: equal to the latter, no object
    # is nested and each key is given once (the common flat command, without a second count)
    if (type(decoded) is dict and colons == len(decoded)) or colons == _keys(decoded):
        return None
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> None:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen and not found:
                found.append(key)
            seen.add(key)

    try:
        json.loads(data.removeprefix(_BOM), object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return None  # what msgspec read and the standard library cannot: no judgement
    return found[0] if found else None


def check_unique_keys(data: bytes, decoded: Any, what: str) -> None:
    """Raise InvalidInput naming a key that `data` gives twice in one object of `what`."""
    key = duplicate_key(data, decoded)
    if key is not None:
        raise InvalidInput(f"duplicate key {key!r} in {what}: give each field once")


def decode_strict(data: bytes, what: str) -> Any:
    """`data` decoded as JSON, refused (naming `what`) when invalid or when a key is given twice."""
    try:
        value = _loose.decode(data.removeprefix(_BOM))
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as e:
        raise InvalidInput(f"{what}: {utf8_error(e, data) or f'invalid JSON: {e}'}") from None
    check_unique_keys(data, value, what)
    return value
