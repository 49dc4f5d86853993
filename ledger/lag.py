"""Lag, time lag and lag health of consumer groups at any ledger time T (DESIGN.md, "Lag health
and time lag"): the document of `offset-ledger lag --json`, `Ledger.lag`, and the server's
`/v1/groups/{group}/lag`, all one list of group objects.

Exact, never interpolated: the committed offsets at T come from the state (now) or from
`Ledger.state_at` (checkpoint + log); MaxOffset at any time and the store time of the message at
any offset come from the appends every queue keeps (`QueueState.append_*`, carried by
checkpoints); windows are read from the log by `ledger.lag_windows`; the judgement is
`ledger.lag_health`, a pure function.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger.errors import InvalidInput
from ledger.lag_health import Entry, HealthSettings, group_status, queue_status
from ledger.lag_windows import Raw, read_windows
from ledger.limits import (
    LAG_SERIES_POINTS_MAX,
    LAG_WINDOW_MAX,
    OFFSET_MAX,
    QUEUE_ID_MAX,
    TS_MAX,
    check_int,
    check_name,
)
from ledger.state import Key, QueueState, snapshot_rows

if TYPE_CHECKING:
    from ledger.ledger import Ledger


@dataclass(frozen=True, slots=True)
class LagScope:
    """Which queues a lag question covers: a group or all, a topic (and queues) or all."""

    group: str | None = None
    topic: str | None = None
    queue_ids: frozenset[int] | None = None

    def covers(self, key: Key) -> bool:
        return ((self.group is None or key[0] == self.group)
                and (self.topic is None or key[1] == self.topic)
                and (self.queue_ids is None or key[2] in self.queue_ids))


def lag_scope(group: str | None, topic: str | None) -> LagScope:
    """A checked scope; `topic` is `T` or `T:0,2` (queues 0 and 2 of T)."""
    if group is not None:
        check_name(group, "group")
    if topic is None:
        return LagScope(group)
    name, colon, ids = topic.partition(":")
    check_name(name, "topic")
    if not colon:
        return LagScope(group, name)
    queue_ids: set[int] = set()
    for part in ids.split(","):
        if not part.strip().isdigit() or int(part) > QUEUE_ID_MAX:
            raise InvalidInput(f"invalid --topic {topic!r}: use T or T:0,2 (queue ids from 0 to "
                               f"{QUEUE_ID_MAX})")
        queue_ids.add(int(part))
    return LagScope(group, name, frozenset(queue_ids))


def health_settings(window: int, allowed_lag: int) -> HealthSettings:
    return HealthSettings(check_int(window, "window", 1, LAG_WINDOW_MAX),
                          check_int(allowed_lag, "allowed lag", 0, OFFSET_MAX))


def check_at(at_ms: int | None) -> int | None:
    return None if at_ms is None else check_int(at_ms, "time", 0, TS_MAX)


def check_series(since_ms: int, until_ms: int, every_ms: int) -> tuple[int, int, int]:
    """Checked bounds of a series: since <= until, a step of at least 1 ms, a bounded count."""
    check_int(since_ms, "since", 0, TS_MAX)
    check_int(until_ms, "until", 0, TS_MAX)
    check_int(every_ms, "every", 1, TS_MAX)
    if until_ms < since_ms:
        raise InvalidInput(f"invalid until {until_ms}: before since {since_ms}")
    points = (until_ms - since_ms) // every_ms + 1
    if points > LAG_SERIES_POINTS_MAX:
        raise InvalidInput(f"a series of {points} points is too long (at most "
                           f"{LAG_SERIES_POINTS_MAX}): use a longer step or a shorter span")
    return since_ms, until_ms, every_ms


# ----------------------------------------------------------------------------- the appends
def max_offset_at(q: QueueState | None, at_ms: int) -> int | None:
    """MaxOffset after every append at or before `at_ms`; None while no append is known."""
    return max_offsets_at(q, (at_ms,))[0]


def max_offsets_at(q: QueueState | None, times: Sequence[int]) -> list[int | None]:
    """`max_offset_at` of each of `times` (ascending: each search starts where the last one
    ended, as a window's entries are in log order)."""
    if q is None or not q.append_ts:
        return [None] * len(times)
    ts, first, n, top = q.append_ts, q.append_offset, len(q.append_offset), q.max_offset
    out: list[int | None] = []
    k = 0
    for t in times:
        k = bisect.bisect_right(ts, t, k)
        out.append(None if k == 0 else first[k] if k < n else top)
    return out


def holding_append(q: QueueState | None, offset: int, at_ms: int) -> int | None:
    """Index of the append (at or before `at_ms`) that wrote the message at `offset`; None when
    no such message was written by then."""
    if q is None:
        return None
    k = bisect.bisect_right(q.append_ts, at_ms)
    i = bisect.bisect_right(q.append_offset, offset, 0, k) - 1
    if i < 0:
        return None
    end = q.append_offset[i + 1] if i + 1 < len(q.append_offset) else q.max_offset
    return i if offset < end else None


def lag_at(q: QueueState | None, committed: int, at_ms: int) -> tuple[int | None, int | None]:
    """(lag, lag_ms) of a committed offset at `at_ms`: messages behind MaxOffset, and how long
    the message at the committed offset has waited since its store time (0 at zero lag; both
    None while the queue's bounds are unknown)."""
    max_offset = max_offset_at(q, at_ms)
    if max_offset is None:
        return None, None
    lag = max(0, max_offset - committed)
    if lag == 0:
        return 0, 0
    i = holding_append(q, committed, at_ms)
    return lag, (None if i is None else at_ms - q.append_store_ts[i])  # type: ignore[union-attr]


def _moved_past_ts(q: QueueState | None, last: Raw, at_ms: int) -> int | None:
    """When the queue first held a message at or after the last entry's offset, no earlier than
    that entry: since then the consumer has had work waiting (None: not by `at_ms`)."""
    ts, offset = last
    i = holding_append(q, offset, at_ms)
    return None if i is None else max(ts, q.append_ts[i])  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- the document
def committed_at(led: Ledger, at_ms: int, group: str | None) -> tuple[list[tuple], int]:
    """The committed offsets at `at_ms` (rows of `snapshot_rows`) and the seq before which the
    log holds the events at or before it: from memory when nothing is later, else state_at."""
    if at_ms >= led.state.last_ts:
        return snapshot_rows(led.state, at_ms, group), led.log.next_seq
    table = led.state_at(ts=at_ms, group=group)
    rows = [tuple(r.values()) for r in table.to_pylist()]
    return rows, led._first_seq_after(at_ms)


def lag_document(led: Ledger, scope: LagScope, at_ms: int,
                 settings: HealthSettings) -> list[dict[str, Any]]:
    """One object per group with offsets in `scope` at `at_ms` (and the group named, even
    unknown: NOTFOUND), in name order; its queues in (topic, queue_id) order."""
    rows, seq_to = committed_at(led, at_ms, scope.group)
    keyed = [((g, t, q), committed) for g, t, q, committed, _ in rows if scope.covers((g, t, q))]
    windows = read_windows(led, [k for k, _ in keyed], seq_to, settings.window,
                           all_groups=scope.group is None)
    groups: dict[str, list[dict[str, Any]]] = {}
    if scope.group is not None:
        groups[scope.group] = []
    for key, committed in keyed:
        groups.setdefault(key[0], []).append(
            queue_document(led.state.queues.get((key[1], key[2])), key, committed,
                           windows[key], at_ms, settings))
    return [group_document(g, queues) for g, queues in sorted(groups.items())]


def queue_document(q: QueueState | None, key: Key, committed: int, raw: list[Raw], at_ms: int,
                   settings: HealthSettings) -> dict[str, Any]:
    lag, lag_ms = lag_at(q, committed, at_ms)
    entries = [Entry(ts, offset, None if top is None else top - offset if top > offset else 0)
               for (ts, offset), top in zip(raw, max_offsets_at(q, [ts for ts, _ in raw]),
                                            strict=True)]
    moved = _moved_past_ts(q, raw[-1], at_ms) if raw else None
    return {
        "topic": key[1], "queue_id": key[2],
        "status": queue_status(entries, lag, at_ms, settings, moved),
        "committed_offset": committed, "max_offset": max_offset_at(q, at_ms),
        "lag": lag, "lag_ms": lag_ms, "complete": len(entries) / settings.window,
        "window": [{"ts": e.ts, "offset": e.offset, "lag": e.lag} for e in entries],
    }


def group_document(group: str, queues: list[dict[str, Any]]) -> dict[str, Any]:
    """The group's status is its worst queue's; `complete` the share of full windows."""
    known = [q for q in queues if q["lag"] is not None]
    worst = max(known, key=lambda q: q["lag"]) if known else None
    full = sum(1 for q in queues if q["complete"] >= 1.0)
    return {
        "consumer_group": group, "status": group_status(q["status"] for q in queues),
        "complete": full / len(queues) if queues else 0.0,
        "total_lag": sum(q["lag"] for q in known), "max_lag": worst, "queues": queues,
    }


def series_document(con: Any, scope: LagScope, since_ms: int, until_ms: int,
                    every_ms: int) -> list[dict[str, Any]]:
    """Per queue with an offset in `scope` at some point: its lag and time lag at every point
    from `since_ms` to `until_ms` by `every_ms` where the group had an offset there (the SQL
    macro `lag_series`, ledger/lag_sql.py)."""
    from ledger.view import arrow_result

    cond, params = [], []
    for column, value in (("consumer_group", scope.group), ("topic", scope.topic)):
        if value is not None:
            cond.append(f"{column} = ?")
            params.append(value)
    if scope.queue_ids is not None:
        cond.append(f"queue_id IN ({', '.join(str(q) for q in sorted(scope.queue_ids))})")
    where = f"WHERE {' AND '.join(cond)}" if cond else ""
    rows = arrow_result(con.execute(
        f"SELECT * FROM lag_series({int(since_ms)}, {int(until_ms)}, {int(every_ms)}) {where}",
        params)).to_pylist()
    out: list[dict[str, Any]] = []
    for r in rows:  # ordered by group, topic, queue, ts
        key = (r.pop("consumer_group"), r.pop("topic"), r.pop("queue_id"))
        if not out or (out[-1]["consumer_group"], out[-1]["topic"], out[-1]["queue_id"]) != key:
            out.append({"consumer_group": key[0], "topic": key[1], "queue_id": key[2],
                        "series": []})
        out[-1]["series"].append(r)
    return out
