"""Sealed Parquet segments: readable by DuckDB and pyarrow alike, laid out as specified, pruned
by statistics, and never silently dropped when corrupt."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from storage import CorruptSegmentError, LogSettings
from tests.storage.storage_helpers import SCHEMA, concat, make_rows, open_log, with_seqs


def _filled(root: Path, settings: LogSettings, rows: int, batch: int = 100):
    log = open_log(root, settings)
    tables = []
    for start in range(0, rows, batch):
        n = min(batch, rows - start)
        made = make_rows(n, ts=10_000 + start, salt=start)
        result = log.append(made)
        tables.append(with_seqs(made, result.first_seq))
    return log, concat(tables)


def test_duckdb_and_pyarrow_read_the_same_rows(tmp_path: Path) -> None:
    log, expected = _filled(tmp_path, LogSettings(segment_events_max=250), 1000)
    log.roll()
    paths = [str(p) for p in log.segment_paths()]
    log.close()
    arrow_rows = pq.ParquetDataset(paths).read().sort_by("seq").to_pylist()
    duck = duckdb.connect()
    duck_rows = duck.execute(f"SELECT * FROM read_parquet({paths}) ORDER BY seq").fetchall()
    assert arrow_rows == expected.to_pylist()
    assert duck_rows == [tuple(row.values()) for row in arrow_rows]
    assert duck.execute(f"SELECT count(*) FROM read_parquet({paths})").fetchone() == (1000,)


def test_segments_use_the_specified_layout(tmp_path: Path) -> None:
    settings = LogSettings(segment_events_max=1000, row_group_events=300, zstd_level=5)
    log, _ = _filled(tmp_path, settings, 1000)
    (segment,) = log.segments()
    log.close()
    md = pq.read_metadata(segment.path)
    assert md.num_rows == 1000 and md.num_row_groups == 4
    assert segment.bytes == segment.path.stat().st_size
    assert (segment.ts_min, segment.ts_max) == (10_000, 10_999)
    names = [md.schema.column(i).path for i in range(md.num_columns)]
    for rg in range(md.num_row_groups):
        for i, name in enumerate(names):
            column = md.row_group(rg).column(i)
            assert column.compression == "ZSTD"
            assert column.statistics is not None and column.statistics.has_min_max
            if name in ("seq", "ts", "queue_id", "offset"):
                assert "DELTA_BINARY_PACKED" in column.encodings, name
            if name in ("kind", "consumer_group", "detail"):
                assert "RLE_DICTIONARY" in column.encodings, name
        seq = md.row_group(rg).column(names.index("seq")).statistics
        assert (seq.min, seq.max) == (rg * 300, min(rg * 300 + 299, 999))
    assert pq.read_schema(segment.path).equals(SCHEMA)


def test_reads_prune_segments_and_row_groups_by_statistics(tmp_path: Path) -> None:
    settings = LogSettings(segment_events_max=1000, row_group_events=100)
    log, expected = _filled(tmp_path, settings, 3000)
    got = log.read(ts_gte=11_250, ts_lt=11_350)
    assert got.column("seq").to_pylist() == list(range(1250, 1350))
    stats = log.last_read_stats
    assert (stats.segments_read, stats.segments_skipped) == (1, 2)
    assert (stats.row_groups_read, stats.row_groups_skipped) == (2, 8)
    got = log.read(seq_gte=2999)
    assert got.equals(expected.slice(2999))
    stats = log.last_read_stats  # a full segment is sealed at once: the last row is sealed
    assert (stats.segments_read, stats.segments_skipped) == (1, 2)
    assert (stats.row_groups_read, stats.row_groups_skipped) == (1, 9)
    log.close()


def test_reads_select_columns_in_the_order_asked(tmp_path: Path) -> None:
    log, expected = _filled(tmp_path, LogSettings(segment_events_max=100), 250)
    got = log.read(seq_gte=50, seq_lt=220, columns=["offset", "seq"])
    assert got.column_names == ["offset", "seq"]
    assert got.equals(expected.slice(50, 170).select(["offset", "seq"]))
    log.close()


def _flip_in_column_data(path: Path, column: str) -> None:
    md = pq.read_metadata(path)
    names = [md.schema.column(i).path for i in range(md.num_columns)]
    chunk = md.row_group(0).column(names.index(column))
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    position = start + chunk.total_compressed_size - 4
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("column", ["seq", "offset", "consumer_group"])
def test_a_corrupt_segment_in_the_middle_raises_naming_file_and_range(
    tmp_path: Path, column: str
) -> None:
    log, _ = _filled(tmp_path, LogSettings(segment_events_max=100), 300)
    middle = log.segments()[1]
    log.close()
    _flip_in_column_data(middle.path, column)
    with open_log(tmp_path, LogSettings(segment_events_max=100)) as log:
        assert log.read(seq_lt=100).num_rows == 100  # pruned away from the bad segment
        with pytest.raises(CorruptSegmentError) as info:
            log.read()
    message = str(info.value)
    assert middle.path.name in message and "100..200" in message
    assert (info.value.base_seq, info.value.end_seq) == (100, 200)


def test_a_truncated_or_missing_segment_fails_the_open(tmp_path: Path) -> None:
    log, _ = _filled(tmp_path, LogSettings(segment_events_max=100), 300)
    middle = log.segments()[1]
    log.close()
    data = middle.path.read_bytes()
    middle.path.write_bytes(data[:-10])
    with pytest.raises(CorruptSegmentError, match=r"100\.\.200.*bytes"):
        open_log(tmp_path, LogSettings(segment_events_max=100))
    middle.path.unlink()
    with pytest.raises(CorruptSegmentError, match="missing"):
        open_log(tmp_path, LogSettings(segment_events_max=100))
    with pytest.raises(CorruptSegmentError, match=middle.path.name):
        open_log(tmp_path, writer=False).read()
