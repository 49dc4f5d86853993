"""Lag over time per consumer group, for the audit report.

Lag of a group at the end of a time bucket = sum over its queues of MaxOffset minus the committed
offset then (never below 0); a broadcast group counts its lowest client offset. Time is cut into
`LAG_BUCKETS` buckets between the first event (or `since`) and the last.

Computed with arrays rather than a grid of rows: per key, the last committed value in each bucket
is collected into a sorted list and filled forward into an array of `LAG_BUCKETS` values; per
queue the same for MaxOffset; the arrays are then combined element-wise. Rows are spread by queue
once, so the per-key and per-queue steps need no further shuffle. Several roots are keyed by
`shard` too (each shard has its own queues' bounds and seqs); a group lives on one shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spark_compaction.session import LogSnapshot
from spark_compaction.timeline import SETTING_KINDS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LAG_BUCKETS = 60

_FILL = "transform(sequence(0, {n} - 1), i -> try_element_at(filter(lst, x -> x.b <= i), -1).v)"

LAG_SQL = """
WITH setting AS (
    SELECT /*+ REPARTITION(topic, queue_id) */ shard, consumer_group, topic, queue_id, ckey,
           `offset` AS v, seq, ts
    FROM {keyed}
    WHERE kind IN {setting_kinds} OR kind IN ('cp_position', 'cp_client')
),
key_buckets AS (
    SELECT shard, consumer_group, topic, queue_id, ckey, {bucket} AS b, max_by(`v`, seq) AS v
    FROM setting GROUP BY shard, consumer_group, topic, queue_id, ckey, {bucket}
),
key_lists AS (
    SELECT shard, consumer_group, topic, queue_id, ckey,
           array_sort(collect_list(named_struct('b', b, 'v', v))) AS lst
    FROM key_buckets GROUP BY shard, consumer_group, topic, queue_id, ckey
),
key_filled AS (
    SELECT shard, consumer_group, topic, queue_id, {fill} AS committed FROM key_lists
),
group_queue AS (
    SELECT shard, consumer_group, topic, queue_id,
           transform(sequence(0, {n} - 1), i -> array_min(transform(lists, c -> c[i])))
             AS committed
    FROM (SELECT shard, consumer_group, topic, queue_id, collect_list(committed) AS lists
          FROM key_filled GROUP BY shard, consumer_group, topic, queue_id) l
),
queue_buckets AS (
    SELECT shard, topic, queue_id, {bucket} AS b, max_by(`offset`, seq) AS v
    FROM (SELECT shard, topic, queue_id, `offset`, seq, ts FROM {events}
          WHERE kind = 'queue_append'
          UNION ALL
          SELECT shard, topic, queue_id, max_offset, CAST(-1 AS BIGINT), CAST(NULL AS BIGINT)
          FROM {checkpoint} WHERE `row` = 'queue') q
    GROUP BY shard, topic, queue_id, {bucket}
),
queue_filled AS (
    SELECT shard, topic, queue_id, {fill} AS max_offset FROM (
        SELECT shard, topic, queue_id,
               array_sort(collect_list(named_struct('b', b, 'v', v))) AS lst
        FROM queue_buckets GROUP BY shard, topic, queue_id
    ) l
),
queue_lag AS (
    SELECT /*+ BROADCAST(m) */ g.consumer_group,
           transform(sequence(0, {n} - 1),
                     i -> CASE WHEN g.committed[i] IS NOT NULL AND m.max_offset[i] IS NOT NULL
                               THEN greatest(m.max_offset[i] - g.committed[i], 0) END) AS lag
    FROM group_queue g
    JOIN queue_filled m ON m.shard = g.shard AND m.topic = g.topic AND m.queue_id = g.queue_id
)
SELECT consumer_group,
       transform(sequence(0, {n} - 1),
                 i -> aggregate(lags, CAST(0 AS BIGINT), (acc, l) -> acc + coalesce(l[i], 0)))
         AS lag,
       transform(sequence(0, {n} - 1), i -> size(filter(lags, l -> l[i] IS NOT NULL))) AS queues
FROM (SELECT consumer_group, collect_list(lag) AS lags FROM queue_lag GROUP BY consumer_group) g
"""


def time_span(snaps: Sequence[LogSnapshot], since_ts: int | None) -> tuple[int, int] | None:
    """First and last ledger time of the logs (from the manifests and the tails), from
    `since`."""
    lows: list[int] = []
    highs: list[int] = []
    for snap in snaps:
        lows += [s.ts_min for s in snap.segments[:1]]
        highs += [s.ts_max for s in snap.segments[-1:]]
        if snap.tail.num_rows:
            lows.append(snap.tail.column("ts")[0].as_py())
            highs.append(snap.tail.column("ts")[-1].as_py())
    if not lows:
        return None
    t0 = max(min(lows), since_ts or 0)
    return t0, max(max(highs), t0)


def lag_series(
    spark: SparkSession, snaps: Sequence[LogSnapshot], keyed: str, events: str, checkpoint: str,
    since_ts: int | None = None,
) -> list[dict[str, Any]]:
    """Rows (consumer_group, bucket, ts at the bucket's end, lag, queues counted), over the temp
    views the audit prepared."""
    span = time_span(snaps, since_ts)
    if span is None:
        return []
    t0, t1 = span
    width = max(1, -(-(t1 - t0 + 1) // LAG_BUCKETS))
    bucket = f"least({LAG_BUCKETS - 1}, greatest(0, (coalesce(ts, {t0}) - {t0}) div {width}))"
    sql = LAG_SQL.format(keyed=keyed, events=events, checkpoint=checkpoint, bucket=bucket,
                         n=LAG_BUCKETS, fill=_FILL.format(n=LAG_BUCKETS),
                         setting_kinds=SETTING_KINDS)
    out = []
    for r in spark.sql(sql).toArrow().to_pylist():
        for i, (lag, queues) in enumerate(zip(r["lag"], r["queues"], strict=True)):
            if queues:
                out.append({"consumer_group": r["consumer_group"], "bucket": i,
                            "ts": t0 + (i + 1) * width - 1, "lag": lag, "queues": queues})
    return out
