"""Queue appends folded column-wise: a producer's MaxOffset moving up, a queue at a time.

An append raises its queue's MaxOffset by its count and records the append (its first offset,
ledger and store times; a new store-time maximum enters the queue's time index). It reads its
queue and nothing else, and a run's appends' effect on MaxOffset is known up front (the
column-wise pulls already take it). So the appends of a run on queues that no line folded per
command reads (a commit or pull decided per command, a truncation or bounds) fold as vectors,
queue by queue, once the per-command lines are folded; their results are columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.executor.run_results import AppendResults
from ledger.fold.events import EVENT_SCHEMA
from ledger.fold.state import QueueState, State
from ledger.limits import OFFSET_MAX


@dataclass
class AppendPlan:
    """The appends of a run that fold column-wise: per queue, its rows in line order."""

    queues: list[tuple[tuple[str, int], np.ndarray]]  # ((topic, queue id), rows)

    @property
    def rows(self) -> np.ndarray:
        return (np.concatenate([rows for _, rows in self.queues]) if self.queues
                else np.zeros(0, np.int64))


def plan_appends(state: State, rows: np.ndarray, queue_id_of: np.ndarray,
                 name_of: Callable[[int], tuple[str, int]], count: np.ndarray) -> AppendPlan:
    """The candidate append `rows` (their queues read by no line folded per command), by queue;
    a queue whose MaxOffset would pass the largest offset is left per command (it answers
    with the error)."""
    if not len(rows):
        return AppendPlan([])
    s = rows[np.argsort(queue_id_of[rows], kind="stable")]
    ids = queue_id_of[s]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    queues = []
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(s)], strict=True):
        picked = s[lo:hi]
        key = name_of(int(picked[0]))
        q = state.queues.get(key)
        if (q.max_offset if q is not None else 0) + int(count[picked].sum()) > OFFSET_MAX:
            continue
        queues.append((key, picked))
    return AppendPlan(queues)


def fold_appends(state: State, plan: AppendPlan, now: np.ndarray, count: np.ndarray,
                 store: np.ndarray, store_given: np.ndarray, line_base: int,
                 actors_of: Callable[[np.ndarray], pa.Array | None],
                 ) -> tuple[pa.Table, np.ndarray, AppendResults]:
    """Apply the plan to the state: (its events, EVENT_SCHEMA, seq 0 until appended; each
    event's line in the run; the rows' results, in line order)."""
    parts: dict[str, list[np.ndarray]] = {"rows": [], "offset": [], "prev": [], "store": []}
    topics: list[str] = []
    qids: list[int] = []
    lows: list[int] = []
    for key, rows in plan.queues:
        q = state.queues.get(key)
        if q is None:
            q = state.queues[key] = QueueState()
        c = count[rows]
        after = q.max_offset + np.cumsum(c)
        prev = after - c
        stored = np.where(store_given[rows], store[rows], now[rows])
        # a store time above every one before enters the time index (the first one: always)
        highest = q.index_store_ts[-1] if q.index_store_ts else -1
        before_max = np.maximum(np.r_[highest, np.maximum.accumulate(stored)[:-1]], highest)
        indexed = stored > before_max
        q.index_store_ts.extend(stored[indexed].tolist())
        q.index_offset.extend(prev[indexed].tolist())
        q.append_offset.frombytes(prev.astype(np.int64).tobytes())
        q.append_ts.frombytes(now[rows].astype(np.int64).tobytes())
        q.append_store_ts.frombytes(stored.astype(np.int64).tobytes())
        q.max_offset = int(after[-1])
        q.last_update_ts = int(now[rows[-1]])
        state.dirty_queues.add(key)
        lows += [q.min_offset] * len(rows)
        for name, values in (("rows", rows), ("offset", after), ("prev", prev),
                             ("store", stored)):
            parts[name].append(values)
        topics += [key[0]] * len(rows)
        qids += [key[1]] * len(rows)
    rows = np.concatenate(parts["rows"]) if parts["rows"] else np.zeros(0, np.int64)
    n = len(rows)
    state.events_applied += n
    if n:
        state.last_ts = max(state.last_ts, int(now[rows].max()))
    actor = pa.repeat(pa.scalar("system", pa.string()), n)
    given = actors_of(rows)
    if given is not None:  # the sender's name where one is given
        actor = pc.if_else(pc.is_valid(given), given, actor)

    def ints(name: str) -> pa.Array:
        return pa.array(np.concatenate(parts[name]) if parts[name] else np.zeros(0, np.int64),
                        pa.int64())

    events = pa.Table.from_arrays([
        pa.array(np.zeros(n, np.int64)),
        pa.array(now[rows], pa.int64()),
        pa.repeat(pa.scalar("queue_append", pa.string()), n),
        pa.nulls(n, pa.string()),
        pa.array(topics, pa.string()),
        pa.array(qids, pa.int32()),
        ints("offset"),
        ints("prev"),
        pa.nulls(n, pa.int32()),
        pa.nulls(n, pa.string()),
        actor,
        ints("store"),
        pa.nulls(n, pa.string()),
    ], schema=EVENT_SCHEMA)
    order = np.argsort(rows, kind="stable")
    results = AppendResults(rows=rows[order], topic=pa.array(topics, pa.string()).take(
        pa.array(order, pa.int64())), queue_id=np.asarray(qids, np.int64)[order],
        min_offset=np.asarray(lows, np.int64)[order],
        max_offset=ints("offset").to_numpy()[order])
    return events, rows, results
