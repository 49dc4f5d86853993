"""The window of each key at a time T, read from the log (DESIGN.md, "Lag health").

A window is the key's last N commits and syncs at or before T within the current life of its
offset: after its latest reset or delete, and after the latest moment the group had no offset
on the queue (expired, deleted, not yet assigned). Each entry is (ts, the group's offset right
after the event).

Read backwards in ranges that start at checkpoints, newest first, and only as far back as the
windows reach: a first range from a checkpoint far enough before T to hold most windows,
then ranges twice as many checkpoints long each time, for the keys still short of N entries.
A key is done when it has N entries, when a range holds its window's start, or when the
checkpoint opening a range shows no offset for it (its life began in that range). So a query
reads about N commits per key of log (the last ones), never the whole ledger, in a handful of
queries.

Groups that cluster throughout a range (nearly all) take one DuckDB scan of it for their entry
and window-start events, cut per key with numpy (`_cut`); the group's offset after a commit is
the commit's offset, and in clustering mode a reset, delete, expiry or first assignment is
exactly a window's start. A group in broadcast mode at the range's checkpoint, or set to it
inside the range, is folded event by event from that checkpoint with the ledger's own fold
(`State.apply`), its offset after each commit being the minimum over live clients, as
`State.committed` says.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.fold.state import Key, State
from ledger.reads.keyed_state import broadcast_groups
from ledger.reads.state_at import checkpoint_rows, group_events, register_checkpoint
from ledger.reads.state_at import source as state_at_source
from ledger.reads.timeline import EMPTY_CHECKPOINT, quote
from ledger.store.checkpoint import CHECKPOINT_SCHEMA, table_to_state
from ledger.store.view import arrow_result
from ledger.store.writer import Writer
from storage import SegmentedLog

ENTRY_KINDS = ("commit", "sync")
START_KINDS = ("reset", "delete", "expire", "initial")
_ENTRY_AND_START = pa.array(ENTRY_KINDS + START_KINDS, pa.string())

# The clustering groups' entry and window-start events of a range, in log order.
EVENTS_SQL = """
SELECT consumer_group, topic, queue_id, ts, kind, "offset"
FROM ({source}) src
WHERE seq >= {seq_from} AND seq < {seq_to} AND topic IS NOT NULL {group_cond}
  AND kind IN ('commit', 'sync', 'reset', 'delete', 'expire', 'initial')
ORDER BY seq
"""

# Groups in broadcast mode at the checkpoint (at_start) or set to it in the range.
BROADCAST_SQL = """
SELECT consumer_group, bool_or(seq < 0) AS at_start FROM (
    SELECT consumer_group, seq FROM ({source}) src
    WHERE seq >= {seq_from} AND seq < {seq_to} AND kind = 'group_config' {group_cond}
      AND json_extract_string(detail, '$.mode') = 'broadcast'
    UNION ALL
    SELECT consumer_group, -1 FROM {checkpoint}
    WHERE "row" = 'group' AND json_extract_string(detail, '$.mode') = 'broadcast' {group_cond}
) GROUP BY ALL
"""

# Keys with an offset at the checkpoint: the group's own, or (in broadcast mode then) a client's.
HOLDERS_SQL = """
SELECT DISTINCT consumer_group, topic, queue_id FROM {checkpoint}
WHERE "row" IN ('position', 'client') AND committed IS NOT NULL {group_cond}
  AND ("row" = 'position' OR consumer_group IN ({broadcast}))
"""

CHECKPOINT_ROWS_SQL = """
SELECT * FROM {checkpoint} WHERE "row" IN ('group', 'position', 'client') {group_cond}
"""

FOLD_SQL = """
SELECT kind, ts, consumer_group, topic, queue_id, "offset", prev_offset, generation, client_id,
       store_ts, detail
FROM ({source}) src
WHERE seq >= {seq_from} AND seq < {seq_to} {group_cond}
  AND kind NOT IN ('queue_append', 'queue_truncate', 'reset_refused')
