"""Decoded row groups kept by a reader (storage/decoded.py): a keyed read asked again takes its
row groups from memory and answers the same rows; reads of other columns or other row groups
decode theirs; the byte budget drops the least recently used; after a compaction swap the new
files are decoded."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage import LogSettings
from storage.decoded import DecodedRowGroups
from tests.storage.storage_helpers import concat, make_rows, open_log, with_seqs


def clustered_log(root: Path):
    settings = LogSettings(segment_events_max=400, cluster_columns=("consumer_group",),
                           cluster_row_group_events=20, durability="none")
    log = open_log(root, settings)
    pieces = []
    for start in range(0, 1000, 100):
        rows = make_rows(100, ts=1_000 + start, salt=start)
        pieces.append(with_seqs(rows, log.append(rows).first_seq))
    log.settle()
    return log, concat(pieces)


def group_rows(expected: pa.Table, group: str) -> pa.Table:
    return expected.filter(pc.fill_null(pc.equal(expected.column("consumer_group"), group), False))


def test_a_keyed_read_asked_again_takes_its_row_groups_from_memory(tmp_path: Path):
    log, expected = clustered_log(tmp_path)
    assert len(log.segments()) >= 2
    want = group_rows(expected, "group-2")
    first = log.read(where={"consumer_group": ["group-2"]})
    stats = log.last_read_stats
    assert first.equals(want)
    assert stats.row_groups_decoded == stats.row_groups_read > 0
    again = log.read(where={"consumer_group": ["group-2"]})
    assert again.equals(want)
    assert log.last_read_stats.row_groups_read == stats.row_groups_read
    assert log.last_read_stats.row_groups_decoded == 0
    # a time window of the same group: the same row groups or fewer, none decoded
    window = log.read(ts_gte=1_200, ts_lt=1_600, where={"consumer_group": ["group-2"]})
    mask = pc.and_(pc.greater_equal(want.column("ts"), 1_200), pc.less(want.column("ts"), 1_600))
    assert window.equals(want.filter(mask))
    assert log.last_read_stats.row_groups_decoded == 0
    # other columns are another form of the row groups: decoded, and right
    narrow = log.read(where={"consumer_group": ["group-2"]}, columns=["seq", "offset"])
    assert narrow.equals(want.select(["seq", "offset"]))
    assert log.last_read_stats.row_groups_decoded == stats.row_groups_read
    # another group's row groups are decoded on their first read
    log.read(where={"consumer_group": ["group-4"]})
    assert log.last_read_stats.row_groups_decoded > 0
    log.close()


def test_a_key_inside_a_group_asked_again_is_cut_from_its_rows_taken_once(tmp_path: Path):
    """A key inside a group's row groups (here two queues) is taken from them once per set of
    row groups and kept; reads in any window, in any order, answer its rows cut to their
    bounds, never a window's rows kept for another window's."""
    log, expected = clustered_log(tmp_path)
    where = {"consumer_group": ["group-2"], "queue_id": [2, 5]}
    rows = group_rows(expected, "group-2")
    key = rows.filter(pc.is_in(rows.column("queue_id"), pa.array([2, 5], pa.int32())))
    assert key.num_rows > 20

    def want(bounds: dict[str, int]) -> pa.Table:
        mask = pc.is_valid(key.column("seq"))
        for name, op in (("ts_gte", pc.greater_equal), ("ts_lt", pc.less),
                         ("seq_gte", pc.greater_equal), ("seq_lt", pc.less)):
            if name in bounds:
                mask = pc.and_(mask, op(key.column(name.split("_")[0]), bounds[name]))
        return key.filter(mask)

    pick = random.Random(7)
    for _ in range(60):
        bounds: dict[str, int] = {}
        if pick.random() < 0.7:
            lo = pick.randrange(1_000, 2_000)
            bounds |= {"ts_gte": lo, "ts_lt": lo + pick.randrange(1, 600)}
        if pick.random() < 0.4:
            lo = pick.randrange(0, 1_000)
            bounds |= {"seq_gte": lo, "seq_lt": lo + pick.randrange(1, 500)}
        got = log.read(where=where, **bounds)
        assert got.equals(want(bounds)), bounds
    assert log.read(where=where).equals(key)
    assert log.read(where=where, newest=3).equals(key.slice(key.num_rows - 3))
    assert log.last_read_stats.row_groups_decoded == 0  # the group's row groups are held
    # another key of the same group: its own rows, not the first key's
    other = log.read(where={"consumer_group": ["group-2"], "queue_id": [7]})
    assert other.equals(rows.filter(pc.equal(rows.column("queue_id"), 7)))
    log.close()


def test_after_a_compaction_swap_reads_decode_the_new_files(tmp_path: Path):
    log, expected = clustered_log(tmp_path / "data")
    want = group_rows(expected, "group-1")
    assert log.read(where={"consumer_group": ["group-1"]}).equals(want)
    old = log.segments()[:2]
    merged = expected.slice(old[0].base_seq, old[1].end_seq - old[0].base_seq)
    staged = tmp_path / "merged.parquet"
    pq.write_table(merged, staged, row_group_size=50)
    log.replace(old, [staged])
    got = log.read(where={"consumer_group": ["group-1"]})
    assert got.equals(want)
    assert log.last_read_stats.row_groups_decoded > 0  # nothing answered from before the swap
    log.close()


def table_of(rows: int) -> pa.Table:
    return pa.table({"v": pa.array(range(rows), pa.int64())})


def test_the_byte_budget_drops_the_least_recently_used():
    one = table_of(100).nbytes
    kept = DecodedRowGroups(bytes_max=4 * one + one // 2)
    for i in range(4):
        kept.put(("f", i, ("v",), None), table_of(100))
    assert len(kept) == 4
    assert kept.get(("f", 0, ("v",), None)) is not None  # 0 is now the most recently used
    kept.put(("f", 4, ("v",), None), table_of(100))
    assert len(kept) == 4 and kept.bytes <= kept.bytes_max
    assert kept.get(("f", 1, ("v",), None)) is None  # the least recently used went first
    assert kept.get(("f", 0, ("v",), None)) is not None
    kept.put(("f", 9, ("v",), None), table_of(400))  # over a quarter of the budget: not kept
    assert kept.get(("f", 9, ("v",), None)) is None
