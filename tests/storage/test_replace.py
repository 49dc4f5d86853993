"""Compaction swaps: verified before, one manifest commit, old files gone after, reads unchanged."""

from __future__ import annotations

import errno
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from storage import LogSettings, SchemaError, StorageError, names
from tests.storage.storage_helpers import SCHEMA, assert_no_orphans, concat, make_rows, open_log, with_seqs
from tests.support.faults import FaultyFS

SETTINGS = LogSettings(segment_events_max=10)


def _log(root: Path, segments: int = 5, fs: FaultyFS | None = None):
    log = open_log(root, SETTINGS, fs=fs)
    tables = []
    for i in range(segments):
        made = make_rows(10, ts=100 * i, salt=i * 10)
        tables.append(with_seqs(made, log.append(made).first_seq))
    return log, concat(tables)


def _stage(directory: Path, table: pa.Table, name: str) -> Path:
    """Write like the Spark job: rows sorted by key inside, seq only inside each row group."""
    directory.mkdir(parents=True, exist_ok=True)
    ordered = table.take(pc.sort_indices(table, [("consumer_group", "ascending"),
                                                 ("queue_id", "ascending"),
                                                 ("seq", "ascending")]))
    path = directory / name
    pq.write_table(ordered, path, row_group_size=7)
    return path


def test_replace_merges_segments_and_reads_stay_in_seq_order(tmp_path: Path) -> None:
    log, expected = _log(tmp_path / "data")
    old = log.segments()[1:4]
    merged = expected.slice(10, 30)
    files = [_stage(tmp_path / "staging", merged.slice(0, 14), "a.parquet"),
             _stage(tmp_path / "staging", merged.slice(14), "b.parquet")]
    new = log.replace(old, list(reversed(files)))  # given in any order
    assert [(s.base_seq, s.end_seq) for s in new] == [(10, 24), (24, 40)]
    first, second = (s.path.name for s in new)
    assert names.parse_seq_prefix(first) == 10 and first != names.parquet_name(10)
    assert names.parse_seq_prefix(second) == 24
    assert [(s.base_seq, s.end_seq) for s in log.segments()] == [
        (0, 10), (10, 24), (24, 40), (40, 50)
    ]
    assert not any(s.path.exists() for s in old) and not any(f.exists() for f in files)
    assert log.read().equals(expected)
    assert log.read(seq_gte=12, seq_lt=30).equals(expected.slice(12, 18))
    assert log.read(ts_gte=200, ts_lt=300).equals(expected.slice(20, 10))
    assert_no_orphans(log)
    log.close()
    with open_log(tmp_path / "data", SETTINGS) as reopened:
        assert reopened.read().equals(expected)
        assert_no_orphans(reopened)


def test_replace_never_uses_a_file_name_twice(tmp_path: Path) -> None:
    """A reader holding an older manifest must never find other rows under a name it knows
    (DESIGN.md: a file name is never reused), even after the name's file was deleted."""
    log, expected = _log(tmp_path / "data")
    used = {s.path.name for s in log.segments()}
    for n, end in enumerate((20, 30, 40, 50)):
        done = log.replace(log.segments()[:2],
                           [_stage(tmp_path / "s", expected.slice(0, end), f"x{n}")])
        assert done[0].path.name not in used
        used.add(done[0].path.name)
    assert log.read().equals(expected)
    log.close()


@pytest.mark.parametrize(
    ("rows", "old", "message"),
    [
        (slice(10, 29), slice(1, 3), "cover seqs 10..29, the replaced segments 10..30"),
        (slice(11, 30), slice(1, 3), "expected a dense run starting at 10"),
        (slice(10, 30), slice(1, 4), "the replaced segments 10..40"),
    ],
)
def test_replace_refuses_files_that_do_not_cover_the_same_seqs(
    tmp_path: Path, rows: slice, old: slice, message: str
) -> None:
    log, expected = _log(tmp_path / "data")
    staged = _stage(tmp_path / "s", expected.slice(rows.start, rows.stop - rows.start), "x")
    with pytest.raises(StorageError, match=message):
        log.replace(log.segments()[old], [staged])
    assert staged.exists() and log.read().equals(expected)
    log.close()


