"""Point-in-time replay in Spark: the state at a seq or a ledger time from checkpoint + log.

A port of `ledger.reads.timeline.STATE_AT_SQL` (DuckDB) to Spark SQL, answering the same: the latest
committed-setting event per key at or before the point (events carry their results), overlaid on
the newest checkpoint at or before it, plus the broadcast minimum over clients active within the
group's client timeout. The point is resolved exactly as `Ledger.state_at` resolves it (first seq
after a time, the ts before a seq, the checkpoint to start from).

The query is shaped for Spark rather than copied clause by clause: written like the DuckDB one
(a window or a join per CTE) Spark ran ~21 jobs per replay, seconds of scheduling on a small
ledger. Here one window spreads the rows by group and two aggregates do the rest: `cfg`/`modes`
are a max_by per group; `ev_modes`/`pos_ev` are KEYED_SQL (the window: each event read in the
mode its group had then); `setting`, `latest`, `activity` and `deletes` are one aggregate per
(group, topic, queue, client key); `clients`, `broadcast`, `base`, `keys` and the final select
are one aggregate per (group, topic, queue) whose broadcast clients are a list filtered and
folded with higher-order functions. The tests compare it with the DuckDB query on random
ledgers.

Several roots replay as one dataset (one read, rows tagged with their `shard`): every step keys by
shard too, and each shard has its own bounds (seqs are per root) and its own liveness time, so
the answer is the union of the shards' answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import InvalidInput
from ledger.reads.state_at import resolve_point as ledger_point
from ledger.reads.state_at import ts_before
from ledger.reads.timeline import quote
from ledger.store.checkpoint import CHECKPOINT_SCHEMA
from spark_compaction.session import (
    SHARD_COLUMN,
    LogSnapshot,
    Roots,
    as_roots,
    events_frame,
    open_reader,
    sharded_parquet,
    snapshot_of,
    spark_session,
)
from storage import SegmentedLog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

EVENTS_VIEW = "ol_replay_events"
CHECKPOINT_VIEW = "ol_replay_checkpoint"
KEY_COLUMNS = ("consumer_group", "topic", "queue_id")

SETTING_KINDS = "('initial', 'commit', 'reset', 'sync', 'clamp', 'expire', 'delete')"

# Position events of [seq_from, seq_to) plus the checkpoint's position rows (kinds `cp_position`,
# `cp_client`, seq -1), keyed as the fold keys them: `ckey` is the client where the group was
# broadcast when the event was appended (its last group_config up to it, the checkpoint's for
# a start; a group delete makes it clustering); a checkpoint client row is its client's.
# `active_ts` is when the key's client was last seen (commit, pull, initial; checkpoint).
# Partitioned by group (the window), which every per-key step downstream can reuse.
KEYED_SQL = """
SELECT shard, seq, ts, kind, consumer_group, topic, queue_id, `offset`, prev_offset, generation,
       client_id, actor, detail,
       CASE WHEN kind IN ('cp_position', 'cp_client') THEN client_id
            WHEN mode_then = 'broadcast' AND client_id IS NOT NULL THEN client_id END AS ckey,
       CASE WHEN kind IN ('commit', 'pull', 'initial') THEN ts
            WHEN kind = 'cp_client' THEN last_active_ts END AS active_ts
