"""The log's frame encoder: large frames encoded into one kept buffer are the bytes that
`encode_frame` gives, whatever the order of sizes, and a log written through it recovers."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from storage.frames import FrameEncoder, decode_frames, encode_frame
from tests.storage.storage_helpers import SCHEMA, make_rows, open_log, with_seqs


def _batch(n: int, salt: int) -> pa.RecordBatch:
    if n == 0:
        return pa.RecordBatch.from_pylist([], schema=SCHEMA)
    return with_seqs(make_rows(n, salt=salt), salt).to_batches()[0]


def _frame(encoded: tuple[bytes, pa.Buffer]) -> bytes:
    header, payload = encoded
    return header + payload.to_pybytes()


@pytest.fixture
def encoder(monkeypatch: pytest.MonkeyPatch) -> FrameEncoder:
    # a small threshold, so that test-sized batches take the kept buffer
    monkeypatch.setattr(FrameEncoder, "REUSE_BYTES_MIN", 1)
    return FrameEncoder()


def test_kept_buffer_frames_are_the_bytes_of_encode_frame(encoder: FrameEncoder) -> None:
    # large, then smaller (the kept buffer holds the larger one's bytes after it), then one
    # that makes it grow, then tiny and empty ones
    for i, n in enumerate((20_000, 3, 5_000, 60_000, 1, 0, 20_000)):
        batch = _batch(n, salt=i * 100_000)
        assert _frame(encoder.encode(batch)) == _frame(encode_frame(batch)), n


def test_a_payload_is_its_own_batch_until_the_next_encode(encoder: FrameEncoder) -> None:
    batch = _batch(10_000, salt=7)
    header, payload = encoder.encode(batch)
    decoded = decode_frames(header + payload.to_pybytes(), SCHEMA)
    assert decoded.error is None
    assert pa.Table.from_batches(decoded.batches).equals(pa.Table.from_batches([batch]))


def test_frames_over_the_kept_limit_are_encoded_alone(monkeypatch: pytest.MonkeyPatch,
                                                      encoder: FrameEncoder) -> None:
    monkeypatch.setattr(FrameEncoder, "KEEP_BYTES_MAX", 4096)
    batch = _batch(20_000, salt=3)
    assert _frame(encoder.encode(batch)) == _frame(encode_frame(batch))
    assert encoder._buffer is None  # nothing was kept for it


def test_a_log_of_large_appends_recovers_every_event(tmp_path: Path,
                                                     encoder: FrameEncoder) -> None:
    sizes = (30_000, 2, 12_000, 45_000, 1)
    log = open_log(tmp_path)
    for i, n in enumerate(sizes):
        log.append(make_rows(n, ts=1_000 + i, salt=i))
    log.close()
    reopened = open_log(tmp_path)
    try:
        events = reopened.read()
        assert events.num_rows == sum(sizes)
        assert events.column("seq").to_pylist() == list(range(sum(sizes)))
        want = pa.concat_tables([with_seqs(make_rows(n, ts=1_000 + i, salt=i), 0)
                                 for i, n in enumerate(sizes)])
        for name in ("ts", "kind", "consumer_group", "queue_id", "offset", "detail"):
            assert events.column(name).to_pylist() == want.column(name).to_pylist(), name
    finally:
        reopened.close()


def test_the_kept_buffer_grows_but_never_past_its_bound(monkeypatch: pytest.MonkeyPatch,
                                                        encoder: FrameEncoder) -> None:
    small, large = _batch(4_000, salt=1), _batch(7_000, salt=2)
    bound = pa.ipc.get_record_batch_size(large) + 4096  # room for `large`, not for twice `small`
    monkeypatch.setattr(FrameEncoder, "KEEP_BYTES_MAX", bound)
    for batch in (small, large, small):
        assert _frame(encoder.encode(batch)) == _frame(encode_frame(batch))
        assert encoder._buffer is not None and encoder._buffer.size <= bound
