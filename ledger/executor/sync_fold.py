"""Syncs folded column-wise: a mirror's, a follower's or an importer's snapshot of offsets.

A sync overwrites its key's committed offset (from -> to; an unchanged one writes nothing) and
reads nothing else of the state but that offset and the key's generation. So the syncs of one
run on keys that nothing else in the run touches fold as vectors, key by key: each sync's
`from` is the sync before it on the key (the first's: the key's committed offset), and the key
ends at its last sync's offset. What stays per command (`handlers.run`): a sync removing an
offset (null: a tombstone, an expire), a line whose values the column path does not check, a
key with any other line in the run, and a key with a move back when `reset-policy.toml` may
refuse it (its later syncs would then start from the refused one's `from`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.commands.command import SOURCE_PATTERN
from ledger.executor.run_results import SyncResults
from ledger.fold.events import EVENT_SCHEMA
from ledger.fold.position import NULL
from ledger.fold.state import State
from ledger.reset.policy import ResetPolicy


@dataclass
class SyncPlan:
    """The syncs of a run that fold column-wise, sorted by (key, line)."""

    rows: np.ndarray  # line index in the run
    key_of: np.ndarray  # each row's key, as an index into `keys`
    keys: list[tuple[str, str, int]]
    offset: np.ndarray
    before: np.ndarray  # the committed offset before each sync, NULL for none
    generation: np.ndarray  # per key
    source: pa.Array  # per row
    client: pa.Array  # per row, null on a broadcast group's (its clients' own offsets)

    @property
    def changed(self) -> np.ndarray:
        return self.offset != self.before


def sources_ok(batch: pa.Table) -> tuple[np.ndarray, pa.Array]:
    """Rows whose `source` is a valid source name, and the column as strings."""
    n = batch.num_rows
    if "source" not in batch.column_names:
        return np.zeros(n, bool), pa.nulls(n, pa.string())
    column = batch.column("source")
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return np.zeros(n, bool), pa.nulls(n, pa.string())
    coded = pc.dictionary_encode(column)
    valid = np.array([SOURCE_PATTERN.fullmatch(v) is not None
                      for v in coded.dictionary.to_pylist()] + [False], bool)
    codes = pc.fill_null(coded.indices, len(coded.dictionary)).to_numpy(zero_copy_only=False)
    return valid[codes.astype(np.int64)], column.cast(pa.string())


def plan_syncs(state: State, root: Any, rows: np.ndarray, key_id_of: np.ndarray,
               name_of: Callable[[np.ndarray], list[tuple[str, str, int]]],
               offset: np.ndarray, source: pa.Array, client: pa.Array) -> SyncPlan:
    """The plan of the candidate sync `rows` of a run (each key's lines in the run all such
    syncs, its Position current: not resident). A key with a move back that the reset policy
    refuses is left out, to the per-command fold, which refuses that sync there (its key's
    later syncs would start from the offset it kept)."""
    s = rows[np.argsort(key_id_of[rows], kind="stable")]
    ids = key_id_of[s]
    first = np.r_[True, ids[1:] != ids[:-1]] if len(ids) else np.zeros(0, bool)
    key_of = np.cumsum(first) - 1
    keys = name_of(s[first])
    positions = [state.positions.get(k) for k in keys]
    start = np.array([p.table.committed.item(p.row) if p is not None else NULL
                      for p in positions], np.int64)
    generation = np.array([p.generation if p is not None else 0 for p in positions], np.int64)
    off = offset[s]
    before = np.where(first, start[key_of] if len(keys) else 0, np.r_[NULL, off[:-1]])
    back = np.nonzero((before != NULL) & (off < before))[0]
    if len(back):
        policy = ResetPolicy.load(root)
        refused = [i for i in back.tolist()
                   if policy.rewind_refusal(int(before[i] - off[i]), "sync", "") is not None]
        if refused:
            return plan_syncs(state, root, s[~np.isin(ids, ids[refused])], key_id_of, name_of,
                              offset, source, client)
    picked = pa.array(s, pa.int64())
    clients = client.take(picked)
    broadcast = np.array([state.is_broadcast(k[0]) for k in keys], bool)
    if broadcast.any():
        clients = pc.if_else(pa.array(broadcast[key_of]), pa.scalar(None, pa.string()), clients)
    return SyncPlan(s, key_of, keys, off, before, generation, source.take(picked), clients)


def fold_syncs(state: State, plan: SyncPlan, now: np.ndarray, line_base: int,
               actors_of: Callable[[np.ndarray], pa.Array | None],
               ) -> tuple[pa.Table, np.ndarray, SyncResults]:
    """Apply the plan to the state: (its events, EVENT_SCHEMA, seq 0 until appended; each
    event's line in the run; the rows' results, in line order). `now`: each line's ledger
    time; `actors_of`: the actors given for lines of the run, None when none is."""
    changed = plan.changed
    ev = np.nonzero(changed)[0]
    rows = plan.rows[ev]
    k = plan.key_of[ev]
    keys = plan.keys
    # each key's Position (new keys' made now) ends at its last sync, updated at its last event
    state.new_positions([key for key in keys if key not in state.positions])
    table = state.table
    rows_of = np.array([state.positions[key].row for key in keys], np.int64)
    n_keys = len(keys)
    last = np.full(n_keys, -1, np.int64)
    last[plan.key_of] = np.arange(len(plan.rows))  # the last row of each key
    last_event = np.full(n_keys, -1, np.int64)
    last_event[k] = ev
    hit = last_event >= 0
    table.committed[rows_of[hit]] = plan.offset[last[hit]]
    table.last_update_ts[rows_of[hit]] = now[plan.rows[last_event[hit]]]
    state.dirty_rows.update(rows_of[hit].tolist())
    state.events_applied += len(ev)
    if len(ev):
        state.last_ts = max(state.last_ts, int(now[rows].max()))
    source = plan.source.take(pa.array(ev, pa.int64()))
    actor = pc.binary_join_element_wise("sync:", source, "")
    given = actors_of(rows)
    if given is not None:  # the sender's name where one is given, else the source's
        actor = pc.if_else(pc.is_valid(given), given, actor)
    names = [keys[i] for i in k.tolist()]
    before = plan.before[ev]
    events = pa.Table.from_arrays([
        pa.array(np.zeros(len(ev), np.int64)),
        pa.array(now[rows], pa.int64()),
        pa.array(["sync"] * len(ev), pa.string()),
        pa.array([g for g, _, _ in names], pa.string()),
        pa.array([t for _, t, _ in names], pa.string()),
        pa.array([q for _, _, q in names], pa.int32()),
        pa.array(plan.offset[ev], pa.int64()),
        pa.array(before, pa.int64(), mask=before == NULL),
        pa.array(plan.generation[k], pa.int32()),
        plan.client.take(pa.array(ev, pa.int64())),
        actor,
        pa.nulls(len(ev), pa.int64()),
        pc.binary_join_element_wise("sync from ", source, ""),
    ], schema=EVENT_SCHEMA)
    line_order = np.argsort(plan.rows, kind="stable")
    results = SyncResults(
        rows=plan.rows[line_order],
        group=pa.array([g for g, _, _ in keys], pa.string()).take(
            pa.array(plan.key_of[line_order], pa.int64())),
        topic=pa.array([t for _, t, _ in keys], pa.string()).take(
            pa.array(plan.key_of[line_order], pa.int64())),
        queue_id=np.array([q for _, _, q in keys], np.int64)[plan.key_of[line_order]]
        if keys else np.zeros(0, np.int64),
        before=plan.before[line_order], offset=plan.offset[line_order],
        changed=changed[line_order])
    return events, rows, results