ORDER BY seq
"""

# Above this many groups a range is read for every group (a filter by a long list of names
# costs more than the rows it saves).
GROUP_FILTER_MAX = 20
# The first range spans at least this many events, and this many per entry wanted of every
# key of the ledger (where every key consumes, one commits about once per keys x 2 events: a
# pull and a commit; x 3 leaves room for the keys slower than the mean): a query's cost is
# mostly fixed, so a range that holds nearly every window beats two (on the 10M bench ledger
# one group took 36 ms rather than 60), and the newest checkpoint may sit just before T (a
# writer checkpoints as it closes).
FIRST_RANGE_EVENTS = 250_000
FIRST_RANGE_EVENTS_PER_ENTRY_AND_KEY = 3

Window = tuple[list[int], list[int]]  # (ts, offset) of each entry, oldest first


class _Reading:
    """Per key: entries found so far (oldest first) and whether the window is complete."""

    def __init__(self, keys: Iterable[Key], window: int) -> None:
        self.window = window
        self.todo: set[Key] = set(keys)
        self.entries: dict[Key, Window] = {}

    def prepend(self, key: Key, ts: list[int], offsets: list[int], started: bool) -> None:
        """Entries of an earlier range; `started`: the window's start lies in that range."""
        later = self.entries.get(key)
        if later is not None:
            ts, offsets = ts + later[0], offsets + later[1]
        n = len(ts)
        if n > self.window:
            ts, offsets = ts[n - self.window:], offsets[n - self.window:]
        self.entries[key] = (ts, offsets)
        if started or n >= self.window:
            self.todo.discard(key)


class _Range:
    """One range of the log, [lo, hi), with the checkpoint at lo (`checkpoint` false: seq 0,
    the empty state). For a few groups (`groups`) their events are found by the log's read
    index and the checkpoint's key rows are the reader's, kept, both as Arrow tables: the
    questions of clustering groups are answered from them without DuckDB (three queries' fixed
    cost was most of a group's lag); DuckDB opens only for what needs it."""

    def __init__(self, writer: Writer, lo: int, hi: int, checkpoint: bool,
                 groups: Sequence[str] | None) -> None:
        self.lo, self.hi = lo, hi
        self._writer, self._checkpoint, self._groups = writer, checkpoint, groups
        self.events = None if groups is None else group_events(writer.log, lo, hi, groups)
        self.checkpoint_rows = checkpoint_rows(writer, lo, groups) if checkpoint else None
        self._duck: tuple[Any, str, str] | None = None

    def _duckdb(self) -> tuple[Any, str, str]:
        """A cursor with the range's events and checkpoint rows: (con, source, checkpoint)."""
        if self._duck is None:
            con, source = state_at_source(self._writer, self.lo, self.hi, self._groups,
                                          self.events)
            try:
                checkpoint = (EMPTY_CHECKPOINT if self.checkpoint_rows is None
                              else register_checkpoint(con, self.checkpoint_rows))
            except BaseException:
                con.close()
                raise
            self._duck = (con, source, checkpoint)
        return self._duck

    def table(self, sql: str, groups: Sequence[str] | None, **values: Any) -> pa.Table:
        con, source, checkpoint = self._duckdb()
        cond = "" if groups is None else f"AND consumer_group IN ({_names(groups)})"
        return arrow_result(con.execute(sql.format(
            source=source, checkpoint=checkpoint, seq_from=self.lo, seq_to=self.hi,
            group_cond=cond, **values)))

    def fetch(self, sql: str, groups: Sequence[str] | None, **values: Any) -> dict[str, list]:
        return self.table(sql, groups, **values).to_pydict()

    def broadcast(self, groups: Sequence[str] | None) -> tuple[set[str], set[str]]:
        """Groups in broadcast mode somewhere in the range, and those of them at the
        checkpoint (BROADCAST_SQL)."""
        if self.events is not None:
            configs = self.events.filter(pc.equal(self.events.column("kind"), "group_config"))
            in_range = broadcast_groups(configs)
            rows = self.checkpoint_rows
            at_start = (set() if rows is None else
                        broadcast_groups(rows.filter(pc.equal(rows.column("row"), "group"))))
            if in_range is not None and at_start is not None:
                return in_range | at_start, at_start
        modes = self.fetch(BROADCAST_SQL, groups)
        return set(modes["consumer_group"]), {
            g for g, first in zip(modes["consumer_group"], modes["at_start"], strict=True)
            if first}

    def entries(self, groups: Sequence[str] | None) -> pa.Table:
        """The range's entry and window-start events, in log order (EVENTS_SQL)."""
        if self.events is None:
            return self.table(EVENTS_SQL, groups)
        events = self.events
        keep = pc.and_(pc.is_valid(events.column("topic")),
                       pc.is_in(events.column("kind"), value_set=_ENTRY_AND_START))
        return events.filter(keep).select(
            ["consumer_group", "topic", "queue_id", "ts", "kind", "offset"])

    def holders(self, groups: Sequence[str], at_start: set[str]) -> set[Key]:
        """Keys of `groups` with an offset at the checkpoint (HOLDERS_SQL)."""
        if self.events is None:
            found = self.fetch(HOLDERS_SQL, groups, broadcast=_names(sorted(at_start)))
            return set(zip(found["consumer_group"], found["topic"], found["queue_id"],
                           strict=True))
        rows = self.checkpoint_rows
        if rows is None:
            return set()
        kind = rows.column("row")
        keep = pc.and_(pc.is_valid(rows.column("committed")),
                       pc.is_in(rows.column("consumer_group"),
                                value_set=pa.array(list(groups), pa.string())))
        own = pc.equal(kind, "position")
        if at_start:
            own = pc.or_(own, pc.and_(pc.equal(kind, "client"), pc.is_in(
                rows.column("consumer_group"), value_set=pa.array(sorted(at_start),
                                                                   pa.string()))))
        found = rows.filter(pc.and_(keep, own))
        return set(zip(found.column("consumer_group").to_pylist(),
                       found.column("topic").to_pylist(),
                       found.column("queue_id").to_pylist(), strict=True))

    def state(self, groups: Sequence[str]) -> State:
        """The state at lo of `groups` (settings, positions, clients)."""
        if not self._checkpoint:
            return State()
        return table_to_state(self.table(CHECKPOINT_ROWS_SQL, groups).cast(CHECKPOINT_SCHEMA))

    def close(self) -> None:
        if self._duck is not None:
            self._duck[0].close()


