"""Point-in-time questions answered in DuckDB over checkpoint + segments (DESIGN.md, Spark/replay).

The state at a point is the latest committed-setting event per key at or before it (events
carry their results), overlaid on the newest checkpoint at or before it, plus the broadcast
minimum over clients active within the group's client timeout. Spark's replay computes the
same query; `state.snapshot_rows` is the pure definition both are tested against.

`STATE_AT_SQL` is that query in full, for every group: the definition. `state_at_table` answers
the same rows with one scan of the range, because almost every group clusters throughout: a
group neither in broadcast mode at the checkpoint nor set to it by an event of the range has no
client keys (every event of it is read in a clustering mode), so its state is the newest
committed-setting row per key over the range's events and the checkpoint's positions, one hash
aggregate (SCAN_SQL). The same scan lists the rows the other, "maybe broadcast", groups need
folded one by one (config events of every group; events, positions and clients of the groups at
broadcast at the checkpoint); `broadcast_rows` folds them as STATE_AT_SQL does, CTE by CTE (or,
when they are many, STATE_AT_SQL itself runs over just them). Every part of STATE_AT_SQL is per
group, so answering groups apart changes no row. On 10M offset-workload events (T at 90%, 216k
events after the checkpoint, one broadcast group of 200) this is 2-2.5x faster than the full
query, whose CTEs materialized every event with every column for several consumers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ledger.store.view import arrow_result

STATE_AT_SQL = """
WITH
cp AS (SELECT * FROM {checkpoint}),
ev AS (
    SELECT seq, ts, kind, consumer_group, topic, queue_id, "offset", generation, client_id, detail
    FROM ({source}) src
    WHERE seq >= {seq_from} AND seq < {seq_to}
      AND kind NOT IN ('queue_append', 'queue_truncate', 'reset_refused')
),
cfg AS (
    SELECT consumer_group, detail, kind FROM (
        SELECT consumer_group, detail, kind, seq FROM ev
        WHERE kind = 'group_config' OR (kind = 'delete' AND topic IS NULL)
        UNION ALL
        SELECT consumer_group, detail, 'group_config' AS kind, -1 AS seq FROM cp WHERE "row" = 'group'
    )
    QUALIFY row_number() OVER (PARTITION BY consumer_group ORDER BY seq DESC) = 1
),
modes AS (
    SELECT consumer_group,
           json_extract_string(detail, '$.mode') AS mode,
           CAST(json_extract(detail, '$.client_timeout_ms') AS BIGINT) AS client_timeout_ms
    FROM cfg WHERE kind = 'group_config'
),
cp_modes AS (
    SELECT consumer_group, json_extract_string(detail, '$.mode') AS mode
    FROM cp WHERE "row" = 'group'
),
maybe_broadcast AS (
    -- groups in broadcast mode at the checkpoint or set to it in the range; every other group
    -- clusters throughout, and its events need no mode lookup (the bulk of them)
    SELECT consumer_group FROM cp_modes WHERE mode = 'broadcast'
    UNION SELECT consumer_group FROM ev
    WHERE kind = 'group_config' AND json_extract_string(detail, '$.mode') = 'broadcast'
),
ev_modes AS (
    -- each event is read in the mode its group had when it was appended, as the fold does
    SELECT e.*, last_value(
               CASE WHEN e.kind = 'group_config' THEN json_extract_string(e.detail, '$.mode')
                    WHEN e.kind = 'delete' AND e.topic IS NULL THEN 'clustering' END
               IGNORE NULLS) OVER (
               PARTITION BY e.consumer_group ORDER BY e.seq
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS mode_then
    FROM ev e WHERE e.consumer_group IN (SELECT consumer_group FROM maybe_broadcast)
),
pos_ev AS MATERIALIZED (
    SELECT e.* EXCLUDE (mode_then),
           CASE WHEN coalesce(e.mode_then, c.mode) = 'broadcast' AND e.client_id IS NOT NULL
                THEN e.client_id END AS ckey
    FROM ev_modes e LEFT JOIN cp_modes c USING (consumer_group)
    WHERE e.topic IS NOT NULL AND e.kind <> 'group_config'
    UNION ALL
    SELECT e.*, NULL::VARCHAR AS ckey FROM ev e
    WHERE e.topic IS NOT NULL AND e.kind <> 'group_config'
      AND e.consumer_group NOT IN (SELECT consumer_group FROM maybe_broadcast)
),
setting AS (
    SELECT consumer_group, topic, queue_id, ckey, "offset" AS committed, generation, seq
    FROM pos_ev WHERE kind IN ('initial', 'commit', 'reset', 'sync', 'clamp', 'expire', 'delete')
    UNION ALL
    SELECT consumer_group, topic, queue_id, client_id AS ckey, committed, generation, -1 AS seq
    FROM cp WHERE "row" IN ('position', 'client')
),
latest AS MATERIALIZED (
    -- the newest committed-setting row per key: a hash aggregate, no sort
    SELECT consumer_group, topic, queue_id, ckey,
           arg_max(struct_pack(committed := committed, generation := generation), seq) AS s, max(seq) AS seq
    FROM setting GROUP BY ALL
),
deletes AS (
    SELECT consumer_group, topic, queue_id, max(seq) AS delete_seq
    FROM pos_ev WHERE kind = 'delete' AND ckey IS NULL GROUP BY ALL
),
activity AS (
    SELECT consumer_group, topic, queue_id, ckey, max(ts) AS last_active_ts FROM (
        SELECT consumer_group, topic, queue_id, ckey, ts FROM pos_ev
        WHERE kind IN ('commit', 'pull', 'initial') AND ckey IS NOT NULL
        UNION ALL
        SELECT consumer_group, topic, queue_id, client_id, last_active_ts FROM cp
        WHERE "row" = 'client'
    ) GROUP BY ALL
),
clients AS (
    SELECT l.consumer_group, l.topic, l.queue_id, l.s.committed AS committed,
           l.s.generation AS generation, a.last_active_ts
    FROM latest l
    JOIN modes m USING (consumer_group)
    LEFT JOIN deletes d USING (consumer_group, topic, queue_id)
    LEFT JOIN activity a USING (consumer_group, topic, queue_id, ckey)
    WHERE l.ckey IS NOT NULL AND m.mode = 'broadcast'
      AND (d.delete_seq IS NULL OR l.seq > d.delete_seq)
),
broadcast AS (
    SELECT c.consumer_group, c.topic, c.queue_id,
           min(c.committed) FILTER (
               WHERE c.committed IS NOT NULL
                 AND {at_ts} - c.last_active_ts <= m.client_timeout_ms) AS live_committed,
           max(c.generation) AS generation
    FROM clients c JOIN modes m USING (consumer_group)
    GROUP BY ALL
),
base AS (
    SELECT consumer_group, topic, queue_id, s.committed AS committed, s.generation AS generation
    FROM latest WHERE ckey IS NULL
),
final AS (
    SELECT consumer_group, topic, queue_id,
           CASE WHEN m.mode = 'broadcast' THEN coalesce(b.live_committed, base.committed)
                ELSE base.committed END AS committed_offset,
           CAST(coalesce(base.generation, b.generation, 0) AS INTEGER) AS generation
    FROM base FULL OUTER JOIN broadcast b USING (consumer_group, topic, queue_id)
    LEFT JOIN modes m USING (consumer_group)
)
SELECT * FROM final
WHERE committed_offset IS NOT NULL {group_filter}
ORDER BY consumer_group, topic, queue_id
"""

SETTING_KINDS = ("initial", "commit", "reset", "sync", "clamp", "expire", "delete")
ACTIVITY_KINDS = ("commit", "pull", "initial")

# The one scan of the range. Per key, the newest committed-setting row (arg_max over the range's
# events and the checkpoint's positions: a group that clusters throughout needs nothing else),
# and, as a list, the rows STATE_AT_SQL folds one by one (columns of ROWS_SCHEMA but the keys):
# every group's config events (topic NULL: group_config, group delete), and all events and
# checkpoint positions and clients of the groups at broadcast at the checkpoint
# ({at_checkpoint}), the only ones whose pulls matter. Keys of config events carry no committed
# offset; keys of the maybe-broadcast groups are answered apart.
SCAN_SQL = """
SELECT consumer_group, topic, queue_id,
       arg_max_null(committed, seq) AS committed_offset,
       CAST(coalesce(arg_max_null(generation, seq), 0) AS INTEGER) AS generation,
       list(struct_pack(
           "row" := "row", seq := seq, ts := ts, kind := kind, "offset" := committed,
           generation := generation, client_id := client_id, last_active_ts := last_active_ts,
           detail := detail, mode := mode, client_timeout_ms := client_timeout_ms))
           FILTER (WHERE folded) AS folded_rows
FROM (
    SELECT 'event' AS "row", consumer_group, topic, queue_id, "offset" AS committed, generation,
           seq, ts, kind, client_id, NULL::BIGINT AS last_active_ts,
           CASE WHEN kind = 'group_config' THEN detail END AS detail,
           CASE WHEN kind = 'group_config' THEN json_extract_string(detail, '$.mode') END AS mode,
           CASE WHEN kind = 'group_config'
                THEN CAST(json_extract(detail, '$.client_timeout_ms') AS BIGINT) END
               AS client_timeout_ms,
           topic IS NULL OR {at_checkpoint} AS folded
    FROM ({source}) src
    WHERE seq >= {seq_from} AND seq < {seq_to} {group_cond}
      AND kind IN ('initial', 'commit', 'reset', 'sync', 'clamp', 'expire', 'delete',
                   'group_config', 'pull')
      AND (kind <> 'pull' OR {at_checkpoint})
    UNION ALL
    SELECT "row", consumer_group, topic, queue_id, committed, generation, -1, NULL, NULL,
           client_id, last_active_ts, NULL, NULL, NULL, {at_checkpoint}
    FROM {checkpoint}
    WHERE "row" IN ('position', 'client') AND (client_id IS NULL OR {at_checkpoint}) {group_cond}
)
GROUP BY consumer_group, topic, queue_id
ORDER BY consumer_group, topic, queue_id
"""

# The checkpoint's groups, read as STATE_AT_SQL reads them (columns of ROWS_SCHEMA).
CHECKPOINT_GROUPS_SQL = """
SELECT 'group' AS "row", -1 AS seq, NULL::BIGINT AS ts, NULL::VARCHAR AS kind, consumer_group,
       NULL::VARCHAR AS topic, NULL::INTEGER AS queue_id, NULL::BIGINT AS "offset",
       NULL::INTEGER AS generation, NULL::VARCHAR AS client_id, NULL::BIGINT AS last_active_ts,
       detail, json_extract_string(detail, '$.mode') AS mode,
       CAST(json_extract(detail, '$.client_timeout_ms') AS BIGINT) AS client_timeout_ms
FROM {checkpoint} WHERE "row" = 'group' {group_cond}
"""

# Groups set to broadcast only in the range (rare): the rest of their rows, the events the scan
# did not list and their checkpoint positions and clients.
LATE_ROWS_SQL = """
SELECT 'event' AS "row", seq, ts, kind, consumer_group, topic, queue_id, "offset", generation,
       client_id, NULL::BIGINT AS last_active_ts, NULL::VARCHAR AS detail, NULL::VARCHAR AS mode,
       NULL::BIGINT AS client_timeout_ms
FROM ({source}) src
WHERE seq >= {seq_from} AND seq < {seq_to} AND consumer_group IN ({groups})
  AND kind NOT IN ('queue_append', 'queue_truncate', 'reset_refused', 'group_config')
  AND NOT (kind = 'delete' AND topic IS NULL)
UNION ALL
SELECT "row", -1, NULL, NULL, consumer_group, topic, queue_id, committed, generation, client_id,
       last_active_ts, NULL, NULL, NULL
FROM {checkpoint}
WHERE "row" IN ('position', 'client') AND consumer_group IN ({groups})
"""

ROWS_SCHEMA = pa.schema([
    pa.field("row", pa.string()), pa.field("seq", pa.int64()), pa.field("ts", pa.int64()),
    pa.field("kind", pa.string()), pa.field("consumer_group", pa.string()),
    pa.field("topic", pa.string()), pa.field("queue_id", pa.int32()),
    pa.field("offset", pa.int64()), pa.field("generation", pa.int32()),
    pa.field("client_id", pa.string()), pa.field("last_active_ts", pa.int64()),
    pa.field("detail", pa.string()), pa.field("mode", pa.string()),
    pa.field("client_timeout_ms", pa.int64()),
])

EMPTY_CHECKPOINT = (
    "(SELECT NULL::VARCHAR AS \"row\", NULL::VARCHAR AS consumer_group, NULL::VARCHAR AS topic, "
    "NULL::INTEGER AS queue_id, NULL::VARCHAR AS client_id, NULL::BIGINT AS committed, "
    "NULL::INTEGER AS generation, NULL::BIGINT AS last_active_ts, NULL::VARCHAR AS detail "
    "WHERE false)"
)

STATE_AT_SCHEMA = pa.schema([
    pa.field("consumer_group", pa.string()),
    pa.field("topic", pa.string()),
    pa.field("queue_id", pa.int32()),
    pa.field("committed_offset", pa.int64()),
    pa.field("generation", pa.int32()),
])

# Up to this many listed rows the maybe-broadcast groups are folded in Python (~3 us a row),
# above it by STATE_AT_SQL over those rows (~35 ms of planning and pipelines even for a few).
BROADCAST_PYTHON_ROWS_MAX = 10_000

STATE_AT_TAIL = "_state_at_tail"  # the active segment, registered for one state_at query
STATE_AT_CHECKPOINT = "_state_at_checkpoint"  # the checkpoint's key rows, for one query
KEYED_EVENTS = "_state_at_keyed_events"  # some groups' events of a range, found by the index
_ROWS_NAME = "_state_at_broadcast_rows"

Row = tuple[str, str, int, int, int]


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _in_list(names: Sequence[str]) -> str:
    return ", ".join(quote(n) for n in names)


def _checkpoint_source(checkpoint: Path | str | None) -> str:
    """The checkpoint as a relation: its Parquet file (a Path), a registered relation holding
    its rows (a name), or the empty start (None)."""
    if checkpoint is None:
        return EMPTY_CHECKPOINT
    if isinstance(checkpoint, str):
        return checkpoint
    return f"read_parquet({quote(str(checkpoint))})"


def state_at_sql(
    source: str, checkpoint: Path | str | None, seq_from: int, seq_to: int, at_ts: int,
    group: str | None = None,
) -> str:
    """The full state-at query for events [seq_from, seq_to) over `checkpoint` (state at
    seq_from): the definition `state_at_table` answers in fewer steps."""
    group_filter = f"AND consumer_group = {quote(group)}" if group is not None else ""
    return STATE_AT_SQL.format(
        checkpoint=_checkpoint_source(checkpoint), source=source, seq_from=int(seq_from),
        seq_to=int(seq_to), at_ts=int(at_ts), group_filter=group_filter,
    )


def _fetch(con: Any, sql: str) -> pa.Table:
    return arrow_result(con.execute(sql))


def state_at_table(
    con: Any, source: str, checkpoint: Path | str | None, seq_from: int, seq_to: int, at_ts: int,
    group: str | None = None,
) -> pa.Table:
    """The rows of `state_at_sql(...)` (same schema, same order) from the checkpoint's groups
    (CHECKPOINT_GROUPS_SQL) and one scan of the range (SCAN_SQL), the maybe-broadcast groups'
    rows folded apart (`broadcast_rows`)."""
    seq_from, seq_to, at_ts = int(seq_from), int(seq_to), int(at_ts)
    cp = _checkpoint_source(checkpoint)
    group_cond = f"AND consumer_group = {quote(group)}" if group is not None else ""
    cp_rows = _fetch(con, CHECKPOINT_GROUPS_SQL.format(checkpoint=cp, group_cond=group_cond))
    at_cp = _broadcast_groups(cp_rows)
    scanned = _fetch(con, SCAN_SQL.format(
        source=source, seq_from=seq_from, seq_to=seq_to, checkpoint=cp, group_cond=group_cond,
        at_checkpoint=f"consumer_group IN ({_in_list(sorted(at_cp))})" if at_cp else "false"))
    listed = _listed_rows(scanned)
    set_in_range = _broadcast_groups(listed)
    broadcast = pa.array(sorted(at_cp | set_in_range), pa.string())
    keep = pc.is_valid(scanned.column("committed_offset"))
    if len(broadcast):
        keep = pc.and_(keep, pc.invert(pc.is_in(scanned.column("consumer_group"),
                                                value_set=broadcast)))
    clustering = scanned.select(STATE_AT_SCHEMA.names).filter(keep).cast(STATE_AT_SCHEMA)
    if not len(broadcast):
        return clustering
    parts = [listed, cp_rows]
    late = sorted(set_in_range - at_cp)
    if late:
        parts.append(_fetch(con, LATE_ROWS_SQL.format(
            source=source, seq_from=seq_from, seq_to=seq_to, checkpoint=cp,
            groups=_in_list(late))))
    rows = pa.concat_tables([t.cast(ROWS_SCHEMA) for t in parts])
    rows = rows.filter(pc.is_in(rows.column("consumer_group"), value_set=broadcast))
    rows = rows.sort_by("seq")  # the checkpoint's rows (seq -1) first
    if rows.num_rows <= BROADCAST_PYTHON_ROWS_MAX:
        folded = _result_table(broadcast_rows(rows, at_ts))
    else:
        folded = _broadcast_by_sql(con, rows, seq_from, seq_to, at_ts)
    return _merge_groups(clustering, folded)


def _merge_groups(ordered: pa.Table, more: pa.Table) -> pa.Table:
    """`ordered` (in key order) with the rows of `more` (other groups) put in place: keys order
    by the names' bytes, as DuckDB orders them and Arrow and Python compare them."""
    if more.num_rows == 0:
        return ordered
    more = more.sort_by(
        [("consumer_group", "ascending"), ("topic", "ascending"), ("queue_id", "ascending")])
    names = ordered.column("consumer_group")
    groups = more.column("consumer_group").to_pylist()
    pieces, start, i = [], 0, 0
    while i < len(groups):  # one group of `more` at a time, before the first greater name
        end = i
        while end < len(groups) and groups[end] == groups[i]:
            end += 1
        at = pc.sum(pc.less(names, groups[i])).as_py() or 0
        pieces += [ordered.slice(start, at - start), more.slice(i, end - i)]
        start, i = at, end
    pieces.append(ordered.slice(start))
    return pa.concat_tables(pieces)


def _broadcast_groups(rows: pa.Table) -> set[str]:
    """Groups of checkpoint group rows or group_config events whose mode reads broadcast."""
    mask = pc.fill_null(pc.equal(rows.column("mode"), "broadcast"), False)
    return set(rows.column("consumer_group").filter(mask).to_pylist())


def _listed_rows(scanned: pa.Table) -> pa.Table:
    """The rows SCAN_SQL listed, one each (ROWS_SCHEMA), keys from their list's row."""
    lists = scanned.column("folded_rows").combine_chunks()
    parents = pc.list_parent_indices(lists)
    values = pc.list_flatten(lists)
    columns: dict[str, Any] = {name: values.field(name) for name in ROWS_SCHEMA.names
                               if name not in ("consumer_group", "topic", "queue_id")}
    for name in ("consumer_group", "topic", "queue_id"):
        columns[name] = scanned.column(name).take(parents)
    return pa.Table.from_arrays(
        [columns[f.name].cast(f.type) for f in ROWS_SCHEMA], schema=ROWS_SCHEMA)


def _result_table(rows: list[Row]) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(STATE_AT_SCHEMA)
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, STATE_AT_SCHEMA, strict=True)],
        schema=STATE_AT_SCHEMA)


