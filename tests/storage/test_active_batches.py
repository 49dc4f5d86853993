"""The active segment's rows are read from O(log n) batches however small the appends were:
a reader following a writer of one-row frames must not pay a take per frame on every read."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from storage import LogSettings
from storage.active import fewer_batches
from tests.storage.storage_helpers import open_log


def _batches(sizes: list[int]) -> list[pa.RecordBatch]:
    out, start = [], 0
    for n in sizes:
        out.append(pa.record_batch({"v": pa.array(range(start, start + n), pa.int64())}))
        start += n
    return out


@settings(max_examples=200, deadline=None)
@example([259, 129, 64, 31, 15, 7, 3, 1])  # a stack already as tight as it may be
@given(st.lists(st.integers(min_value=1, max_value=300), max_size=300))
def test_fewer_batches_keeps_every_row_in_order_in_a_run_stack(sizes: list[int]) -> None:
    merged = fewer_batches(_batches(sizes))
    rows = [b.num_rows for b in merged]
    assert pa.Table.from_batches(merged, pa.schema([("v", pa.int64())])).column("v") \
        .to_pylist() == list(range(sum(sizes)))
    assert all(a > 2 * b for a, b in zip(rows, rows[1:], strict=False))  # the invariant
    assert fewer_batches(merged) == merged  # nothing left to merge: no copy on the next read
    if sizes:  # the first batch > 2^(m-1) x the last >= 2^(m-1) x the smallest appended
        assert len(merged) <= math.log2(sum(sizes) / min(sizes)) + 1


def test_a_reader_following_one_row_frames_reads_from_few_batches(tmp_path: Path) -> None:
    settings_ = LogSettings(segment_events_max=1_000_000)
    with open_log(tmp_path, settings_) as writer:
        reader = open_log(tmp_path, settings_, writer=False)
        for i in range(3_000):
            writer.append(pa.RecordBatch.from_pydict(
                {"seq": [-1], "ts": [1_000 + i], "kind": ["commit"],
                 "consumer_group": [f"g{i % 3}"], "queue_id": [i % 4], "offset": [i],
                 "detail": [None]}, schema=writer.schema))
            if i % 97 == 0:
                reader.refresh()
                assert reader.read(where={"consumer_group": ["g1"]}).num_rows == \
                    len([k for k in range(i + 1) if k % 3 == 1])
        reader.refresh()
        tail = reader.tail()
        assert tail.num_rows == 3_000
        assert tail.column("offset").to_pylist() == list(range(3_000))
        # 3,000 one-row frames: without the merge, a dozen batches of 256 rows (or 3,000)
        assert tail.column("offset").num_chunks <= 4
        got = reader.read(where={"consumer_group": ["g2"]}, ts_gte=1_500, ts_lt=2_500)
        assert got.column("offset").to_pylist() == [i for i in range(500, 1_500) if i % 3 == 2]
        assert got.equals(writer.read(where={"consumer_group": ["g2"]}, ts_gte=1_500,
                                      ts_lt=2_500))
        reader.close()


@settings(max_examples=25, deadline=None)
@example([2] * 1_100)  # a server's frames: merged 32 at a time, and those 32 at a time
@example([3] * 40 + [5_000] + [1] * 40)  # a large batch after small ones
@given(st.lists(st.one_of(st.integers(1, 3), st.integers(1, 4_200)), min_size=1, max_size=1_100))
def test_appends_merge_a_bounded_number_of_batches_and_keep_every_row_in_order(
        tmp_path_factory: pytest.TempPathFactory, sizes: list[int]) -> None:
    """A writer's append merges at most 32 batches at a time (a server's writer merging 256
    small frames at once held every waiting request 3-5 ms), and the rows stay in seq order."""
    merged_at_once: list[int] = []
    concat = pa.concat_batches

    def spy(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
        merged_at_once.append(len(batches))
        return concat(batches)

    root = tmp_path_factory.mktemp("log")
    with open_log(root, LogSettings(segment_events_max=10_000_000)) as writer, \
            pytest.MonkeyPatch.context() as patch:
        patch.setattr(pa, "concat_batches", spy)
        offset = 0
        for n in sizes:
            writer.append(pa.RecordBatch.from_pydict(
                {"seq": [-1] * n, "ts": [1_000] * n, "kind": ["commit"] * n,
                 "consumer_group": ["g"] * n, "queue_id": [0] * n,
                 "offset": list(range(offset, offset + n)), "detail": [None] * n},
                schema=writer.schema))
            offset += n
        assert max(merged_at_once, default=0) <= 32
        patch.undo()
        assert writer.tail().column("offset").to_pylist() == list(range(offset))