def _names(groups: Iterable[str]) -> str:
    return ", ".join(map(quote, groups)) or "NULL"


def read_windows(writer: Writer, keys: Iterable[Key], seq_to: int, window: int,
                 all_groups: bool = False) -> dict[Key, Window]:
    """The window of every key in `keys` made of events before `seq_to`: at most `window`
    entries each, oldest first. `all_groups`: the keys are every key with an offset (the first
    range then needs no group filter)."""
    reading = _Reading(keys, window)
    wanted = set(reading.todo)
    starts = _range_starts(writer.log, seq_to)
    cps = set(writer.log.checkpoints())
    hi = seq_to
    # checkpoints per range: enough for the first range's events, then 2, 4, 8 ...
    first = max(FIRST_RANGE_EVENTS,
                FIRST_RANGE_EVENTS_PER_ENTRY_AND_KEY * window * len(writer.state.positions))
    take, next_take = len([s for s in starts if s > seq_to - first]) + 1, 2
    while reading.todo and starts:
        lo = starts[max(0, len(starts) - take)]
        del starts[max(0, len(starts) - take):]
        groups: list[str] | None = sorted({k[0] for k in reading.todo})
        if len(groups) > GROUP_FILTER_MAX or (all_groups and hi == seq_to):  # type: ignore[arg-type]
            groups = None
        part = _Range(writer, lo, hi, lo in cps, groups)
        try:
            _read_range(part, reading, groups)
        finally:
            part.close()
        hi, take, next_take = lo, next_take, next_take * 2
    return {k: reading.entries.get(k, ([], [])) for k in wanted}


def _range_starts(log: SegmentedLog, seq_to: int) -> list[int]:
    """Where ranges may begin, ascending: checkpoints before `seq_to` at or after the log start
    (the state is known there), and 0 for a log that starts there."""
    start = log.start_seq
    starts = [c for c in log.checkpoints() if start <= c < seq_to]
    if start == 0 and (not starts or starts[0] != 0):
        starts.insert(0, 0)
    return starts


def _read_range(part: _Range, reading: _Reading, groups: list[str] | None) -> None:
    folded, at_start = part.broadcast(groups)
    todo = reading.todo
    for key, ts, offsets, started in _cut(part.entries(groups), reading.window):
        if key in todo and key[0] not in folded:
            reading.prepend(key, ts, offsets, started)
    if folded & {k[0] for k in todo}:
        _fold_range(part, reading, sorted(folded))
    if todo:  # keys the checkpoint shows without an offset began their life in the range
        have = part.holders(sorted({k[0] for k in todo}), at_start)
        for key in [k for k in todo if k not in have]:
            reading.prepend(key, [], [], True)


