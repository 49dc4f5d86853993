"""The lag series in SQL: `SELECT * FROM lag_series(since_ms, until_ms, every_ms)` (optionally
`only_group := 'G'`) in the view's DuckDB connection (`offset-ledger sql`, `Ledger.sql`), and
what `lag --since --until --every` prints (`Ledger.lag_series`), one row per group, queue and
point in time.

At each point t: the group's committed offset as `state_at(ts=t)` gives it (the newest event
setting it at or before t, over the checkpoint the events start at; for a broadcast group the
minimum over clients seen within its client timeout at t), MaxOffset where the appends up to t
ended, lag, and the time lag: t minus the store time of the append holding the committed offset
(0 at zero lag, null where the bounds are unknown). As a grid rather than a point: every
"newest at or before t" is an ASOF join of the points with events pre-aggregated per ts.

The SQL macro reads the whole log over the checkpoint at its start (an analyst's question);
`Ledger.lag_series` instantiates the same text over the checkpoint at or before `since` and the
log from there (`install_lag_series(..., name=...)`). `Ledger.lag` answers a point without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledger.reads.timeline import EMPTY_CHECKPOINT, quote

LAG_SERIES_MACRO = """
CREATE OR REPLACE TEMP MACRO {name}(since_ms, until_ms, every_ms, only_group := NULL) AS TABLE
WITH
points AS (SELECT unnest(range(since_ms::BIGINT, until_ms::BIGINT + 1, every_ms::BIGINT)) AS t),
ev AS (
    SELECT seq, ts, kind, consumer_group, topic, queue_id, "offset", client_id, detail
    FROM {events}
    WHERE ts <= until_ms::BIGINT AND consumer_group IS NOT NULL AND kind <> 'reset_refused'
      AND (only_group IS NULL OR consumer_group = only_group)
),
cp AS (
    SELECT * FROM {checkpoint} WHERE only_group IS NULL OR consumer_group = only_group
),
-- a group's settings over time (a group delete restores the defaults); the log start's first
cfg AS (
    SELECT consumer_group, seq, ts,
           CASE WHEN kind = 'group_config' THEN json_extract_string(detail, '$.mode')
                ELSE 'clustering' END AS mode,
           CASE WHEN kind = 'group_config'
                THEN CAST(json_extract(detail, '$.client_timeout_ms') AS BIGINT)
                ELSE 120000 END AS timeout_ms
    FROM ev WHERE topic IS NULL
    UNION ALL
    SELECT consumer_group, -1, -1, json_extract_string(detail, '$.mode'),
           CAST(json_extract(detail, '$.client_timeout_ms') AS BIGINT)
    FROM cp WHERE "row" = 'group'
),
-- each key event in the mode its group had when it was appended: a client's event of a group
-- in broadcast mode moves that client's offset (ckey), any other the group's own ('')
kev AS (
    SELECT e.*, CASE WHEN c.mode = 'broadcast' AND e.client_id IS NOT NULL
                     THEN e.client_id ELSE '' END AS ckey
    FROM (SELECT * FROM ev WHERE topic IS NOT NULL) e
    ASOF LEFT JOIN cfg c ON c.consumer_group = e.consumer_group AND c.seq < e.seq
),
setting AS (
    SELECT consumer_group, topic, queue_id, ckey, ts, arg_max_null("offset", seq) AS committed,
           max(seq) AS seq
    FROM kev WHERE kind IN ('initial', 'commit', 'reset', 'sync', 'clamp', 'expire', 'delete')
    GROUP BY ALL
    UNION ALL
    SELECT consumer_group, topic, queue_id, coalesce(client_id, ''), -1, committed, -1
    FROM cp WHERE "row" IN ('position', 'client')
),
activity AS (
    SELECT DISTINCT consumer_group, topic, queue_id, ckey, ts FROM kev
    WHERE kind IN ('commit', 'pull', 'initial') AND ckey <> ''
    UNION
    SELECT consumer_group, topic, queue_id, client_id, last_active_ts
    FROM cp WHERE "row" = 'client'
),
deletes AS (
    SELECT consumer_group, topic, queue_id, ts, max(seq) AS seq
    FROM kev WHERE kind = 'delete' AND ckey = '' GROUP BY ALL
),
cfg_at AS (
    SELECT consumer_group, ts, arg_max(mode, seq) AS mode, arg_max(timeout_ms, seq) AS timeout_ms
    FROM cfg GROUP BY ALL
),
keys AS (SELECT DISTINCT consumer_group, topic, queue_id, ckey FROM setting),
at_t AS (
    SELECT p.t, k.consumer_group, k.topic, k.queue_id, k.ckey, s.committed, s.seq
    FROM points p CROSS JOIN keys k
    ASOF JOIN setting s
        ON s.consumer_group = k.consumer_group AND s.topic = k.topic
       AND s.queue_id = k.queue_id AND s.ckey = k.ckey AND s.ts <= p.t
),
mode_at AS (
    SELECT p.t, g.consumer_group, c.mode, c.timeout_ms
    FROM points p CROSS JOIN (SELECT DISTINCT consumer_group FROM cfg_at) g
    ASOF JOIN cfg_at c ON c.consumer_group = g.consumer_group AND c.ts <= p.t
),
client_at AS (
    -- a client's offset at t: not one from before a delete of the key, its last activity then
    SELECT a.t, a.consumer_group, a.topic, a.queue_id, a.committed, act.ts AS last_active
    FROM (SELECT * FROM at_t WHERE ckey <> '') a
    ASOF LEFT JOIN deletes d
        ON d.consumer_group = a.consumer_group AND d.topic = a.topic
       AND d.queue_id = a.queue_id AND d.ts <= a.t
    ASOF LEFT JOIN activity act
        ON act.consumer_group = a.consumer_group AND act.topic = a.topic
       AND act.queue_id = a.queue_id AND act.ckey = a.ckey AND act.ts <= a.t
    WHERE d.seq IS NULL OR a.seq > d.seq
),
live AS (
    SELECT c.t, c.consumer_group, c.topic, c.queue_id, min(c.committed) AS committed
    FROM client_at c JOIN mode_at m USING (t, consumer_group)
    WHERE m.mode = 'broadcast' AND c.committed IS NOT NULL
      AND c.t - c.last_active <= m.timeout_ms
    GROUP BY ALL
),
offsets AS (
    SELECT t, consumer_group, topic, queue_id,
           CASE WHEN l.committed IS NOT NULL THEN l.committed ELSE o.committed END AS committed
    FROM (SELECT * FROM at_t WHERE ckey = '') o
    FULL OUTER JOIN live l USING (t, consumer_group, topic, queue_id)
),
bounds AS (
    SELECT a.topic, a.queue_id, a.first_offset, a.ts, a.store_ts,
           coalesce(lead(a.first_offset) OVER (PARTITION BY a.topic, a.queue_id
                                               ORDER BY a.first_offset), q.max_offset)
               AS end_offset
    FROM appends a JOIN queues q USING (topic, queue_id)
),
bounds_at AS (
    SELECT topic, queue_id, ts, max(end_offset) AS max_offset FROM bounds GROUP BY ALL
),
lagged AS (
    SELECT o.t, o.consumer_group, o.topic, o.queue_id, o.committed, b.max_offset,
           CASE WHEN b.max_offset IS NOT NULL THEN greatest(b.max_offset - o.committed, 0) END
               AS lag
    FROM (SELECT * FROM offsets WHERE committed IS NOT NULL) o
    ASOF LEFT JOIN bounds_at b
        ON b.topic = o.topic AND b.queue_id = o.queue_id AND b.ts <= o.t
)
SELECT l.consumer_group, l.topic, l.queue_id, l.t AS ts, l.committed AS committed_offset,
       l.max_offset, l.lag,
       CASE WHEN l.lag = 0 THEN 0 WHEN l.lag > 0 THEN l.t - h.store_ts END AS lag_ms
FROM lagged l
ASOF LEFT JOIN bounds h
    ON h.topic = l.topic AND h.queue_id = l.queue_id AND h.first_offset <= l.committed
ORDER BY l.consumer_group, l.topic, l.queue_id, l.t
"""


def checkpoint_source(checkpoint: Path | None) -> str:
    """A SELECT of a checkpoint file's rows (None: the empty state at seq 0)."""
    return (f"SELECT * FROM read_parquet({quote(str(checkpoint))})"
            if checkpoint is not None else f"SELECT * FROM {EMPTY_CHECKPOINT}")


def install_lag_series(con: Any, checkpoint: str, events: str = "events_raw",
                       name: str = "lag_series") -> None:
    """(Re)create the macro `name` on a connection over the relation `events` (which must
    exist: a macro binds its names when created) and `checkpoint`, a SELECT of the state where
    those events start (`checkpoint_source`, or a relation registered there)."""
    con.execute(f"CREATE OR REPLACE VIEW {name}_checkpoint AS {checkpoint}")
    con.execute(LAG_SERIES_MACRO.format(name=name, events=events, checkpoint=f"{name}_checkpoint"))
