"""A queue's appends as of a time T: MaxOffset at any earlier time, and which append wrote the
message at a given offset (its store time gives the time lag). DESIGN.md: every append of N
messages shares one store_ts; an append without a store time stores at its ledger ts, and an
importer's bound has none (unknown: its time lag is null).

Built once per queue and question from `QueueState.append_*` and asked for all of the queue's
keys and window entries at once (numpy searches): a document of every group asks ~10 questions
per key of 16,000 keys, which one Python bisect each made the larger part of its time.
"""

from __future__ import annotations

import numpy as np

from ledger.fold.state import STORE_TS_UNKNOWN, QueueState

NONE = -1  # no answer: the bounds were not known then, or no such message by T


class QueueAppends:
    """One queue's appends (copies: the fold may grow the state's arrays meanwhile), and how
    many of them were made at or before `at_ms`."""

    def __init__(self, q: QueueState | None, at_ms: int) -> None:
        if q is None or not q.append_ts:
            self.ts = self.first = self.end = self.store = np.zeros(0, np.int64)
        else:
            self.ts = np.frombuffer(q.append_ts, np.int64).copy()
            self.first = np.frombuffer(q.append_offset, np.int64).copy()
            self.store = np.frombuffer(q.append_store_ts, np.int64).copy()
            self.end = np.append(self.first[1:], q.max_offset)  # appends are contiguous
        self.at_ms = at_ms
        self.made = int(np.searchsorted(self.ts, at_ms, side="right"))

    @property
    def max_offset(self) -> int | None:
        """MaxOffset at `at_ms`; None while no append was known."""
        return int(self.end[self.made - 1]) if self.made else None

    def max_offsets(self, times: np.ndarray) -> np.ndarray:
        """MaxOffset after the appends at or before each of `times` (NONE: none yet)."""
        k = np.searchsorted(self.ts, times, side="right")
        return np.where(k == 0, NONE, self.end[np.maximum(k - 1, 0)] if len(self.end) else NONE)

    def holders(self, offsets: np.ndarray) -> np.ndarray:
        """Index of the append, made at or before `at_ms`, that wrote the message at each of
        `offsets` (NONE: no such message by then)."""
        i = np.searchsorted(self.first[:self.made], offsets, side="right") - 1
        if not self.made:
            return np.full(len(offsets), NONE)
        return np.where((i >= 0) & (offsets < self.end[np.maximum(i, 0)]), i, NONE)

    def time_lags(self, committed: np.ndarray) -> tuple[list[int | None], list[int | None]]:
        """(lag, lag_ms) of each committed offset at `at_ms`: messages behind MaxOffset, and how
        long the message at the committed offset has waited since its store time (0 at zero
        lag; None while the bounds or that store time are unknown)."""
        top = self.max_offset
        if top is None:
            return [None] * len(committed), [None] * len(committed)
        lag = np.maximum(top - committed, 0)
        held = self.holders(committed)
        stored = self.store[np.maximum(held, 0)]
        held = np.where((held >= 0) & (stored != STORE_TS_UNKNOWN), held, NONE)
        waited = np.where(held >= 0, self.at_ms - stored, NONE)
        lag_ms = [0 if n == 0 else (None if h < 0 else w)
                  for n, w, h in zip(lag.tolist(), waited.tolist(), held.tolist(), strict=True)]
        return lag.tolist(), lag_ms

    def moved_past(self, ts: np.ndarray, offsets: np.ndarray) -> list[int | None]:
        """For each (ts, offset) of a last entry: when the queue first held a message at or
        after the offset, no earlier than ts (None: not by `at_ms`, or unknown: the append
        holding it is an importer's bound, which says where the queue ended when it was read,
        not since when, so it cannot say how long work has waited: no STOP from it)."""
        held = self.holders(offsets)
        if len(self.store):
            held = np.where(self.store[np.maximum(held, 0)] == STORE_TS_UNKNOWN, NONE, held)
        since = np.maximum(ts, self.ts[np.maximum(held, 0)] if len(self.ts) else ts)
        return [None if h < 0 else s for h, s in zip(held.tolist(), since.tolist(), strict=True)]
