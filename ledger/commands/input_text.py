"""Bytes a user hands over as text (an `apply` file, a tool's output to import, a plan): UTF-8,
and where they are not (a binary file, another encoding), an error naming the line and column."""

from __future__ import annotations

from ledger.errors import InvalidInput

_BOM = b"\xef\xbb\xbf"


def not_utf8(data: bytes, first_line: int | None = 1) -> str:
    """Where `data` (whose first line is line `first_line`; None: a line of no number) stops
    being UTF-8, for an error message: `line N, column C: byte 0x.. is not UTF-8 text`."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start)
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        where = "" if first_line is None else f"line {first_line + line}, "
        return (f"{where}column {column}: byte {data[e.start]:#04x} is not UTF-8 text (a binary "
                "file, or another encoding?)")
    return "not UTF-8 text"


def utf8_error(error: Exception, data: bytes, first_line: int | None = 1) -> str | None:
    """`not_utf8`'s message for a JSON decoder's `error` about bytes that are not UTF-8 in a
    string, else None: msgspec (0.23) says only "Invalid UTF-8 encoded string" there, where
    older versions raised UnicodeDecodeError."""
    if "UTF-8" not in str(error):
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return not_utf8(data, first_line)
    return None


def text_of(data: bytes, what: str) -> str:
    """`data` as text (a UTF-8 BOM dropped); InvalidInput naming `what` and the line if it is
    not UTF-8."""
    data = data.removeprefix(_BOM)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{what}: {not_utf8(data)}") from None
