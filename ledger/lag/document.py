"""Lag, time lag and lag health of consumer groups at any ledger time T (DESIGN.md, "Lag health
and time lag"): the document of `offset-ledger lag --json`, `Ledger.lag`, and the server's
`/v1/groups/{group}/lag`, all one list of group objects.

Exact, never interpolated: the committed offsets at T come from the state (now) or from
`Ledger.state_at` (checkpoint + log); MaxOffset at any time and the store time of the message at
any offset come from the appends every queue keeps (`QueueState.append_*`, carried by
checkpoints; `ledger.lag.appends`); windows are read from the log by `ledger.lag.windows`; the
judgement is `ledger.lag.health`, a pure function.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

import numpy as np

from ledger.commands.command import parse_topic_spec
from ledger.errors import InvalidInput
from ledger.fold.state import Key, snapshot_rows
from ledger.lag.appends import QueueAppends
from ledger.lag.health import HealthSettings, group_status, queue_status
from ledger.lag.windows import Window, read_windows
from ledger.limits import (
    LAG_SERIES_POINTS_MAX,
    LAG_WINDOW_MAX,
    OFFSET_MAX,
    TS_MAX,
    check_int,
    check_name,
)
from ledger.reads.state_at import first_seq_after, state_at
from ledger.store.writer import Writer
from ledger.timeparse import check_time_range


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
    """A checked scope; `topic` is `T` or `T:0,2` (queues 0 and 2 of T), as reset's --topic."""
    if group is not None:
        check_name(group, "group")
    if topic is None:
        return LagScope(group)
    name, queue_ids = parse_topic_spec(topic)
    return LagScope(group, name, None if queue_ids is None else frozenset(queue_ids))


def health_settings(window: int, allowed_lag: int) -> HealthSettings:
    """Checked settings: a window of 1 to LAG_WINDOW_MAX entries, a lag allowed from 0."""
    return HealthSettings(check_int(window, "window", 1, LAG_WINDOW_MAX),
                          check_int(allowed_lag, "allowed lag", 0, OFFSET_MAX))


def check_at(at_ms: int | None) -> int | None:
    """A checked ledger time (None: now)."""
    return None if at_ms is None else check_int(at_ms, "time", 0, TS_MAX)


def check_series(since_ms: int, until_ms: int, every_ms: int) -> tuple[int, int, int]:
    """Checked bounds of a series: since <= until, a step of at least 1 ms, a bounded count."""
    check_int(since_ms, "since", 0, TS_MAX)
    check_int(until_ms, "until", 0, TS_MAX)
    check_int(every_ms, "every", 1, TS_MAX)
    check_time_range(since_ms, until_ms)
    points = (until_ms - since_ms) // every_ms + 1
    if points > LAG_SERIES_POINTS_MAX:
        raise InvalidInput(f"a series of {points} points is too long (at most "
                           f"{LAG_SERIES_POINTS_MAX}): use a longer step or a shorter span")
    return since_ms, until_ms, every_ms


# ----------------------------------------------------------------------------- the document
def committed_at(writer: Writer, at_ms: int, group: str | None) -> tuple[list[tuple], int]:
    """The committed offsets at `at_ms` (rows of `snapshot_rows`) and the seq before which the
    log holds the events at or before it: from memory when nothing is later, else state_at."""
    if at_ms >= writer.state.last_ts:
        return snapshot_rows(writer.state, at_ms, group), writer.log.next_seq
    table = state_at(writer, ts=at_ms, group=group)
    rows = [tuple(r.values()) for r in table.to_pylist()]
    return rows, first_seq_after(writer.log, at_ms)


