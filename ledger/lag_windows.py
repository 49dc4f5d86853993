"""The window of each key at a time T, read from the log (DESIGN.md, "Lag health").

A window is the key's last N commits and syncs at or before T, after its latest reset (or
delete, expiry, first assignment: a new life of the offset). Each entry is (ts, the group's
offset right after the event).

Read backwards in ranges between checkpoints, newest first, and only as far back as the windows
reach: the range [newest checkpoint at or before T, T), then the range before it for the keys
still short of N entries, and so on. A key is done when it has N entries, when a range holds its
window's start, or when the checkpoint opening a range shows no offset for it (its life began
in that range). So a query costs about N commits per key of log, never the whole ledger.

Groups that cluster throughout a range (nearly all) take one DuckDB query over it: the newest N
entry or window-start events per key (`WINDOW_SQL`); the group's offset after a commit is the
commit's offset. A group in broadcast mode at the range's checkpoint, or set to it inside the
range, is folded event by event from that checkpoint with the ledger's own fold (`State.apply`),
its offset after each commit being the minimum over live clients, as `State.committed` says.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from ledger.checkpoint import table_to_state
from ledger.state import BROADCAST, Key, State
from ledger.timeline import quote
from ledger.view import arrow_result

if TYPE_CHECKING:
    from ledger.ledger import Ledger

ENTRY_KINDS = ("commit", "sync")
# Events that open a new window of their key: a deliberate move (reset) or a new life of the
# offset (deleted, expired, or first assigned by a pull).
START_KINDS = ("reset", "delete", "expire", "initial")

WINDOW_SQL = """
SELECT consumer_group, topic, queue_id, seq, ts, kind, "offset",
       CASE WHEN kind = 'group_config' THEN json_extract_string(detail, '$.mode') END AS mode
FROM ({source}) src
WHERE seq >= {seq_from} AND seq < {seq_to} {group_cond}
  AND kind IN ('commit', 'sync', 'reset', 'delete', 'expire', 'initial', 'group_config')
QUALIFY kind = 'group_config' OR row_number() OVER (
    PARTITION BY consumer_group, topic, queue_id ORDER BY seq DESC) <= {window}
ORDER BY seq
"""

FOLD_SQL = """
SELECT kind, ts, consumer_group, topic, queue_id, "offset", prev_offset, generation, client_id,
       store_ts, detail
FROM ({source}) src
WHERE seq >= {seq_from} AND seq < {seq_to} AND consumer_group IN ({groups})
  AND kind NOT IN ('queue_append', 'queue_truncate', 'reset_refused')
ORDER BY seq
"""

Raw = tuple[int, int]  # (ts, offset) of one entry


@dataclass
class _Reading:
    """Per key: entries found so far (oldest first) and whether the window is complete."""

    window: int
    entries: dict[Key, list[Raw]] = field(default_factory=dict)
    done: set[Key] = field(default_factory=set)

    def prepend(self, key: Key, older: list[Raw], started: bool) -> None:
        """Entries of an earlier range; `started`: the window's start lies in that range."""
        got = older + self.entries.get(key, [])
        self.entries[key] = got[-self.window:]
        if started or len(got) >= self.window:
            self.done.add(key)


def read_windows(led: Ledger, keys: Iterable[Key], seq_to: int, window: int) -> dict[Key, list[Raw]]:
    """The window of every key in `keys` made of events before `seq_to`: at most `window`
    (ts, offset) entries each, oldest first."""
    reading = _Reading(window)
    wanted = set(keys)
    hi = seq_to
    for lo in reversed(_range_starts(led, seq_to)):
        todo = wanted - reading.done
        if not todo:
            break
        _read_range(led, reading, todo, lo, hi)
        hi = lo
    return {k: reading.entries.get(k, []) for k in wanted}


def _range_starts(led: Ledger, seq_to: int) -> list[int]:
    """Where ranges begin: checkpoints at or after the log start (their state is known there),
    and 0 for a log that starts there."""
    start = led.log.start_seq
    starts = [c for c in led.log.checkpoints() if start <= c < seq_to]
    if start == 0 and (not starts or starts[0] != 0):
        starts.insert(0, 0)
    return starts


