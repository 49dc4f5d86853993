"""The window of each key at a time T, read from the log (DESIGN.md, "Lag health").

A window is the key's last N commits and syncs at or before T within the current life of its
offset: after its latest reset or delete, and after the latest moment the group had no offset
on the queue (expired, deleted, not yet assigned). Each entry is (ts, the group's offset right
after the event).

Read backwards in ranges that start at checkpoints, newest first, and only as far back as the
windows reach: the range from the newest checkpoint before T, then ranges twice as many
checkpoints long each time, for the keys still short of N entries. A key is done when it has N
entries, when a range holds its window's start, or when the checkpoint opening a range shows no
offset for it (its life began in that range). So a query reads about N commits per key of log
(the last ones), never the whole ledger, and a handful of queries.

Groups that cluster throughout a range (nearly all) take one DuckDB query over it, which also
cuts each window at its start (`WINDOW_SQL`); the group's offset after a commit is the commit's
offset. A group in broadcast mode at the range's checkpoint, or set to it inside the range, is
folded event by event from that checkpoint with the ledger's own fold (`State.apply`), its
offset after each commit being the minimum over live clients, as `State.committed` says.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ledger.checkpoint import CHECKPOINT_SCHEMA, table_to_state
from ledger.state import Key, State
from ledger.timeline import EMPTY_CHECKPOINT, quote
from ledger.view import arrow_result

if TYPE_CHECKING:
    from ledger.ledger import Ledger

ENTRY_KINDS = ("commit", "sync")

# Per key: its newest `window` entry or window-start events (newest first: max_by keeps the n
# largest with a heap, no sort of the range), cut at the start in Python; per group (null
# topic): whether it was in broadcast mode at the checkpoint or set to it in the range (those
# groups are folded instead). In clustering mode a reset, delete, expiry or first assignment
# is exactly a window's start: the offset moved on purpose, or its life ended or began.
WINDOW_SQL = """
SELECT consumer_group, topic, queue_id,
       max_by(ts, seq, {window}) FILTER (WHERE kind IN {kinds}) AS ts,
       max_by("offset", seq, {window}) FILTER (WHERE kind IN {kinds}) AS offsets,
       max_by(kind, seq, {window}) FILTER (WHERE kind IN {kinds}) AS kinds,
       coalesce(bool_or(mode = 'broadcast'), false) AS broadcast,
       coalesce(bool_or(seq < 0 AND mode = 'broadcast'), false) AS broadcast_at_start
FROM (
    SELECT consumer_group, topic, queue_id, seq, ts, kind, "offset",
           CASE WHEN kind = 'group_config' THEN json_extract_string(detail, '$.mode') END AS mode
    FROM ({source}) src
    WHERE seq >= {seq_from} AND seq < {seq_to} {group_cond}
      AND kind IN ('commit', 'sync', 'reset', 'delete', 'expire', 'initial', 'group_config')
    UNION ALL
    SELECT consumer_group, NULL, NULL, -1, NULL, 'checkpoint', NULL,
           json_extract_string(detail, '$.mode')
    FROM {checkpoint} WHERE "row" = 'group' {group_cond}
)
GROUP BY ALL
"""
WINDOW_KINDS = "('commit', 'sync', 'reset', 'delete', 'expire', 'initial')"
# Above this many groups a range is read for every group (a filter by a long list of names
# costs more than the rows it saves).
GROUP_FILTER_MAX = 20

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

Raw = tuple[int, int]  # (ts, offset) of one entry


class _Reading:
    """Per key: entries found so far (oldest first) and whether the window is complete."""

    def __init__(self, keys: Iterable[Key], window: int) -> None:
        self.window = window
        self.todo: set[Key] = set(keys)
        self.entries: dict[Key, list[Raw]] = {}

    def prepend(self, key: Key, older: list[Raw], started: bool) -> None:
        """Entries of an earlier range; `started`: the window's start lies in that range."""
        got = older + self.entries[key] if key in self.entries else older
        if len(got) > self.window:
            got = got[-self.window:]
        self.entries[key] = got
        if started or len(got) >= self.window:
            self.todo.discard(key)


