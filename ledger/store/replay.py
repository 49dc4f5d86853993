"""Events read from the log folded into a state (a reader catching up, an open replaying its
tail, `verify` rebuilding): a bounded slice at a time.

A slice becomes Python lists (one per column the fold reads) before the fold: all of them at
once for a million-event tail held ~11 million references in young lists, and each garbage
collection during the fold walked them all (82 ms of a server's /metrics scrape, every thread
stopped). Slices of `REPLAY_SLICE_EVENTS` keep each collection short and the memory flat.
"""

from __future__ import annotations

import pyarrow as pa

from ledger.fold.state import FOLDED_COLUMNS, State

#: Events turned into Python lists at a time.
REPLAY_SLICE_EVENTS = 32_768


def fold_events(state: State, events: pa.Table, slice_events: int | None = None) -> None:
    """Fold `events` (EVENT_SCHEMA rows, in seq order) into `state`, `slice_events` at a time
    (default REPLAY_SLICE_EVENTS)."""
    step = REPLAY_SLICE_EVENTS if slice_events is None else slice_events
    if step < 1:
        raise ValueError(f"slice_events must be positive, got {step}")
    columns = events.select(list(FOLDED_COLUMNS))
    for start in range(0, columns.num_rows, step):
        state.apply_columns(columns.slice(start, step).to_pydict())