def _broadcast_by_sql(
    con: Any, rows: pa.Table, seq_from: int, seq_to: int, at_ts: int,
) -> pa.Table:
    """STATE_AT_SQL over the fetched rows of the maybe-broadcast groups."""
    con.register(_ROWS_NAME, rows)
    try:
        table = _fetch(con, STATE_AT_SQL.format(
            checkpoint=f'(SELECT "row", consumer_group, topic, queue_id, client_id, '
                       f'"offset" AS committed, generation, last_active_ts, detail '
                       f"FROM {_ROWS_NAME} WHERE \"row\" <> 'event')",
            source=f'SELECT seq, ts, kind, consumer_group, topic, queue_id, "offset", '
                   f"generation, client_id, detail FROM {_ROWS_NAME} WHERE \"row\" = 'event'",
            seq_from=seq_from, seq_to=seq_to, at_ts=at_ts, group_filter=""))
    finally:
        con.unregister(_ROWS_NAME)
    return table.cast(STATE_AT_SCHEMA)


def broadcast_rows(rows: pa.Table, at_ts: int) -> list[Row]:
    """STATE_AT_SQL, CTE by CTE, over some groups' rows (ROWS_SCHEMA) in seq order (the
    checkpoint's first). Unsorted result rows."""
    cp_mode: dict[str, str | None] = {}
    # cfg: the newest group_config or group delete per group (the checkpoint's row at seq -1)
    cfg: dict[str, tuple[str, str | None, int | None]] = {}
    # setting / latest: the newest committed-setting row per (group, topic, queue, client key)
    latest: dict[tuple, tuple[int, int | None, int | None]] = {}
    activity: dict[tuple, int] = {}
    deletes: dict[tuple, int] = {}
    mode_then: dict[str, str] = {}  # ev_modes: the mode set by the newest config event so far
    c = rows.to_pydict()
    for row, seq, ts, kind, g, t, q, offset, generation, client, active, mode, timeout in zip(
        c["row"], c["seq"], c["ts"], c["kind"], c["consumer_group"], c["topic"], c["queue_id"],
        c["offset"], c["generation"], c["client_id"], c["last_active_ts"], c["mode"],
        c["client_timeout_ms"], strict=True,
    ):
        if row != "event":  # the checkpoint
            if row == "group":
                cp_mode.setdefault(g, mode)
                cfg.setdefault(g, ("group_config", mode, timeout))
                continue
            key = (g, t, q, client)
            latest.setdefault(key, (-1, offset, generation))
            if row == "client" and active is not None:
                activity[key] = max(activity.get(key, active), active)
            continue
        if kind == "group_config":
            cfg[g] = (kind, mode, timeout)
            if mode is not None:
                mode_then[g] = mode
            continue
        if kind == "delete" and t is None:
            cfg[g] = (kind, None, None)
            mode_then[g] = "clustering"
            continue
        if t is None:
            continue
        now = mode_then.get(g)
        if now is None:
            now = cp_mode.get(g)
        ckey = client if now == "broadcast" and client is not None else None
        key = (g, t, q, ckey)
        if kind in SETTING_KINDS:
            prev = latest.get(key)
            if prev is None or seq > prev[0]:
                latest[key] = (seq, offset, generation)
            if kind == "delete" and ckey is None:
                k3 = (g, t, q)
                deletes[k3] = max(deletes.get(k3, seq), seq)
        if ckey is not None and kind in ACTIVITY_KINDS:
            activity[key] = max(activity.get(key, ts), ts)
    modes = {g: (m, timeout) for g, (kind, m, timeout) in cfg.items() if kind == "group_config"}
    clients: dict[tuple, list[tuple[int | None, int | None, int | None]]] = {}
    for key, (seq, committed, generation) in latest.items():
        g, t, q, ckey = key
        m = modes.get(g)
        if ckey is None or m is None or m[0] != "broadcast":
            continue
        deleted = deletes.get((g, t, q))
        if deleted is not None and seq <= deleted:
            continue
        clients.setdefault((g, t, q), []).append((committed, generation, activity.get(key)))
    out: list[Row] = []
    for k3 in {k[:3] for k in latest if k[3] is None} | set(clients):
        base = latest.get((*k3, None))
        m = modes.get(k3[0])
        live = b_generation = None
        if k3 in clients:
            timeout = m[1] if m is not None else None
            alive = [cm for cm, _, active in clients[k3]
                     if cm is not None and active is not None and timeout is not None
                     and at_ts - active <= timeout]
            live = min(alive) if alive else None
            gens = [gen for _, gen, _ in clients[k3] if gen is not None]
            b_generation = max(gens) if gens else None
        committed = base[1] if base is not None else None
        if m is not None and m[0] == "broadcast" and live is not None:
            committed = live
        if committed is None:
            continue
        generation = base[2] if base is not None and base[2] is not None else b_generation
        out.append((k3[0], k3[1], k3[2], committed, generation if generation is not None else 0))
    return out
