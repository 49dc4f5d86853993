"""Which sealed segments retention retires: a pure choice over the manifest's facts.

Whole segments only, oldest first and as a prefix (the log stays contiguous), never past
`covered_seq` (what a checkpoint covers), and only when a limit asks for it: older than the age
limit (by the segment's largest ts) or while the log is above the byte limit. With no limit
nothing is retired, as Kafka keeps a log forever when both retention limits are off.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from storage.manifest import CheckpointEntry, SegmentEntry


class RetentionPlan(msgspec.Struct, frozen=True):
    """Segments to delete, the new log start, and the checkpoints still useful after it."""

    retire: tuple[SegmentEntry, ...]
    start_seq: int
    keep_checkpoints: tuple[CheckpointEntry, ...]
    drop_checkpoints: tuple[CheckpointEntry, ...]


def plan_retention(
    segments: Sequence[SegmentEntry],
    checkpoints: Sequence[CheckpointEntry],
    *,
    start_seq: int,
    active_bytes: int,
    covered_seq: int,
    now_ms: int,
    age_ms_max: int | None,
    bytes_max: int | None,
) -> RetentionPlan:
    """Choose the prefix of `segments` to delete and the checkpoints to drop."""
    total_bytes = sum(s.bytes for s in segments) + active_bytes
    retire: list[SegmentEntry] = []
    for segment in segments:
        if segment.end_seq > covered_seq:
            break
        too_old = age_ms_max is not None and segment.ts_max < now_ms - age_ms_max
        too_big = bytes_max is not None and total_bytes > bytes_max
        if not (too_old or too_big):
            break
        retire.append(segment)
        total_bytes -= segment.bytes
    new_start = retire[-1].end_seq if retire else start_seq
    keep, drop = split_checkpoints(checkpoints, new_start)
    return RetentionPlan(tuple(retire), new_start, keep, drop)


def split_checkpoints(
    checkpoints: Sequence[CheckpointEntry], start_seq: int
) -> tuple[tuple[CheckpointEntry, ...], tuple[CheckpointEntry, ...]]:
    """Keep the newest checkpoint at or before `start_seq` and every later one; drop the rest.

    A checkpoint older than that one can no longer be replayed forward (its log is gone) and a
    newer one already covers the log start.
    """
    at_or_before = [c for c in checkpoints if c.seq <= start_seq]
    anchor = at_or_before[-1] if at_or_before else None
    keep = tuple(c for c in checkpoints if c.seq > start_seq or c is anchor)
    drop = tuple(c for c in checkpoints if c.seq <= start_seq and c is not anchor)
    return keep, drop