FROM (
    SELECT u.*,
           last(CASE WHEN kind = 'group_config' THEN get_json_object(detail, '$.mode')
                     WHEN kind = 'delete' AND topic IS NULL THEN 'clustering' END, true)
             OVER (PARTITION BY shard, consumer_group ORDER BY seq
                   ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS mode_then
    FROM (
        SELECT shard, seq, ts, kind, consumer_group, topic, queue_id, `offset`, prev_offset,
               generation, client_id, coalesce(actor, client_id) AS actor, detail,
               CAST(NULL AS BIGINT) AS last_active_ts
        FROM {events}
        WHERE {in_range} AND consumer_group IS NOT NULL
          AND kind NOT IN ('queue_append', 'queue_truncate')
        UNION ALL
        SELECT shard, CAST(-1 AS BIGINT), CAST(NULL AS BIGINT),
               CASE WHEN `row` = 'group' THEN 'group_config' ELSE concat('cp_', `row`) END,
               consumer_group, topic, queue_id, committed, CAST(NULL AS BIGINT), generation,
               client_id, CAST(NULL AS STRING), detail, last_active_ts
        FROM {checkpoint} WHERE `row` IN ('group', 'position', 'client')
    ) u
) w
WHERE topic IS NOT NULL AND kind <> 'group_config'
"""

REPLAY_SQL = """
WITH
cfg AS (
    SELECT shard, consumer_group,
           max_by(named_struct('kind', kind, 'detail', detail), seq) AS last
    FROM (
        SELECT shard, consumer_group, detail, kind, seq FROM {events}
        WHERE {in_range}
          AND (kind = 'group_config' OR (kind = 'delete' AND topic IS NULL))
        UNION ALL
        SELECT shard, consumer_group, detail, 'group_config' AS kind, CAST(-1 AS BIGINT) AS seq
        FROM {checkpoint} WHERE `row` = 'group'
    ) c
    GROUP BY shard, consumer_group
),
modes AS (
    SELECT shard, consumer_group,
           get_json_object(last.detail, '$.mode') AS mode,
           CAST(get_json_object(last.detail, '$.client_timeout_ms') AS BIGINT) AS client_timeout_ms
    FROM cfg WHERE last.kind = 'group_config'
),
keyed AS ({keyed}),
per_key AS (
    SELECT shard, consumer_group, topic, queue_id, ckey,
           max_by(named_struct('committed', `offset`, 'generation', generation, 'seq', seq),
                  seq) FILTER (WHERE kind IN {setting_kinds}
                                  OR kind IN ('cp_position', 'cp_client')) AS latest,
           max(active_ts) AS last_active_ts,
           max(seq) FILTER (WHERE kind = 'delete') AS delete_seq
    FROM keyed GROUP BY shard, consumer_group, topic, queue_id, ckey
),
per_queue AS (
    SELECT shard, consumer_group, topic, queue_id,
           max(latest) FILTER (WHERE ckey IS NULL) AS base,
           max(delete_seq) FILTER (WHERE ckey IS NULL) AS delete_seq,
           collect_list(named_struct('committed', latest.committed,
                                     'generation', latest.generation, 'seq', latest.seq,
                                     'last_active_ts', last_active_ts))
             FILTER (WHERE ckey IS NOT NULL AND latest IS NOT NULL) AS clients
    FROM per_key GROUP BY shard, consumer_group, topic, queue_id
),
shaped AS (
    SELECT q.shard, q.consumer_group, q.topic, q.queue_id, q.base, m.mode, m.client_timeout_ms,
           CASE WHEN m.mode = 'broadcast'
                THEN filter(q.clients, c -> q.delete_seq IS NULL OR c.seq > q.delete_seq)
           END AS kept
    FROM per_queue q
    LEFT JOIN modes m ON m.shard = q.shard AND m.consumer_group = q.consumer_group
),
answer AS (
    SELECT shard, consumer_group, topic, queue_id,
           CASE WHEN mode = 'broadcast'
                THEN coalesce(
                    array_min(transform(
                        filter(kept, c -> c.committed IS NOT NULL
                                      AND {at_ts} - c.last_active_ts <= client_timeout_ms),
                        c -> c.committed)),
                    base.committed)
                ELSE base.committed END AS committed_offset,
           CAST(coalesce(base.generation, array_max(transform(kept, c -> c.generation)), 0)
                AS INT) AS generation
    FROM shaped
)
SELECT shard, consumer_group, topic, queue_id, committed_offset, generation FROM answer
WHERE committed_offset IS NOT NULL {group_filter}
"""


def keyed_sql(events: str, checkpoint: str, in_range: str) -> str:
    """KEYED_SQL over an events view and a checkpoint view (see its comment), the events kept by
    `in_range` (`shard_ranges`)."""
    return KEYED_SQL.format(events=events, checkpoint=checkpoint, in_range=in_range)


def shard_ranges(bounds: Sequence[tuple[int, int, int]]) -> str:
    """Spark SQL keeping each shard's events in its own [seq_from, seq_to): `bounds` holds
    (shard, seq_from, seq_to) triples."""
    parts = [f"({SHARD_COLUMN} = {int(shard)} AND seq >= {int(lo)} AND seq < {int(hi)})"
             for shard, lo, hi in bounds]
    return "(" + (" OR ".join(parts) or "FALSE") + ")"


def per_shard(values: Sequence[tuple[int, int]]) -> str:
    """Spark SQL of a value that depends on the row's shard: `values` holds (shard, value)."""
    if len(values) == 1:
        return str(int(values[0][1]))
    cases = " ".join(f"WHEN {int(shard)} THEN {int(v)}" for shard, v in values)
    return f"CASE {SHARD_COLUMN} {cases} END"


@dataclass(frozen=True)
class ReplayPoint:
    """Where a replay starts and stops: events [seq_from, seq_to) over the checkpoint at
    seq_from (None: the empty state), broadcast liveness judged at `at_ts`."""

    seq_from: int
    seq_to: int
    at_ts: int
    checkpoint: Path | None


def resolve_point(
    log: SegmentedLog, *, at_ts: int | None = None, at_seq: int | None = None
) -> ReplayPoint:
    """The replay bounds for a ledger time or a log position, exactly as `Ledger.state_at`
    picks them (the same function: the same refusals after log retention); neither means the
    end of the log, judged at its last event's ts."""
    if at_ts is not None and at_seq is not None:
        raise InvalidInput("replay needs at most one of at_ts or at_seq")
    point = ledger_point(log, ts=at_ts, seq=at_seq)
    return ReplayPoint(point.checkpoint, point.seq_to, point.at_ts, point.checkpoint_path)


def replay_frame(
    spark: SparkSession, snaps: Sequence[LogSnapshot], points: Sequence[ReplayPoint],
    group: str | None = None,
) -> DataFrame:
    """The state at each snapshot's point (`points[i]` for `snaps[i]`) as one DataFrame (shard,
    consumer_group, topic, queue_id, committed_offset, generation), in no particular order."""
    events = events_frame(spark, snaps, ranges=[(p.seq_from, p.seq_to) for p in points])
    events.createOrReplaceTempView(EVENTS_VIEW)
    checkpoints = [(snap.shard, [p.checkpoint] if p.checkpoint is not None else [])
                   for snap, p in zip(snaps, points, strict=True)]
    sharded_parquet(spark, checkpoints, CHECKPOINT_SCHEMA).createOrReplaceTempView(CHECKPOINT_VIEW)
    group_filter = f"AND consumer_group = {quote(group)}" if group is not None else ""
    in_range = shard_ranges([(snap.shard, p.seq_from, p.seq_to)
                             for snap, p in zip(snaps, points, strict=True)])
    at_ts = per_shard([(snap.shard, p.at_ts) for snap, p in zip(snaps, points, strict=True)])
    return spark.sql(REPLAY_SQL.format(
        checkpoint=CHECKPOINT_VIEW, events=EVENTS_VIEW, in_range=in_range, at_ts=at_ts,
        group_filter=group_filter, setting_kinds=SETTING_KINDS,
        keyed=keyed_sql(EVENTS_VIEW, CHECKPOINT_VIEW, in_range),
    ))


def ledger_now_ms(roots: Roots) -> int:
    """`now` on a ledger as `Ledger.now_ms` has it: the wall clock, never before the last event
    (of any of the roots)."""
    from ledger.store.writer import wall_clock_ms

    now = wall_clock_ms()
    for root in as_roots(roots):
        with open_reader(root) as log:
            now = max(now, ts_before(log, log.next_seq))
    return now


def replay(
    roots: Roots,
    *,
    at_ts: int | None = None,
    at_seq: int | None = None,
    group: str | None = None,
    master: str | None = None,
) -> list[dict[str, Any]]:
    """Committed offsets as of ledger time `at_ts` (events with ts <= it) or log position
    `at_seq` (events before it; one root only: seqs are per root), neither meaning the end of
    each log, computed in Spark; the same rows as `Ledger.state_at(...).to_pylist()`, over
    several roots the union of theirs (groups live on one shard each)."""
    chosen = as_roots(roots)
    if at_seq is not None and len(chosen) > 1:
        raise InvalidInput(f"a replay at seq {at_seq} needs one root: seqs are per root, "
                           f"and {len(chosen)} were given; replay at a time instead")
    snaps: list[LogSnapshot] = []
    points: list[ReplayPoint] = []
    for shard, root in enumerate(chosen):
        with open_reader(root) as log:
            points.append(resolve_point(log, at_ts=at_ts, at_seq=at_seq))
            snaps.append(snapshot_of(log, shard))
    spark = spark_session(master)
    table = replay_frame(spark, snaps, points, group).toArrow().drop_columns([SHARD_COLUMN])
    return table.sort_by([(c, "ascending") for c in KEY_COLUMNS]).to_pylist()