def test_replace_refuses_gaps_duplicates_foreign_schemas_and_non_runs(tmp_path: Path) -> None:
    log, expected = _log(tmp_path / "data")
    segments = log.segments()
    part = expected.slice(10, 20)
    gap = pa.concat_tables([part.slice(0, 5), part.slice(6), part.slice(5, 1)])
    duplicated = pa.concat_tables([part.slice(0, 19), part.slice(3, 1)])
    for name, table in (("gap", gap.slice(0, 19)), ("dup", duplicated)):
        with pytest.raises(StorageError, match="dense"):
            log.replace(segments[1:3], [_stage(tmp_path / "s", table, name)])
    foreign = part.drop_columns(["detail"])
    with pytest.raises(SchemaError, match="columns"):
        log.replace(segments[1:3], [_stage(tmp_path / "s", foreign, "foreign")])
    with pytest.raises(StorageError, match="contiguous run"):
        log.replace([segments[1], segments[3]], [_stage(tmp_path / "s", part, "ok")])
    assert log.read().equals(expected)
    log.close()


def test_replace_copies_across_file_systems_and_undoes_a_failed_swap(tmp_path: Path) -> None:
    class CrossDevice(FaultyFS):
        def rename(self, src: Path, dst: Path) -> None:
            if Path(src).parent.name == "staging":
                raise OSError(errno.EXDEV, "Invalid cross-device link")
            super().rename(src, dst)

    fs = CrossDevice()
    log, expected = _log(tmp_path / "data", fs=fs)
    staged = _stage(tmp_path / "staging", expected.slice(0, 20), "x.parquet")
    fs.fsync_fail_after = None
    new = log.replace(log.segments()[:2], [staged])
    assert not staged.exists() and new[0].path.exists()
    assert log.read().equals(expected)
    log.close()

    plain = FaultyFS()
    log, expected = _log(tmp_path / "data2", fs=plain)
    staged = _stage(tmp_path / "staging2", expected.slice(0, 20), "x.parquet")
    plain.rename_fails = 0
    original = plain.rename

    def failing_manifest_rename(src: Path, dst: Path) -> None:
        if Path(dst).name == names.MANIFEST_FILE:
            raise OSError(errno.EIO, "manifest rename failed")
        original(src, dst)

    plain.rename = failing_manifest_rename  # type: ignore[method-assign]
    with pytest.raises(OSError, match="manifest rename failed"):
        log.replace(log.segments()[:2], [staged])
    assert staged.exists()  # moved back for a retry
    assert [s.end_seq for s in log.segments()] == [10, 20, 30, 40, 50]
    plain.rename = original  # type: ignore[method-assign]
    log.replace(log.segments()[:2], [staged])
    assert log.read().equals(expected)
    assert_no_orphans(log)
    log.close()


def test_schema_nullability_may_differ_in_replacement_files(tmp_path: Path) -> None:
    log, expected = _log(tmp_path / "data", segments=2)
    loose = pa.schema([pa.field(f.name, f.type, nullable=True) for f in SCHEMA])
    table = pa.Table.from_arrays(expected.columns, schema=loose)
    staged = _stage(tmp_path / "s", table, "spark-like.parquet")
    log.replace(log.segments(), [staged])
    assert log.read().equals(expected)
    log.close()


def test_replace_refuses_files_already_inside_log(tmp_path: Path) -> None:
    log, expected = _log(tmp_path / "data", segments=2)
    live = log.segments()
    with pytest.raises(StorageError, match="stage new files elsewhere"):
        log.replace(live[:1], [live[0].path])
    assert log.read().equals(expected)
    log.close()
