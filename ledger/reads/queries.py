"""Reads over the view and the log: progress, groups, queues, history, Kafka's reset CSV, the
first offset stored at a time, and read-only SQL. Each validates its own arguments, so every
face (CLI, server) passes what users typed and gets one shape back.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ledger.errors import HistoryUnavailable, InvalidInput
from ledger.fold.events import KINDS
from ledger.fold.state import snapshot_rows
from ledger.limits import OFFSET_MAX, check_name, check_queue_id
from ledger.reads.sandbox import SqlQuery, prepare_read_only
from ledger.reads.state_at import earliest_history_ts
from ledger.store.view import arrow_result, events_select, segments_source
from ledger.store.writer import Writer
from ledger.timeparse import check_time_range, iso, parse_time

PROGRESS_COLUMNS = ("topic", "queue_id", "min_offset", "max_offset", "committed_offset",
                    "pulled_offset", "lag", "lag_ms", "inflight", "ready", "generation",
                    "last_update", "behind_retention", "last_client")


def _rows(writer: Writer, query: str, params: list | None = None) -> list[dict[str, Any]]:
    view = writer.ready_view()
    return arrow_result(view.con.execute(query, params or [])).to_pylist()


def progress(writer: Writer, group: str, topic: str | None = None) -> list[dict[str, Any]]:
    """Per queue of the group: bounds, committed and pulled offsets, lag, inflight, ready, and
    the client that last pulled or committed there (RocketMQ's consumerProgress shows it)."""
    check_name(group, "group")
    cond, params = "p.consumer_group = ?", [group]
    if topic is not None:
        cond += " AND p.topic = ?"
        params.append(check_name(topic, "topic"))
    return _rows(writer,
                 "SELECT p.topic, p.queue_id, min_offset, max_offset, p.committed_offset, "
                 "p.pulled_offset, lag, lag_ms, inflight, ready, p.generation, "
                 "p.last_update_ts AS last_update, behind_retention, o.last_client "
                 "FROM progress p LEFT JOIN offsets o USING (consumer_group, topic, queue_id) "
                 f"WHERE {cond} ORDER BY p.topic, p.queue_id", params)


def progress_all(writer: Writer) -> list[dict[str, Any]]:
    """Every key's progress (the metrics' gauges): group, queue, offsets, lag, time lag."""
    return _rows(writer,
                 "SELECT consumer_group, topic, queue_id, min_offset, max_offset, "
                 "committed_offset, lag, lag_ms FROM progress ORDER BY ALL")


def groups(writer: Writer) -> list[dict[str, Any]]:
    """Every group with its mode, queue count, total lag (null when no queue's bounds are
    known) and last update."""
    return _rows(writer,
                 "WITH names AS (SELECT consumer_group FROM groups UNION "
                 "SELECT consumer_group FROM progress) "
                 "SELECT n.consumer_group, coalesce(g.mode, 'clustering') AS mode, "
                 "count(p.queue_id)::BIGINT AS queues, sum(p.lag)::BIGINT AS lag, "
                 "max(p.last_update_ts) AS last_update "
                 "FROM names n LEFT JOIN groups g USING (consumer_group) "
                 "LEFT JOIN progress p USING (consumer_group) GROUP BY ALL ORDER BY 1")


def queues(writer: Writer, topic: str | None = None) -> list[dict[str, Any]]:
    cond, params = "", []
    if topic is not None:
        cond, params = "WHERE topic = ?", [check_name(topic, "topic")]
    return _rows(writer, f"SELECT topic, queue_id, min_offset, max_offset FROM queues {cond} "
                         "ORDER BY topic, queue_id", params)


def resolve_time(value: int | str | None, writer: Writer, what: str) -> int | None:
    """A user's time (epoch ms, ISO-8601, `now` = the ledger's clock) as epoch ms."""
    if value is None:
        return None
    try:
        return parse_time(value, writer.now_ms)
    except InvalidInput as e:
        raise InvalidInput(f"{what}: {e}") from None


def history(writer: Writer, *, group: str | None = None, topic: str | None = None,
            queue_id: int | None = None, kind: str | None = None,
            since: int | str | None = None, until: int | str | None = None,
            limit: int | None = None, queue_events: bool = True) -> pa.Table:
    """Matching events, oldest first; `limit` keeps the newest N; `queue_events` False leaves
    out the events of queues (appends, truncations: they name no group; a cluster holds them on
    every shard). Key filters and the upper time bound apply before prev_offset is derived
    (they keep every event's predecessor), the rest after."""
    if group is not None:
        check_name(group, "group")
    if topic is not None:
        check_name(topic, "topic")
    if queue_id is not None:
        check_queue_id(queue_id)
    if kind is not None and kind not in KINDS:
        raise InvalidInput(f"invalid kind {kind!r}: use one of {', '.join(KINDS)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or not 0 <= limit <= OFFSET_MAX):  # DuckDB's LIMIT is an int64
        raise InvalidInput(f"invalid limit {limit!r}: must be an integer from 0 to {OFFSET_MAX}")
    since_ms = resolve_time(since, writer, "since")
    until_ms = resolve_time(until, writer, "until")
    check_time_range(since_ms, until_ms)
    pre, pre_params, post, post_params = [], [], [], []
    for col, val in (("consumer_group", group), ("topic", topic), ("queue_id", queue_id)):
        if val is not None:
            pre.append(f"{col} = ?")
            pre_params.append(val)
    if not queue_events:
        pre.append("consumer_group IS NOT NULL")
    if until_ms is not None:
        pre.append("ts <= ?")
        pre_params.append(until_ms)
    if kind is not None:
        post.append("kind = ?")
        post_params.append(kind)
    if since_ms is not None:
        check_history_from(writer, since_ms)
        post.append("ts >= ?")
        post_params.append(since_ms)
    view = writer.ready_view()
    paths = [s.path for s in writer.log.segments() if until_ms is None or s.ts_min <= until_ms]
    select = events_select(segments_source(paths, "events_tail"),
                           ("WHERE " + " AND ".join(pre)) if pre else "")
    where = ("WHERE " + " AND ".join(post)) if post else ""
    inner = f"SELECT * FROM ({select}) {where} ORDER BY seq DESC"
    if limit is not None:
        inner += f" LIMIT {int(limit)}"
    return arrow_result(view.con.execute(f"SELECT * FROM ({inner}) ORDER BY seq",
                                         pre_params + post_params))


def check_history_from(writer: Writer, since_ms: int) -> None:
    """Refuse history before the retained log, naming the earliest `since` still answerable."""
    earliest = earliest_history_ts(writer.log)
    if earliest is not None and since_ms < earliest:
        raise HistoryUnavailable(
            f"history before {iso(earliest)} ({earliest} ms) was retired by log retention; "
            "that is the earliest time a history can start from")


def offsets_for_time(writer: Writer, topic: str, at: int | str) -> list[dict[str, Any]]:
    """Per queue of `topic`: the first message stored at or after `at` (None when none)."""
    check_name(topic, "topic")
    ts = resolve_time(at, writer, "datetime")
    return [{"topic": t, "queue_id": q, "offset": qs.offset_for_time(ts)}  # type: ignore[arg-type]
            for (t, q), qs in sorted(writer.state.queues.items()) if t == topic]


def export_rows(writer: Writer, group: str) -> list[dict[str, Any]]:
    """The group's current committed offsets, one row per queue (Kafka's reset CSV fields)."""
    check_name(group, "group")
    return [{"consumer_group": g, "topic": t, "queue_id": q, "offset": o}
            for g, t, q, o, _ in snapshot_rows(writer.state, writer.now_ms(), group)]


def export_csv(writer: Writer, group: str) -> str:
    """Kafka's reset CSV (topic,partition,offset) of the group's current committed offsets."""
    return "".join(f"{r['topic']},{r['queue_id']},{r['offset']}\n"
                   for r in export_rows(writer, group))


def sql(writer: Writer, query: str, timeout_s: float | None = None) -> pa.Table:
    """One read-only query over events, offsets, client_offsets, queues, groups, progress,
    pending_resets: run in a sandbox the engine itself keeps read-only, stopped after
    `timeout_s` seconds (QueryStopped)."""
    return prepare_sql(writer, query).run(timeout_s)


def prepare_sql(writer: Writer, query: str) -> SqlQuery:
    """The sandbox of `sql`, ready to run apart from `writer` (a server runs it outside its
    read lock, so other reads do not wait for it)."""
    view = writer.ready_view()
    log = writer.log
    start = log.start_seq
    cps = [c for c in log.checkpoints() if c <= start] if start > 0 else []
    return prepare_read_only(view, log.segment_paths(), log.tail(),
                             log.checkpoint_path(cps[-1]) if cps else None, query)
