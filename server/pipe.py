"""Messages over a socket pair between the server and a process of its own (the writer, the
reader): each one its length (4 bytes, big-endian), then its bytes."""

from __future__ import annotations

import asyncio
import socket
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


class Outbox:
    """What an event loop sends on a non-blocking socket, in order: as much as the socket
    takes at once, the rest when it is writable. A socket that fails to send is left to its
    reader, which finds the peer gone at the end of the stream."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self._loop = loop
        self._sock = sock
        self._out = bytearray()

    def send(self, data: bytes | bytearray) -> None:
        if self._out:
            self._out += data
            return
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:  # the peer is gone: its end of file is read next
            return
        if sent < len(data):
            self._out = bytearray(data[sent:])
            self._loop.add_writer(self._sock.fileno(), self._writable)

    def _writable(self) -> None:
        try:
            sent = self._sock.send(self._out)
        except BlockingIOError:
            return
        except OSError:  # the peer is gone: its end of file is read next
            sent = len(self._out)
        del self._out[:sent]
        if not self._out:
            self._loop.remove_writer(self._sock.fileno())
