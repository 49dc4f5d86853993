"""Compaction: nothing lost, layout as designed in either order, idempotent, crash safe, queries
unchanged; seq order is the smaller."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ledger import Ledger
from spark_compaction import compact
from spark_compaction.checksum import content_checksum
from spark_compaction.compaction import ORDER_DEFAULT, ORDERS, plan_runs
from spark_compaction.session import read_events
from storage import LockedError, SegmentInfo
from storage.names import LOG_DIR, MANIFEST_FILE
from tests.spark.conftest import random_ledger, workload_ledger
from tests.support.faults import Crash, FaultyFS

pytestmark = pytest.mark.spark

# 40-event segments merged 5 at a time into 200-event segments of 32-row row groups.
TARGET = {"target_events": 200, "target_bytes": 10**9, "row_group_events": 32}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[Path, object, list[int]]:
    """A random ledger of ~20 small segments, never changed (tests copy it)."""
    root = tmp_path_factory.mktemp("pristine") / "data"
    clock, times = random_ledger(root, seed=11, commands=600)
    return root, clock, times


@pytest.fixture(scope="module")
def small_pristine(tmp_path_factory) -> tuple[Path, object, list[int]]:
    """A random ledger of 5-6 small segments: one run to compact."""
    root = tmp_path_factory.mktemp("small") / "data"
    clock, times = random_ledger(root, seed=5, commands=170)
    return root, clock, times


def copy_of(pristine: tuple[Path, object, list[int]], tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(pristine[0], root)
    return root


def answers(root: Path, clock, times: list[int], full: bool = True) -> dict[str, object]:
    """What the ledger's queries answer: history, state at a few times and seqs, SQL."""
    with Ledger.open(root, clock=clock) as led:
        if not full:
            return {"history": led.history().to_pylist(),
                    "state_at": led.state_at(ts=times[len(times) // 2]).to_pylist()}
        return {
            "history": led.history(group="g1").to_pylist(),
            "history_queue": led.history(topic="t2", queue_id=1, limit=50).to_pylist(),
            "state_at": [led.state_at(ts=t).to_pylist() for t in times[::97]],
            "state_at_seq": [led.state_at(seq=s).to_pylist() for s in (0, 33, 170, 401, 10**6)],
            "sql": led.sql("SELECT kind, count(*) AS n, sum(\"offset\") AS s, max(seq) AS m "
                           "FROM events GROUP BY kind ORDER BY kind").to_pylist(),
            "prev": led.sql("SELECT seq, prev_offset FROM events WHERE kind = 'commit' "
                            "ORDER BY seq").to_pylist(),
            "progress": led.progress("g2"),
        }


def segment_ranges(root: Path) -> list[tuple[int, int]]:
    with Ledger.open(root, readonly=True) as led:
        return [(s.base_seq, s.end_seq) for s in led.log.segments()]


def info(base: int, events: int, size: int = 1000) -> SegmentInfo:
    return SegmentInfo(base, base + events, 0, 0, events, size, Path(f"{base:020d}.parquet"))


def test_plan_merges_runs_of_small_segments_up_to_the_target():
    segs = [info(i * 10, 10) for i in range(7)]
    runs = plan_runs(segs, target_events=45, target_bytes=10**9)
    assert [[s.base_seq for s in r] for r in runs] == [[0, 10, 20, 30], [40, 50, 60]]
    # What it makes is left alone next time: 40 events is not small for a target of 45.
    merged = [info(0, 40), info(40, 30)]
    assert plan_runs(merged, target_events=45, target_bytes=10**9) == []


def test_plan_leaves_big_segments_and_single_runs_alone():
    segs = [info(0, 10), info(10, 100), info(110, 10), info(120, 100), info(220, 5),
            info(225, 5)]
    runs = plan_runs(segs, target_events=120, target_bytes=10**9)
    assert [[s.base_seq for s in r] for r in runs] == [[220, 225]]


def test_plan_respects_the_byte_target():
    segs = [info(i * 10, 10, size=100) for i in range(6)]
    runs = plan_runs(segs, target_events=10**6, target_bytes=450)
    assert [[s.base_seq for s in r] for r in runs] == [[0, 10, 20, 30], [40, 50]]


def all_events(root: Path) -> list[dict]:
    return read_events(root).toArrow().sort_by("seq").to_pylist()


@pytest.fixture(scope="module", params=ORDERS)
def compacted(request, spark, pristine, tmp_path_factory) -> dict[str, object]:
    """One compaction of a copy of `pristine` in each order, with what was measured before and
    after."""
    order = request.param
    root = copy_of(pristine, tmp_path_factory.mktemp(f"compacted-{order}"))
    _, clock, times = pristine
    before = {"checksum": content_checksum(read_events(root)), "ranges": segment_ranges(root),
              "answers": answers(root, clock, times), "events": all_events(root)}
    out = compact(root, order=order, **TARGET)
    return {"root": root, "out": out, "before": before, "clock": clock, "times": times,
            "order": order}


def test_compaction_keeps_count_checksum_and_every_event_and_is_idempotent(compacted):
    root, out, before = compacted["root"], compacted["out"], compacted["before"]
    ranges, merged = before["ranges"], segment_ranges(root)
    assert out["runs"] >= 3 and len(merged) < len(ranges)
    assert merged[0][0] == ranges[0][0] and merged[-1][1] == ranges[-1][1]
    assert all(a[1] == b[0] for a, b in zip(merged, merged[1:], strict=False))
    assert all(end - base <= TARGET["target_events"] for base, end in merged)
    assert content_checksum(read_events(root)) == before["checksum"]
    assert all_events(root) == before["events"]
    order = compacted["order"]
    assert out["order"] == out["roots"][0]["order"] == order
    assert {run["order"] for run in out["roots"][0]["runs"]} == {order}
    # Only our 20-digit names in log/, no Spark part files, no staging leftovers.
    names = sorted(p.name for p in (root / LOG_DIR).iterdir())
    assert all(n == MANIFEST_FILE or n[:20].isdigit() for n in names), names
    assert not list((root / "compaction").glob("*"))
    again = compact(root, **TARGET)
    assert again["runs"] == 0 and segment_ranges(root) == merged


def test_compacted_row_groups_cover_contiguous_seqs_in_the_chosen_order(compacted):
    with Ledger.open(compacted["root"], readonly=True) as led:
        first = led.log.segments()[0]
    assert first.events > TARGET["row_group_events"]  # a merged segment
    reader = pq.ParquetFile(first.path)
    md = reader.metadata
    if compacted["order"] == "cluster":  # the sealing's layout, over the whole segment
        rows = reader.read().to_pylist()
        keys = [(r["consumer_group"] is None, r["consumer_group"] or "", r["seq"]) for r in rows]
        assert keys == sorted(keys)
        assert sorted(k[2] for k in keys) == list(range(first.base_seq, first.end_seq))
        for i in range(md.num_row_groups):  # whole groups per row group (or a piece of one)
            stats = md.row_group(i).column(3).statistics
            group_rows = reader.read_row_group(i, columns=["consumer_group"]).column(0)
            assert stats is None or not stats.has_min_max or (
                stats.min == group_rows.drop_null()[0].as_py())
        sorting = md.row_group(0).sorting_columns
        assert [md.schema.column(c.column_index).name for c in sorting] == [
            "consumer_group", "seq"]
        return
    assert md.num_row_groups == -(-first.events // TARGET["row_group_events"])
    reordered = 0
    for i in range(md.num_row_groups):
        rows = reader.read_row_group(i).to_pylist()
        lo = first.base_seq + i * TARGET["row_group_events"]
        seqs = [r["seq"] for r in rows]
        assert sorted(seqs) == list(range(lo, lo + len(rows)))
        stats = md.row_group(i).column(0).statistics
        assert (stats.min, stats.max) == (lo, lo + len(rows) - 1)
        keys = [(r["consumer_group"] or "", r["topic"] or "", r["queue_id"] or -1, r["seq"])
                for r in rows]
        if compacted["order"] == "seq":
            assert seqs == sorted(seqs)  # row by row, as sealing writes them
        else:
            assert keys == sorted(keys)
            reordered += seqs != sorted(seqs)
    assert compacted["order"] == "seq" or reordered > 0
    # The sealing layout: zstd, dictionary strings, delta-encoded integers.
    col = {md.row_group(0).column(j).path_in_schema: md.row_group(0).column(j)
           for j in range(md.num_columns)}
    assert col["seq"].compression == "ZSTD"
    assert "DELTA_BINARY_PACKED" in col["seq"].encodings
    assert any("DICTIONARY" in e for e in col["kind"].encodings)


def test_queries_answer_the_same_before_and_after_compaction(compacted):
    after = answers(compacted["root"], compacted["clock"], compacted["times"])
    assert after == compacted["before"]["answers"]


def test_cluster_order_is_the_smallest(spark, tmp_path):
    """~30,000 events of the bench's shape (320 keys) in 6 sealed segments, merged with the
    default targets in each order. Since prev_offset is stored, a key's offsets and
    prev_offsets are runs only among its own rows: the cluster order (the default, the
    sealing's) keeps a group's rows together and its seq and ts runs within the group, so it is
    the smallest (measured: cluster 197,821 B, key 219,341 B, seq 242,127 B, 238,678 B before)."""
    workload_ledger(tmp_path / "source", commands=30_000)
    out = {}
    for order in ORDERS:
        root = tmp_path / order
        shutil.copytree(tmp_path / "source", root)
        out[order] = compact(root, order=order)["roots"][0]
        assert out[order]["events"] == 30_000 and out[order]["segments_after"] == 1
    cluster = out["cluster"]["bytes_after"]
    assert cluster < out["seq"]["bytes_after"] and cluster < out["key"]["bytes_after"], out
    assert cluster < out["cluster"]["bytes_before"], out
    assert ORDER_DEFAULT == "cluster"


def test_compaction_refuses_while_a_ledger_writer_is_open(spark, pristine, tmp_path):
    root = copy_of(pristine, tmp_path)
    ranges = segment_ranges(root)
    with Ledger.open(root), pytest.raises(LockedError, match="locked by"):
        compact(root, **TARGET)
    assert segment_ranges(root) == ranges


def test_compacts_several_roots(spark, small_pristine, tmp_path):
    roots = [copy_of(small_pristine, tmp_path / "a"), copy_of(small_pristine, tmp_path / "b")]
    out = compact(roots, **TARGET)
    assert [r["root"] for r in out["roots"]] == [str(r) for r in roots]
    assert segment_ranges(roots[0]) == segment_ranges(roots[1])
    per_root = [sum(run["events"] for run in r["runs"]) for r in out["roots"]]
    assert per_root[0] == per_root[1] > 0 and out["events_compacted"] == sum(per_root)


def test_a_crash_at_any_step_leaves_the_old_or_the_new_segments(
    spark, small_pristine, tmp_path, monkeypatch
):
    """Crash (the process dies: no later file operation succeeds) before each file operation of
    a compaction of one run; reopening finds exactly the old or the new segments, the same
    answers, no file outside the manifest, and a second compaction finishes the job."""
    import spark_compaction.compaction as module

    pristine = small_pristine
    _, clock, times = pristine
    sorted_runs: dict[tuple[int, int], object] = {}
    real_sort = module.sorted_run_table

    def sort_once(spark_, run, row_group_events, order):  # the Spark part is the same each time
        key = (run[0].base_seq, run[-1].end_seq)
        if key not in sorted_runs:
            sorted_runs[key] = real_sort(spark_, run, row_group_events, order)
        return sorted_runs[key]

    monkeypatch.setattr(module, "sorted_run_table", sort_once)
    reference = copy_of(pristine, tmp_path / "ref")
    expected = answers(reference, clock, times, full=False)
    old = segment_ranges(reference)
    clean = FaultyFS()
    out = compact(reference, fs=clean, **TARGET)
    new = segment_ranges(reference)
    assert out["runs"] == 1 and len(new) < len(old)
    # Every step, except that of a run of removes (old files after the commit) only the first.
    steps = [i for i, op in enumerate(clean.ops, start=1)
             if i == 1 or op[0] != "remove" or clean.ops[i - 2][0] != "remove"]
    outcomes = set()
    for crash_at in steps:
        root = copy_of(pristine, tmp_path / f"crash{crash_at}")
        with pytest.raises(Crash):
            compact(root, fs=FaultyFS(crash_at=crash_at), **TARGET)
        with Ledger.open(root, clock=clock) as led:  # recovery: unlisted files deleted
            listed = {p.name for p in led.log.segment_paths()}
        on_disk = {p.name for p in (root / LOG_DIR).glob("*.parquet")}
        assert on_disk == listed, (crash_at, clean.ops[crash_at - 1])
        ranges = segment_ranges(root)
        assert ranges in (old, new), (crash_at, clean.ops[crash_at - 1])
        outcomes.add("new" if ranges == new else "old")
        assert answers(root, clock, times, full=False) == expected, clean.ops[crash_at - 1]
        if crash_at in (steps[0], steps[len(steps) // 2], steps[-1]):
            compact(root, **TARGET)
            assert segment_ranges(root) == new
            assert not list((root / "compaction").glob("*"))
    assert outcomes == {"old", "new"}