def lag_document(writer: Writer, scope: LagScope, at_ms: int,
                 settings: HealthSettings) -> list[dict[str, Any]]:
    """One object per group with offsets in `scope` at `at_ms` (and the group named, even
    unknown: NOTFOUND), in name order; its queues in (topic, queue_id) order. No cyclic garbage
    collection meanwhile: the document of every group is some 200k small objects, and each
    collection would walk the whole state too (a fifth of the time on the 10M bench ledger)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _lag_document(writer, scope, at_ms, settings)
    finally:
        if enabled:
            gc.enable()


def _lag_document(writer: Writer, scope: LagScope, at_ms: int,
                  settings: HealthSettings) -> list[dict[str, Any]]:
    rows, seq_to = committed_at(writer, at_ms, scope.group)
    keyed = [((g, t, q), committed) for g, t, q, committed, _ in rows if scope.covers((g, t, q))]
    windows = read_windows(writer, [k for k, _ in keyed], seq_to, settings.window,
                           all_groups=scope.group is None)
    by_queue: dict[tuple[str, int], list[tuple[Key, int]]] = {}
    for key, committed in keyed:
        by_queue.setdefault((key[1], key[2]), []).append((key, committed))
    docs: dict[Key, dict[str, Any]] = {}
    for queue, members in by_queue.items():
        appends = QueueAppends(writer.state.queues.get(queue), at_ms)
        docs.update(queue_documents(appends, members, windows, settings))
    groups: dict[str, list[dict[str, Any]]] = {}
    if scope.group is not None:
        groups[scope.group] = []
    for key, _ in keyed:  # in key order
        groups.setdefault(key[0], []).append(docs[key])
    return [group_document(g, queues) for g, queues in sorted(groups.items())]


def queue_documents(appends: QueueAppends, members: list[tuple[Key, int]],
                    windows: dict[Key, Window], settings: HealthSettings,
                    ) -> dict[Key, dict[str, Any]]:
    """The queue objects of the keys of one queue (`members`: key and committed offset)."""
    at_ms = appends.at_ms
    lags, lags_ms = appends.time_lags(np.array([c for _, c in members], np.int64))
    times = [ts for key, _ in members for ts in windows[key][0]]
    offsets = [o for key, _ in members for o in windows[key][1]]
    tops = appends.max_offsets(np.array(times, np.int64))
    behind = np.maximum(tops - np.array(offsets, np.int64), 0)
    # each entry's lag: MaxOffset at its ts minus its offset (None before any append)
    lags_then = behind.tolist() if (tops >= 0).all() else [
        None if top < 0 else b for top, b in zip(tops.tolist(), behind.tolist(), strict=True)]
    last = [key for key, _ in members if windows[key][0]]
    moved = dict(zip(last, appends.moved_past(
        np.array([windows[k][0][-1] for k in last], np.int64),
        np.array([windows[k][1][-1] for k in last], np.int64)), strict=True))
    top_now = appends.max_offset
    out = {}
    i = 0
    for (key, committed), lag, lag_ms in zip(members, lags, lags_ms, strict=True):
        n = len(windows[key][0])
        entries = list(zip(times[i:i + n], offsets[i:i + n], lags_then[i:i + n], strict=True))
        i += n
        out[key] = {
            "topic": key[1], "queue_id": key[2],
            "status": queue_status(entries, lag, at_ms, settings, moved.get(key)),
            "committed_offset": committed, "max_offset": top_now,
            "lag": lag, "lag_ms": lag_ms, "complete": n / settings.window,
            "window": [{"ts": ts, "offset": offset, "lag": e_lag}
                       for ts, offset, e_lag in entries],
        }
    return out


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


def series_document(writer: Writer, scope: LagScope, since_ms: int, until_ms: int,
                    every_ms: int) -> list[dict[str, Any]]:
    """Per queue with an offset in `scope` at some point: its lag and time lag at every point
    from `since_ms` to `until_ms` by `every_ms` where the group had an offset there: the SQL
    macro (ledger/reads/lag_series.py) over the checkpoint at or before `since_ms` and the log after it."""
    from ledger.reads.lag_series import checkpoint_source, install_lag_series
    from ledger.store.view import arrow_result, segments_source

    con = writer.ready_view().con  # events_tail registered, the log's seal listed
    start = first_seq_after(writer.log, since_ms)
    cps = [c for c in writer.log.checkpoints() if c <= start]
    seq_from = cps[-1] if cps else writer.log.start_seq
    paths = [s.path for s in writer.log.segments() if s.end_seq > seq_from]
    con.execute("CREATE OR REPLACE TEMP VIEW lag_series_from_events AS SELECT * FROM ("
                f"{segments_source(paths, 'events_tail')}) WHERE seq >= {int(seq_from)}")
    install_lag_series(con, checkpoint_source(writer.log.checkpoint_path(seq_from) if cps
                                              else None),
                       events="lag_series_from_events", name="lag_series_from")
    cond, params = [], []
    for column, value in (("consumer_group", scope.group), ("topic", scope.topic)):
        if value is not None:
            cond.append(f"{column} = ?")
            params.append(value)
    if scope.queue_ids is not None:
        cond.append(f"queue_id IN ({', '.join(str(q) for q in sorted(scope.queue_ids))})")
    where = f"WHERE {' AND '.join(cond)}" if cond else ""
    only = "" if scope.group is None else ", only_group := ?"
    rows = arrow_result(con.execute(
        f"SELECT * FROM lag_series_from({int(since_ms)}, {int(until_ms)}, {int(every_ms)}{only}) "
        f"{where}", ([scope.group] if scope.group is not None else []) + params)).to_pylist()
    out: list[dict[str, Any]] = []
    for r in rows:  # ordered by group, topic, queue, ts
        key = (r.pop("consumer_group"), r.pop("topic"), r.pop("queue_id"))
        if not out or (out[-1]["consumer_group"], out[-1]["topic"], out[-1]["queue_id"]) != key:
            out.append({"consumer_group": key[0], "topic": key[1], "queue_id": key[2],
                        "series": []})
        out[-1]["series"].append(r)
    return out
