"""What a range read asks for (half-open seq and ts bounds) and what it touched."""

from __future__ import annotations

import msgspec


class SeqTsRange(msgspec.Struct, frozen=True):
    """Half-open bounds on seq and ts; None means unbounded."""

    seq_gte: int | None = None
    seq_lt: int | None = None
    ts_gte: int | None = None
    ts_lt: int | None = None

    def overlaps(self, seq_min: int, seq_max: int, ts_min: int | None, ts_max: int | None) -> bool:
        """Whether rows with seq in [seq_min, seq_max] and ts in [ts_min, ts_max] may match."""
        if self.seq_gte is not None and seq_max < self.seq_gte:
            return False
        if self.seq_lt is not None and seq_min >= self.seq_lt:
            return False
        if ts_min is None or ts_max is None:
            return True
        if self.ts_gte is not None and ts_max < self.ts_gte:
            return False
        return not (self.ts_lt is not None and ts_min >= self.ts_lt)

    @property
    def unbounded(self) -> bool:
        """True when no bound is set."""
        return (
            self.seq_gte is None and self.seq_lt is None and self.ts_gte is None
            and self.ts_lt is None
        )


class ReadStats(msgspec.Struct):
    """What a read touched: lets tests and benchmarks see pruning work."""

    segments_read: int = 0
    segments_skipped: int = 0
    row_groups_read: int = 0
    row_groups_skipped: int = 0
    # of the row groups read, those decoded from their file (the others were held decoded)
    row_groups_decoded: int = 0
