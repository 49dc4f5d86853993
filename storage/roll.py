"""When the active segment rolls: a pure function of limits and segment facts, time injected.

As Kafka's `LogSegment.shouldRoll(RollParams)`: count, size and age, whichever comes first. Age
is measured from the rolling timestamp: the injected clock at the segment's first append; after a
reopen, the largest ts of its first batch (Kafka's choice), capped at the clock, so rows with old
timestamps cost at most one early roll instead of a roll per append.
"""

from __future__ import annotations

import msgspec


class RollParams(msgspec.Struct, frozen=True):
    """The limits a segment rolls at."""

    segment_events_max: int
    segment_bytes_max: int
    segment_age_ms_max: int


class SegmentFacts(msgspec.Struct, frozen=True):
    """What the roll decision needs to know about the active segment."""

    events: int
    bytes: int
    rolling_ts_ms: int | None


def should_roll(params: RollParams, facts: SegmentFacts, now_ms: int) -> bool:
    """True when a non-empty segment is full by events or bytes, or older than the age limit."""
    if facts.events <= 0:
        return False
    if facts.events >= params.segment_events_max:
        return True
    if facts.bytes >= params.segment_bytes_max:
        return True
    return facts.rolling_ts_ms is not None and (
        now_ms - facts.rolling_ts_ms >= params.segment_age_ms_max
    )
