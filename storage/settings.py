"""`LogSettings`: every limit of the log in one frozen object, checked on construction.

TigerBeetle's "put a limit on everything": values out of range raise a `SettingsError` naming
the setting and the value, and related limits are checked against each other.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from storage.errors import SettingsError

Durability = Literal["always", "batch", "none"]
DURABILITIES: tuple[str, ...] = ("always", "batch", "none")

MIB = 1024 * 1024
SEGMENT_EVENTS_LIMIT = 100_000_000
SEGMENT_BYTES_MIN = 1024
# A frame's length is a u32, and one append chunk is one frame.
SEGMENT_BYTES_LIMIT = 2**32 - 1
AGE_MS_LIMIT = 365 * 24 * 3_600_000
ZSTD_LEVEL_MIN = 1
ZSTD_LEVEL_MAX = 22


class LogSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Roll limits, durability and Parquet layout of a segmented log (DESIGN.md, Storage).

    `row_group_events` and `batch_fsync_events` above `segment_events_max` act as
    `segment_events_max` (a row group or an fsync batch never spans segments).
    """

    segment_events_max: int = 1_000_000
    segment_bytes_max: int = 128 * MIB
    segment_age_ms_max: int = 3_600_000
    durability: Durability = "always"
    batch_fsync_interval_ms: int = 50
    batch_fsync_events: int = 100_000
    row_group_events: int = 131_072
    zstd_level: int = 3
    # Write a full segment's Parquet files on a background thread while appends go on (the WAL
    # stays the source until a later change lists them); off, an append that fills a segment
    # returns once its seal is committed.
    seal_in_background: bool = False
    # The clustering key (the caller's columns; the log knows no rules): sealing sorts a
    # segment's rows by these columns, then seq, into row groups of `cluster_row_group_events`
    # rows, so that the rows of one key value sit in a few row groups whose statistics say so.
    # Empty: rows stay in seq order, in row groups of `row_group_events`.
    cluster_columns: tuple[str, ...] = ()
    cluster_row_group_events: int = 8192

    def __post_init__(self) -> None:
        if not isinstance(self.seal_in_background, bool):
            raise SettingsError(
                f"seal_in_background must be true or false, got {self.seal_in_background!r}")
        _check_range("segment_events_max", self.segment_events_max, 1, SEGMENT_EVENTS_LIMIT)
        _check_range(
            "segment_bytes_max", self.segment_bytes_max, SEGMENT_BYTES_MIN, SEGMENT_BYTES_LIMIT
        )
        _check_range("segment_age_ms_max", self.segment_age_ms_max, 1, AGE_MS_LIMIT)
        if self.durability not in DURABILITIES:
            raise SettingsError(
                f"durability must be one of {', '.join(DURABILITIES)}, got {self.durability!r}"
            )
        _check_range("batch_fsync_interval_ms", self.batch_fsync_interval_ms, 0, AGE_MS_LIMIT)
        _check_range("batch_fsync_events", self.batch_fsync_events, 1, SEGMENT_EVENTS_LIMIT)
        _check_range("row_group_events", self.row_group_events, 1, SEGMENT_EVENTS_LIMIT)
        _check_range("zstd_level", self.zstd_level, ZSTD_LEVEL_MIN, ZSTD_LEVEL_MAX)
        _check_range("cluster_row_group_events", self.cluster_row_group_events, 1,
                     SEGMENT_EVENTS_LIMIT)
        if not isinstance(self.cluster_columns, tuple) or not all(
                isinstance(c, str) and c for c in self.cluster_columns):
            raise SettingsError(f"cluster_columns must be a tuple of column names, got "
                                f"{self.cluster_columns!r}")
        if len(set(self.cluster_columns)) != len(self.cluster_columns):
            raise SettingsError(f"cluster_columns repeats a column: {self.cluster_columns!r}")
        if self.batch_fsync_interval_ms > self.segment_age_ms_max:
            raise SettingsError(
                f"batch_fsync_interval_ms ({self.batch_fsync_interval_ms}) must not exceed "
                f"segment_age_ms_max ({self.segment_age_ms_max}): an unsynced batch would "
                "outlive its segment"
            )

    @property
    def row_group_events_effective(self) -> int:
        """Rows per Parquet row group as written: never more than a segment holds."""
        return min(self.row_group_events, self.segment_events_max)

    @property
    def sealed_row_group_events(self) -> int:
        """Rows per row group of a sealed segment: small when clustered (a key's rows are read
        alone), never more than a segment holds."""
        rows = self.cluster_row_group_events if self.cluster_columns else self.row_group_events
        return min(rows, self.segment_events_max)

    @property
    def batch_fsync_events_effective(self) -> int:
        """Events between fsyncs under durability "batch", capped at a segment."""
        return min(self.batch_fsync_events, self.segment_events_max)


def _check_range(name: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SettingsError(f"{name} must be an integer, got {value!r}")
    if value < low or value > high:
        raise SettingsError(f"{name} must be between {low} and {high}, got {value}")