def _cut(events: pa.Table, window: int) -> Iterable[tuple[Key, list[int], list[int], bool]]:
    """Per key of `events` (in log order): the entries after the newest window start among its
    last `window` events, and whether there was one. Column-wise: keys coded as integers, one
    stable sort, boundaries and ranks from the end with numpy; Python only per key."""
    n = events.num_rows
    if n == 0:
        return
    groups = pc.dictionary_encode(events.column("consumer_group").combine_chunks())
    topics = pc.dictionary_encode(events.column("topic").combine_chunks())
    queues = events.column("queue_id").to_numpy().astype(np.int64)
    g_codes = groups.indices.to_numpy().astype(np.int64)
    t_codes = topics.indices.to_numpy().astype(np.int64)
    code = (g_codes * len(topics.dictionary) + t_codes) * (int(queues.max()) + 1) + queues
    order = np.argsort(code, kind="stable")  # by key, log order within a key
    code = code[order]
    first = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    last = np.r_[first[1:], n] - 1
    group_of = np.repeat(np.arange(len(first)), np.diff(np.r_[first, n]))
    index = np.arange(n)
    recent = last[group_of] - index < window  # among the key's last `window` events
    starts = pc.is_in(events.column("kind"), value_set=pa.array(START_KINDS)).to_numpy(
        zero_copy_only=False)[order] & recent
    # per row, the position of the newest start so far in its key (first - 1: none yet)
    newest = np.maximum.accumulate(np.where(starts, index, first[group_of] - 1))
    cut = newest[last]
    keep = recent & ~starts & (index > cut[group_of])
    ts = events.column("ts").to_numpy()[order]
    offsets = pc.fill_null(events.column("offset"), -1).to_numpy()[order]  # null: starts
    g_names, t_names = groups.dictionary.to_pylist(), topics.dictionary.to_pylist()
    kept = np.flatnonzero(keep)
    bounds = np.searchsorted(kept, first).tolist() + [len(kept)]
    ts_kept, offsets_kept = ts[kept].tolist(), offsets[kept].tolist()
    rows = order[first]
    for i, (g, t, q, fi, cu) in enumerate(zip(
        g_codes[rows].tolist(), t_codes[rows].tolist(), queues[rows].tolist(), first.tolist(),
        cut.tolist(), strict=True,
    )):
        a, b = bounds[i], bounds[i + 1]
        yield (g_names[g], t_names[t], q), ts_kept[a:b], offsets_kept[a:b], cu >= fi


def has_offset(state: State, key: Key) -> bool:
    """The group has an offset on the key: its own, or (in broadcast mode) a client's. A window
    never reaches back past a moment without one: the offset's life began after it."""
    pos = state.positions.get(key)
    if pos is not None and pos.committed is not None:
        return True
    return state.is_broadcast(key[0]) and any(
        c.committed is not None for c in state.clients.get(key, {}).values())


def _fold_range(part: _Range, reading: _Reading, groups: list[str]) -> None:
    """Groups in broadcast mode somewhere in the range: the ledger's fold from the range's
    checkpoint, an entry after each commit or sync holding the group's offset then. A window
    starts at a reset or delete, and after any event that leaves the key without an offset
    (`has_offset`), a change of the group's mode included."""
    state = part.state(groups)
    events = part.fetch(FOLD_SQL, groups)
    todo = reading.todo
    found: dict[Key, Window] = {}
    started: set[Key] = set()
    by_group: dict[str, list[Key]] = {}
    for key in todo:
        by_group.setdefault(key[0], []).append(key)
    for kind, ts, g, t, q, offset, prev, gen, client, store_ts, detail in zip(
        events["kind"], events["ts"], events["consumer_group"], events["topic"],
        events["queue_id"], events["offset"], events["prev_offset"], events["generation"],
        events["client_id"], events["store_ts"], events["detail"], strict=True,
    ):
        state.apply(kind, ts, g, t, q, offset, prev, gen, client, store_ts, detail)
        if t is None:  # the group's settings changed: which offsets count may have too
            for key in by_group.get(g, ()):
                if not has_offset(state, key):
                    found[key] = ([], [])
                    started.add(key)
            continue
        key = (g, t, q)
        if key not in todo:
            continue
        if kind in ("reset", "delete") or not has_offset(state, key):
            found[key] = ([], [])
            started.add(key)
        elif kind in ENTRY_KINDS:
            committed = state.committed(key, ts)
            if committed is not None:
                entries = found.setdefault(key, ([], []))
                entries[0].append(ts)
                entries[1].append(committed)
    members = set(groups)
    for key in [k for k in todo if k[0] in members]:
        ts_list, offsets = found.get(key, ([], []))
        reading.prepend(key, ts_list, offsets, key in started)