class _Range:
    """One range of the log, [lo, hi), with the checkpoint at lo (None: seq 0, empty state)."""

    def __init__(self, led: Ledger, lo: int, hi: int, checkpoint: Path | None) -> None:
        self.lo, self.hi = lo, hi
        self.checkpoint = (f"read_parquet({quote(str(checkpoint))})" if checkpoint is not None
                           else EMPTY_CHECKPOINT)
        self.con, self.source = led._state_at_source(lo, hi)

    def table(self, sql: str, groups: Sequence[str] | None, **values: Any) -> pa.Table:
        cond = "" if groups is None else f"AND consumer_group IN ({_names(groups)})"
        return arrow_result(self.con.execute(sql.format(
            source=self.source, checkpoint=self.checkpoint, seq_from=self.lo, seq_to=self.hi,
            group_cond=cond, **values)))

    def fetch(self, sql: str, groups: Sequence[str] | None, **values: Any) -> dict[str, list]:
        return self.table(sql, groups, **values).to_pydict()

    def state(self, groups: Sequence[str]) -> State:
        """The state at lo of `groups` (settings, positions, clients)."""
        if self.checkpoint == EMPTY_CHECKPOINT:
            return State()
        return table_to_state(self.table(CHECKPOINT_ROWS_SQL, groups).cast(CHECKPOINT_SCHEMA))

    def close(self) -> None:
        self.con.close()


def _names(groups: Iterable[str]) -> str:
    return ", ".join(map(quote, groups)) or "NULL"


def read_windows(led: Ledger, keys: Iterable[Key], seq_to: int, window: int,
                 all_groups: bool = False) -> dict[Key, list[Raw]]:
    """The window of every key in `keys` made of events before `seq_to`: at most `window`
    (ts, offset) entries each, oldest first. `all_groups`: the keys are every key with an
    offset (the first range then needs no group filter)."""
    reading = _Reading(keys, window)
    wanted = set(reading.todo)
    starts = _range_starts(led, seq_to)
    cps = set(led.log.checkpoints())
    hi, span = seq_to, 1
    while reading.todo and starts:
        lo = starts[max(0, len(starts) - span)]
        del starts[max(0, len(starts) - span):]
        groups = sorted({k[0] for k in reading.todo})
        if len(groups) > GROUP_FILTER_MAX or (all_groups and hi == seq_to):
            groups = None
        part = _Range(led, lo, hi, led.log.checkpoint_path(lo) if lo in cps else None)
        try:
            _read_range(part, reading, groups)
        finally:
            part.close()
        hi, span = lo, span * 2
    return {k: reading.entries.get(k, []) for k in wanted}


def _range_starts(led: Ledger, seq_to: int) -> list[int]:
    """Where ranges may begin, ascending: checkpoints before `seq_to` at or after the log start
    (the state is known there), and 0 for a log that starts there."""
    start = led.log.start_seq
    starts = [c for c in led.log.checkpoints() if start <= c < seq_to]
    if start == 0 and (not starts or starts[0] != 0):
        starts.insert(0, 0)
    return starts


def _read_range(part: _Range, reading: _Reading, groups: list[str] | None) -> None:
    rows = part.fetch(WINDOW_SQL, groups, window=reading.window, kinds=WINDOW_KINDS)
    folded: set[str] = set()
    at_start: set[str] = set()
    for g, t, broadcast, first in zip(rows["consumer_group"], rows["topic"], rows["broadcast"],
                                      rows["broadcast_at_start"], strict=True):
        if t is None and broadcast:
            folded.add(g)
            if first:
                at_start.add(g)
    todo = reading.todo
    for g, t, q, ts, offsets, kinds in zip(
        rows["consumer_group"], rows["topic"], rows["queue_id"], rows["ts"], rows["offsets"],
        rows["kinds"], strict=True,
    ):
        key = (g, t, q)
        if key not in todo or g in folded or not kinds:
            continue
        found: list[Raw] = []
        started = False
        for i, kind in enumerate(kinds):  # newest first
            if kind not in ENTRY_KINDS:
                started = True
                break
            found.append((ts[i], offsets[i]))
        found.reverse()
        reading.prepend(key, found, started)
    if folded & {k[0] for k in todo}:
        _fold_range(part, reading, sorted(folded))
    if todo:  # keys the checkpoint shows without an offset began their life in the range
        holders = part.fetch(HOLDERS_SQL, sorted({k[0] for k in todo}),
                             broadcast=_names(sorted(at_start)))
        have = set(zip(holders["consumer_group"], holders["topic"], holders["queue_id"],
                       strict=True))
        for key in [k for k in todo if k not in have]:
            reading.prepend(key, [], True)


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
    found: dict[Key, list[Raw]] = {}
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
                    found[key] = []
                    started.add(key)
            continue
        key = (g, t, q)
        if key not in todo:
            continue
        if kind in ("reset", "delete") or not has_offset(state, key):
            found[key] = []
            started.add(key)
        elif kind in ENTRY_KINDS:
            committed = state.committed(key, ts)
            if committed is not None:
                found.setdefault(key, []).append((ts, committed))
    members = set(groups)
    for key in [k for k in todo if k[0] in members]:
        reading.prepend(key, found.get(key, []), key in started)
