"""Active-segment framing: `[u32 LE payload length][u32 LE crc32c(payload)][payload]`.

The payload is one Arrow IPC encapsulated record batch message (`RecordBatch.serialize()`), read
back with `pa.ipc.read_record_batch(buffer, schema)`: the log knows the schema, so frames carry
none. A crash leaves at most a torn last frame; the decoder stops at the first frame that is
short or fails its checksum and reports where the intact prefix ends.

Measured (1,000,000 offset-workload events of the ledger's 13-column schema, batches of 1,000,
one core): Arrow IPC encodes in 0.08 s and decodes in 0.04 s at 106 bytes/event; msgpack via
msgspec (columns as lists) encodes in 0.66 s and decodes back to Arrow in 1.5 s at 60 bytes/event.
A 1-row batch costs 14 us / 1.2 KB as Arrow IPC vs 62 us / 172 B as msgpack. Sealing needs the
batches as Arrow anyway (kept in memory, no decode) and tail reads decode without per-row work,
so Arrow IPC wins end to end; the larger WAL only matters for tiny batches, which roll on
`segment_bytes_max` earlier.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import crc32c
import msgspec
import pyarrow as pa

HEADER = struct.Struct("<II")
HEADER_BYTES = HEADER.size
PAYLOAD_BYTES_MAX = 2**32 - 1
# Every payload is an Arrow IPC message, which starts with this continuation marker: where to
# look for an intact frame after a damaged one.
_IPC_CONTINUATION = b"\xff\xff\xff\xff"


class DecodedFrames(msgspec.Struct):
    """The intact prefix of a framed file: its batches, where it ends, and why decoding stopped."""

    batches: list[pa.RecordBatch]
    end_offset: int
    total_bytes: int
    error: str | None = None
    # The bytes after the prefix can only be a torn last write: a frame header cut short, a
    # frame running to or past the end of the file, or zeros, with no intact frame after it.
    # Anything else (a bad frame with bytes after it, an intact frame after a damaged one
    # whatever its length field says, a frame whose checksum holds but whose rows do not fit)
    # is corruption.
    torn: bool = True

    @property
    def bytes_cut(self) -> int:
        """Bytes after the intact prefix (a torn or corrupt tail)."""
        return self.total_bytes - self.end_offset


def encode_frame(batch: pa.RecordBatch) -> tuple[bytes, pa.Buffer]:
    """One frame holding `batch` as (header, payload), written back to back without a copy.

    Raises ValueError if the batch is too large for a u32 length.
    """
    payload = batch.serialize()
    if payload.size > PAYLOAD_BYTES_MAX:
        raise ValueError(f"batch of {payload.size} bytes exceeds the frame limit")
    return HEADER.pack(payload.size, crc32c.crc32c(payload)), payload


class FrameEncoder:
    """`encode_frame` for a log's appends, large batches encoded into one buffer kept from
    frame to frame (a payload is valid until the next `encode`: the caller writes it first).

    Why: a fresh buffer's pages are faulted in on first touch, and Arrow's pool returns a
    freed large buffer's pages to the OS at once. A bulk apply's 15 MB frame (131,072
    commands) cost 3,700 page faults and 7 ms alone (about 29 ms inside a 1M-command apply,
    other threads faulting beside it) against 2 ms into a kept buffer. Small frames (a
    server's commits) are served by the pool's cached pages: they go through `encode_frame`,
    whose cost per call is lower."""

    #: A batch of at least this many bytes is encoded into the kept buffer.
    REUSE_BYTES_MIN = 1 << 20
    #: A frame larger than this is encoded alone, so the buffer kept stays bounded.
    KEEP_BYTES_MAX = 64 << 20

    def __init__(self) -> None:
        self._buffer: pa.Buffer | None = None
        self._schema_bytes: dict[pa.Schema, int] = {}

    def encode(self, batch: pa.RecordBatch) -> tuple[bytes, pa.Buffer]:
        """(header, payload) as `encode_frame` gives them, the same bytes."""
        if batch.nbytes < self.REUSE_BYTES_MIN:
            return encode_frame(batch)
        size = pa.ipc.get_record_batch_size(batch)
        schema_bytes = self._schema_bytes.get(batch.schema)
        if schema_bytes is None:
            schema_bytes = self._schema_bytes[batch.schema] = batch.schema.serialize().size
        # the stream writer writes the schema message, then the batch's (the same bytes as
        # `RecordBatch.serialize`), and its end-of-stream marker on close
        needed = schema_bytes + size + 64
        if needed > self.KEEP_BYTES_MAX:
            return encode_frame(batch)
        if self._buffer is None or self._buffer.size < needed:  # grown by doubling, bounded
            grown = 2 * self._buffer.size if self._buffer is not None else 0
            self._buffer = pa.allocate_buffer(min(max(needed, grown), self.KEEP_BYTES_MAX))
        sink = pa.FixedSizeBufferWriter(self._buffer)
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
            end = sink.tell()
        if end - schema_bytes != size:  # not the layout measured: encode it alone
            return encode_frame(batch)
        payload = self._buffer.slice(schema_bytes, size)
        return HEADER.pack(size, crc32c.crc32c(payload)), payload


def frame_bytes(batch: pa.RecordBatch) -> bytes:
    """One frame as contiguous bytes (tools and tests; the log writes header and payload)."""
    header, payload = encode_frame(batch)
    return header + payload.to_pybytes()


class SeqChain:
    """A `validate` for `decode_frames`: each batch continues the seqs at `next_seq` (dense, from
    the segment's base) and has no null ts; `next_seq` ends after the last batch accepted."""

    def __init__(self, base_seq: int, seq_index: int, ts_index: int) -> None:
        self.next_seq = base_seq
        self._seq_index = seq_index
        self._ts_index = ts_index

    def __call__(self, batch: pa.RecordBatch) -> str | None:
        if batch.num_rows == 0:
            return "empty batch"
        seqs = batch.column(self._seq_index)
        first, last = seqs[0].as_py(), seqs[-1].as_py()
        if first != self.next_seq or last != self.next_seq + batch.num_rows - 1:
            return f"seqs {first}..{last} do not continue at {self.next_seq}"
        if batch.column(self._ts_index).null_count:
            return "null ts"
        self.next_seq += batch.num_rows
        return None


def decode_frames(
    data: bytes | pa.Buffer,
    schema: pa.Schema,
    *,
    validate: Callable[[pa.RecordBatch], str | None] | None = None,
) -> DecodedFrames:
    """Decode frames from the start of `data` up to the first bad one.

    `validate` may reject a decoded batch (returns the reason), which ends the prefix there too,
    e.g. a batch whose seqs do not continue the previous one.
    """
    buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
    total = buffer.size
    batches: list[pa.RecordBatch] = []
    pos = 0
    error: str | None = None
    torn = True
    while pos < total:
        if total - pos < HEADER_BYTES:
            error = f"torn frame header at byte {pos}"
            break
        length, checksum = HEADER.unpack_from(buffer, pos)
        if length == 0 or total - pos - HEADER_BYTES < length:
            error = f"torn frame at byte {pos} (length {length})"
            torn = length != 0 or not buffer.slice(pos).to_pybytes().strip(b"\0")
            break
        payload = buffer.slice(pos + HEADER_BYTES, length)
        if crc32c.crc32c(payload) != checksum:
            error = f"checksum mismatch in frame at byte {pos}"
            torn = pos + HEADER_BYTES + length == total  # the last write, never fsynced
            break
        try:
            batch = pa.ipc.read_record_batch(payload, schema)
        except (pa.ArrowException, ValueError) as exc:
            error = f"undecodable frame at byte {pos}: {exc}"
            torn = False
            break
        if validate is not None:
            why = validate(batch)
            if why is not None:
                error = f"invalid frame at byte {pos}: {why}"
                torn = False
                break
        batches.append(batch)
        pos += HEADER_BYTES + length
    if error is not None and torn:
        later = intact_frame_after(buffer, pos)
        if later is not None:
            # a crash tears only the last write: a damaged length field made this frame look
            # like one that runs past the end, but the frames after it were written after it
            error += f", yet an intact frame follows at byte {later}"
            torn = False
    return DecodedFrames(batches=batches, end_offset=pos, total_bytes=total, error=error,
                         torn=torn)


def intact_frame_after(buffer: pa.Buffer, pos: int) -> int | None:
    """The offset of the first intact frame (its checksum holds) starting after `pos`, or None.

    Candidates are the places where an Arrow IPC message starts; a checksum over a random
    stretch of bytes holds once in 2**32, so a torn tail's bytes are not taken for a frame."""
    blob = buffer.to_pybytes()
    total = len(blob)
    at = blob.find(_IPC_CONTINUATION, pos + 1 + HEADER_BYTES)
    while at != -1:
        start = at - HEADER_BYTES
        length, checksum = HEADER.unpack_from(blob, start)
        if 0 < length <= total - at and crc32c.crc32c(blob[at:at + length]) == checksum:
            return start
        at = blob.find(_IPC_CONTINUATION, at + 1)
    return None