def has_offset(state: State, key: Key) -> bool:
    """The group has an offset on the key: its own, or (in broadcast mode) a client's. A window
    never reaches back past a moment without one: the offset's life began after it."""
    pos = state.positions.get(key)
    if pos is not None and pos.committed is not None:
        return True
    return state.is_broadcast(key[0]) and any(
        c.committed is not None for c in state.clients.get(key, {}).values())


def _checkpoint_state(led: Ledger, seq: int, groups: set[str]) -> State:
    """The state at checkpoint `seq` restricted to `groups` (settings, positions, clients);
    the empty state at seq 0 without a checkpoint."""
    if seq not in led.log.checkpoints():
        return State()
    table = led.log.read_checkpoint(seq)
    keep = pc.and_(
        pc.is_in(table.column("row"), value_set=pa.array(["group", "position", "client"])),
        pc.is_in(table.column("consumer_group"), value_set=pa.array(sorted(groups))))
    return table_to_state(table.filter(keep))


def _read_range(led: Ledger, reading: _Reading, todo: set[Key], lo: int, hi: int) -> None:
    groups = {k[0] for k in todo}
    at_lo = _checkpoint_state(led, lo, groups)
    con, source = led._state_at_source(lo, hi)
    try:
        rows = arrow_result(con.execute(WINDOW_SQL.format(
            source=source, seq_from=lo, seq_to=hi, window=reading.window,
            group_cond=f"AND consumer_group IN ({', '.join(map(quote, sorted(groups)))})"
        ))).to_pydict()
        broadcast = {g for g in groups if at_lo.is_broadcast(g)} | {
            g for g, mode in zip(rows["consumer_group"], rows["mode"], strict=True)
            if mode == BROADCAST}
        _clustering_range(reading, todo, rows, broadcast)
        if broadcast:
            _fold_range(con, source, reading, todo, lo, hi, sorted(broadcast), at_lo)
    finally:
        con.close()
    for key in todo - reading.done:
        if not has_offset(at_lo, key):  # the offset's life began in the range
            reading.prepend(key, [], True)


def _clustering_range(reading: _Reading, todo: set[Key], rows: dict[str, list],
                      broadcast: set[str]) -> None:
    """Keys of groups that cluster throughout the range: the rows are their newest entries and
    window starts, oldest first; an entry's offset is the event's. (In clustering mode an
    expiry, a delete or a first assignment is exactly when the key's offset ends or begins.)"""
    found: dict[Key, list[Raw]] = {}
    started: set[Key] = set()
    for g, t, q, ts, kind, offset in zip(
        rows["consumer_group"], rows["topic"], rows["queue_id"], rows["ts"], rows["kind"],
        rows["offset"], strict=True,
    ):
        key = (g, t, q)
        if g in broadcast or key not in todo:
            continue
        if kind in START_KINDS:
            found[key] = []
            started.add(key)
        elif kind in ENTRY_KINDS:
            found.setdefault(key, []).append((ts, offset))
    for key in todo:
        if key[0] not in broadcast:
            reading.prepend(key, found.get(key, []), key in started)


def _fold_range(con: object, source: str, reading: _Reading, todo: set[Key], lo: int, hi: int,
                groups: list[str], state: State) -> None:
    """Groups in broadcast mode somewhere in the range: the ledger's fold from the range's
    checkpoint, an entry after each commit or sync holding the group's offset then. A window
    starts at a reset or delete, and after any event that leaves the key without an offset
    (`has_offset`: this also starts the window of a key missing at the checkpoint)."""
    events = arrow_result(con.execute(FOLD_SQL.format(  # type: ignore[attr-defined]
        source=source, seq_from=lo, seq_to=hi, groups=", ".join(map(quote, groups))))).to_pydict()
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
        if t is None:  # a group's mode changed: which offsets count may have too
            for key in by_group.get(g, ()):
                if not has_offset(state, key):
                    found[key] = []
                    started.add(key)
            continue
        key = (g, t, q)
        if key not in todo:
            continue
        if kind in ("reset", "delete") or not has_offset(state, key):  # type: ignore[arg-type]
            found[key] = []
            started.add(key)
        elif kind in ENTRY_KINDS:
            committed = state.committed(key, ts)  # type: ignore[arg-type]
            if committed is not None:
                found.setdefault(key, []).append((ts, committed))
    members = set(groups)
    for key in todo:
        if key[0] in members:
            reading.prepend(key, found.get(key, []), key in started)
