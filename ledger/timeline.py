"""Point-in-time questions answered in DuckDB over checkpoint + segments (DESIGN.md, Spark/replay).

The state at a point is the latest committed-setting event per key at or before it (events
carry their results), overlaid on the newest checkpoint at or before it, plus the broadcast
minimum over clients active within the group's client timeout. Spark's replay computes the
same query; `state.snapshot_rows` is the pure definition both are tested against.
"""

from __future__ import annotations

from pathlib import Path

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

EMPTY_CHECKPOINT = (
    "(SELECT NULL::VARCHAR AS \"row\", NULL::VARCHAR AS consumer_group, NULL::VARCHAR AS topic, "
    "NULL::INTEGER AS queue_id, NULL::VARCHAR AS client_id, NULL::BIGINT AS committed, "
    "NULL::INTEGER AS generation, NULL::BIGINT AS last_active_ts, NULL::VARCHAR AS detail "
    "WHERE false)"
)


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def state_at_sql(
    source: str, checkpoint: Path | None, seq_from: int, seq_to: int, at_ts: int,
    group: str | None = None,
) -> str:
    """The state-at query for events [seq_from, seq_to) over `checkpoint` (state at seq_from)."""
    cp = f"read_parquet({quote(str(checkpoint))})" if checkpoint is not None else EMPTY_CHECKPOINT
    group_filter = f"AND consumer_group = {quote(group)}" if group is not None else ""
    return STATE_AT_SQL.format(
        checkpoint=cp, source=source, seq_from=int(seq_from), seq_to=int(seq_to),
        at_ts=int(at_ts), group_filter=group_filter,
    )
