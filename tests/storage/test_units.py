"""Small pure pieces: names, settings, roll decisions, retention choice, frames."""

from __future__ import annotations

import pyarrow as pa
import pytest

from storage import LogSettings, SettingsError, names
from storage.frames import HEADER_BYTES, decode_frames, frame_bytes
from storage.manifest import CheckpointEntry, SegmentEntry
from storage.retention import plan_retention, split_checkpoints
from storage.roll import RollParams, SegmentFacts, should_roll
from tests.storage.storage_helpers import SCHEMA, make_rows, with_seqs


def test_names_are_twenty_digits_and_sort_numerically() -> None:
    assert names.wal_name(1_048_576) == "00000000000001048576.wal"
    assert names.parquet_name(7) == "00000000000000000007.parquet"
    assert names.parquet_name(7, 2) == "00000000000000000007.2.parquet"
    assert names.checkpoint_name(12) == "00000000000000000012.checkpoint.parquet"
    assert sorted([names.wal_name(10), names.wal_name(9)]) == [names.wal_name(9), names.wal_name(10)]
    assert names.parse_seq_prefix("00000000000000000042.parquet") == 42
    assert names.parse_seq_prefix("LOCK") is None
    assert names.parse_seq_prefix("0000000000000000004x.parquet") is None
    with pytest.raises(ValueError):
        names.format_seq(-1)


def test_name_classification_covers_every_suffix() -> None:
    assert names.is_log_file("00000000000000000000.wal")
    assert names.is_log_file("00000000000000000000.parquet.tmp")
    assert names.is_log_file("00000000000000000000.3.parquet")
    assert names.is_log_file("MANIFEST.tmp")
    assert not names.is_log_file("00000000000000000000.checkpoint.parquet")
    assert not names.is_log_file("notes.txt")
    assert names.is_checkpoint_file("00000000000000000000.checkpoint.parquet.tmp")
    assert not names.is_checkpoint_file("00000000000000000000.parquet")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("segment_events_max", 0),
        ("segment_bytes_max", 10),
        ("segment_age_ms_max", 0),
        ("durability", "sometimes"),
        ("batch_fsync_events", 0),
        ("row_group_events", -1),
        ("zstd_level", 0),
        ("zstd_level", 23),
        ("segment_events_max", True),
    ],
)
def test_settings_refuse_bad_values_naming_them(field: str, value: object) -> None:
    with pytest.raises(SettingsError, match=field):
        LogSettings(**{field: value})


def test_settings_check_related_limits() -> None:
    with pytest.raises(SettingsError, match="batch_fsync_interval_ms .* segment_age_ms_max"):
        LogSettings(segment_age_ms_max=10, batch_fsync_interval_ms=50)
    small = LogSettings(segment_events_max=10)
    assert small.row_group_events_effective == 10
    assert small.batch_fsync_events_effective == 10
    assert LogSettings().segment_bytes_max == 128 * 1024 * 1024


def test_should_roll_on_events_bytes_or_age_and_never_when_empty() -> None:
    params = RollParams(segment_events_max=10, segment_bytes_max=1000, segment_age_ms_max=60)
    assert not should_roll(params, SegmentFacts(0, 5000, 0), now_ms=10_000)
    assert should_roll(params, SegmentFacts(10, 1, 100), now_ms=100)
    assert should_roll(params, SegmentFacts(1, 1000, 100), now_ms=100)
    assert not should_roll(params, SegmentFacts(1, 999, 100), now_ms=159)
    assert should_roll(params, SegmentFacts(1, 999, 100), now_ms=160)
    assert not should_roll(params, SegmentFacts(1, 1, None), now_ms=10**9)


def _entry(base: int, end: int, ts_max: int, size: int = 100) -> SegmentEntry:
    return SegmentEntry(base, end, ts_max - 1, ts_max, end - base, size, names.parquet_name(base))


def test_retention_retires_a_covered_prefix_only_when_a_limit_asks() -> None:
    segments = [_entry(0, 10, 100), _entry(10, 20, 200), _entry(20, 30, 300)]
    checkpoints = [CheckpointEntry(s, names.checkpoint_name(s)) for s in (5, 10, 15, 25)]
    common = {"start_seq": 0, "active_bytes": 0, "now_ms": 1000}
    plan = plan_retention(segments, checkpoints, covered_seq=20, age_ms_max=750,
                          bytes_max=None, **common)
    assert [e.base_seq for e in plan.retire] == [0, 10]
    assert plan.start_seq == 20
    assert [c.seq for c in plan.keep_checkpoints] == [15, 25]
    assert [c.seq for c in plan.drop_checkpoints] == [5, 10]
    # covered_seq cuts inside a segment: that segment stays
    plan = plan_retention(segments, checkpoints, covered_seq=19, age_ms_max=0,
                          bytes_max=None, **common)
    assert [e.base_seq for e in plan.retire] == [0]
    # too young to go
    plan = plan_retention(segments, checkpoints, covered_seq=30, age_ms_max=950,
                          bytes_max=None, **common)
    assert plan.retire == ()
    # by bytes: 300 bytes held, keep at most 150
    plan = plan_retention(segments, checkpoints, covered_seq=30, age_ms_max=None,
                          bytes_max=150, **common)
    assert [e.base_seq for e in plan.retire] == [0, 10]
    # no limit: nothing
    plan = plan_retention(segments, checkpoints, covered_seq=30, age_ms_max=None,
                          bytes_max=None, **common)
    assert plan.retire == () and plan.start_seq == 0


def test_split_checkpoints_keeps_the_anchor_and_later() -> None:
    entries = [CheckpointEntry(s, names.checkpoint_name(s)) for s in (0, 10, 20)]
    keep, drop = split_checkpoints(entries, 15)
    assert [c.seq for c in keep] == [10, 20] and [c.seq for c in drop] == [0]
    keep, drop = split_checkpoints(entries, 20)
    assert [c.seq for c in keep] == [20] and [c.seq for c in drop] == [0, 10]


def test_frames_round_trip_and_report_the_intact_prefix() -> None:
    batches = [with_seqs(make_rows(n, salt=n), 0).to_batches()[0] for n in (1, 5, 3)]
    data = b"".join(frame_bytes(b) for b in batches)
    decoded = decode_frames(data, SCHEMA)
    assert [b.num_rows for b in decoded.batches] == [1, 5, 3]
    assert decoded.end_offset == len(data) and decoded.bytes_cut == 0 and decoded.error is None
    assert pa.Table.from_batches(decoded.batches).equals(pa.Table.from_batches(batches))
    first = len(frame_bytes(batches[0]))
    torn = decode_frames(data[: first + HEADER_BYTES + 3], SCHEMA)
    assert len(torn.batches) == 1 and torn.end_offset == first
    assert torn.bytes_cut == HEADER_BYTES + 3 and "torn" in (torn.error or "")
