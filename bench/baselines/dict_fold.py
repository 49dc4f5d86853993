"""Pure-Python dict fold of the event rows: the in-process ceiling.

Why: the ledger keeps current state in an in-process structure (DESIGN.md, Performance notes);
this is the speed of the simplest such structure, one dict update per event, with no storage.
Its state-at-T answer is the reference the other baselines are checked against.
"""

from __future__ import annotations

import bisect
import gc

from bench.baselines.common import COMMITTED_KINDS, EventRows, Key, State, pylist, timings

_COMMITTED = frozenset(COMMITTED_KINDS)


def _columns(events: EventRows) -> tuple[list, ...]:
    t = events.table
    return tuple(pylist(t.column(n)) for n in
                 ("kind", "consumer_group", "topic", "queue_id", "offset", "ts"))


def fold(cols: tuple[list, ...], until_ts: int | None = None) -> dict[str, dict]:
    """Fold events into committed/pulled per key and min/max per queue (up to `until_ts`)."""
    committed: dict[Key, int | None] = {}
    pulled: dict[Key, int | None] = {}
    max_off: dict[tuple[str, int], int] = {}
    min_off: dict[tuple[str, int], int] = {}
    kinds, groups, topics, queues, offsets, tss = cols
    limit = len(kinds)
    if until_ts is not None:
        limit = bisect.bisect_right(tss, until_ts)  # ts never goes backwards along seq
    for kind, g, t, q, off in zip(kinds[:limit], groups[:limit], topics[:limit],
                                  queues[:limit], offsets[:limit], strict=True):
        if kind == "commit" or kind in _COMMITTED:
            committed[(g, t, q)] = off
            if kind == "initial":
                pulled[(g, t, q)] = off
        elif kind == "pull":
            pulled[(g, t, q)] = off
        elif kind == "queue_append":
            max_off[(t, q)] = off
        elif kind == "queue_truncate":
            min_off[(t, q)] = off
    return {"committed": committed, "pulled": pulled, "max": max_off, "min": min_off}


def state_at(events: EventRows, ts: int) -> State:
    """Committed offset per key from the latest committed-kind event at or before `ts`."""
    return fold(_columns(events), ts)["committed"]


def run(events: EventRows, repeat: int = 3) -> dict:
    """events/s of the fold over pre-extracted columns (extraction timed separately)."""
    t_cols, cols = timings(lambda: _columns(events), 1)
    enabled = gc.isenabled()
    gc.disable()
    try:
        t_fold, state = timings(lambda: fold(cols), repeat)
        t_at, _ = timings(lambda: fold(cols, events.time_at(0.5)), repeat)
    finally:
        if enabled:
            gc.enable()
    n = events.n_events
    return {
        "events": n,
        "commands": events.n_commands,
        "extract_columns_s": t_cols,
        "fold_s": t_fold,
        "events_per_s": n / t_fold["median"],
        "commands_per_s": events.n_commands / t_fold["median"],
        "state_at_T_s": t_at,
        "keys": len(state["committed"]),  # type: ignore[index]
    }
