"""Messages over a socket pair between the server and a process of its own (the writer, the
reader): each one its length (4 bytes, big-endian), then its bytes."""

from __future__ import annotations

import struct
from typing import BinaryIO

_HEADER = struct.Struct("!I")


def frame(payload: bytes) -> bytes:
    """A message on the pipe: its length (4 bytes, big-endian), then its bytes."""
    return _HEADER.pack(len(payload)) + payload


class Frames:
    """The messages of a byte stream that arrives in pieces (a non-blocking socket's reads)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The messages `data` completes, in order; a partial one waits for more."""
        buffer = self._buffer
        buffer += data
        messages: list[bytes] = []
        at = 0
        while len(buffer) - at >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buffer, at)
            if len(buffer) - at - _HEADER.size < size:
                break
            at += _HEADER.size
            messages.append(bytes(buffer[at:at + size]))
            at += size
        del buffer[:at]
        return messages


def read_frame(stream: BinaryIO) -> bytes | None:
    """One message from a blocking stream; None at its end."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    payload = stream.read(size)
    return payload if len(payload) == size else None
