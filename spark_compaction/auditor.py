"""Audit: the DuckDB view checked against a full Spark replay, and anomalies found in history.

Findings (any one makes the audit unclean):
- `view_mismatch`: a key whose committed offset or generation in the view differs from a full
  replay of checkpoint + log, or that only one side has. The view is exported by the driver
  (Spark cannot read a DuckDB file, `export_view`): the DuckDB view file as the writer left it
  when no writer holds it, else the view a read-only snapshot rebuilds in memory.
- `commit_regression`: a commit lower than the previous committed value of the same key (per
  broadcast client where the group was broadcast at that point) with no reset, sync, delete,
  expire or clamp in between.
- `beyond_max_offset` / `below_min_offset`: a position event (initial, commit, reset, sync,
  clamp, pull) whose offset lies outside [MinOffset, MaxOffset] of its queue at that time, as
  `queue_append` / `queue_truncate` events set them (queues with unknown bounds are skipped).
- `seq_gap` / `seq_duplicate`: seqs missing from, or repeated in, [log start, next seq).

Resets (and refused resets) are listed, not findings: actor, reason and mode (from the detail
JSON), from -> to, and how many messages the move replays (backwards) or skips (forwards).

The audit never takes the writer lock: its ledger handle is a read-only snapshot (as the CLI's
reads), so a writer (`offset-ledger apply`) can start and append while an audit runs; the audit
checks the log as it was at its snapshot. The one moment it can be in a writer's way is the
query that reads the DuckDB view file when no writer holds it (milliseconds): DuckDB's own file
lock then refuses a writer that opens the view at that instant.

Several roots (the shards of a cluster) are audited as one dataset: one read of every manifest's
files, rows tagged with their `shard`; each shard's view, seqs, bounds and history are checked
against its own log (every finding names its shard), in the same few jobs.

Spark jobs are few on purpose (each costs scheduling time even on a small ledger): the replay,
one query for regressions, bounds and resets together, one aggregate for seqs (refined only where
it finds something), and the lag series when a report is asked for.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ledger import Ledger
from ledger.errors import HistoryUnavailable
from ledger.store.checkpoint import CHECKPOINT_SCHEMA
from spark_compaction.session import (
    LogSnapshot,
    Roots,
    as_roots,
    events_frame,
    open_reader,
    sharded_parquet,
    snapshot_of,
    spark_session,
)
from spark_compaction.timeline import (
    SETTING_KINDS,
    ReplayPoint,
    keyed_sql,
    replay_frame,
    shard_ranges,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Findings of one kind (and resets) sent to the driver at most; the counts are always exact.
FINDINGS_PER_KIND_MAX = 1000
RESETS_MAX = 10_000
#: Seqs are checked per bucket of this many; only buckets with a gap or a duplicate are read.
SEQ_BUCKET = 65_536
SEQ_BUCKETS_REFINED_MAX = 16

EVENTS_VIEW = "ol_audit_events"
CHECKPOINT_VIEW = "ol_audit_checkpoint"
KEYED_VIEW = "ol_audit_keyed"

Progress = Callable[[str], None]

FINDINGS_SQL = f"""
WITH setting AS (
    SELECT shard, seq, ts,
           CASE WHEN kind IN ('cp_position', 'cp_client') THEN 'checkpoint' ELSE kind END AS kind,
           consumer_group, topic, queue_id, ckey, `offset`, client_id, actor
    FROM {KEYED_VIEW} WHERE kind IN {SETTING_KINDS} OR kind IN ('cp_position', 'cp_client')
),
chain AS (
    SELECT *, lag(kind) OVER w AS prev_kind, lag(`offset`) OVER w AS prev_value,
           lag(seq) OVER w AS prev_seq
    FROM setting
    WINDOW w AS (PARTITION BY shard, consumer_group, topic, queue_id, ckey ORDER BY seq)
),
marks AS (
    SELECT shard, seq, ts, topic, queue_id,
           CASE WHEN kind = 'queue_append' THEN `offset` END AS qmax,
           CASE WHEN kind = 'queue_truncate' THEN `offset` END AS qmin,
           CAST(NULL AS STRING) AS kind, CAST(NULL AS STRING) AS consumer_group,
           CAST(NULL AS STRING) AS client_id, CAST(NULL AS STRING) AS actor,
           CAST(NULL AS BIGINT) AS `offset`
    FROM {EVENTS_VIEW} WHERE kind IN ('queue_append', 'queue_truncate')
    UNION ALL
    SELECT shard, CAST(-1 AS BIGINT), CAST(NULL AS BIGINT), topic, queue_id, max_offset,
           min_offset, NULL, NULL, NULL, NULL, NULL
    FROM {CHECKPOINT_VIEW} WHERE `row` = 'queue'
    UNION ALL
    SELECT shard, seq, ts, topic, queue_id, NULL, NULL, kind, consumer_group, client_id, actor,
           `offset`
    FROM {KEYED_VIEW}
    WHERE kind IN ('initial', 'commit', 'reset', 'sync', 'clamp', 'pull') AND `offset` IS NOT NULL
),
bounded AS (
    SELECT *, last(qmax, true) OVER w AS max_offset,
           coalesce(last(qmin, true) OVER w, 0) AS min_offset
    FROM marks
    WINDOW w AS (PARTITION BY shard, topic, queue_id ORDER BY seq
                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
found AS (
    SELECT 'commit_regression' AS finding, shard, seq, ts, kind, consumer_group, topic, queue_id,
           client_id, actor, `offset`, prev_value, prev_seq, prev_kind,
           CAST(NULL AS BIGINT) AS min_offset, CAST(NULL AS BIGINT) AS max_offset,
           CAST(NULL AS BIGINT) AS prev_offset, CAST(NULL AS INT) AS generation,
           CAST(NULL AS STRING) AS detail
    FROM chain
    WHERE kind = 'commit' AND prev_kind IN ('commit', 'initial', 'checkpoint')
      AND `offset` < prev_value
    UNION ALL
    SELECT CASE WHEN `offset` > max_offset THEN 'beyond_max_offset' ELSE 'below_min_offset' END,
           shard, seq, ts, kind, consumer_group, topic, queue_id, client_id, actor, `offset`,
           NULL, NULL, NULL, min_offset, max_offset, NULL, NULL, NULL
    FROM bounded
    WHERE kind IS NOT NULL AND max_offset IS NOT NULL
      AND (`offset` > max_offset OR `offset` < min_offset)
    UNION ALL
    SELECT 'reset', shard, seq, ts, kind, consumer_group, topic, queue_id, client_id, actor, `offset`,
           NULL, NULL, NULL, NULL, NULL, prev_offset, generation, detail
    FROM {KEYED_VIEW} WHERE kind IN ('reset', 'reset_refused')
)
SELECT * FROM (
    SELECT *, count(*) OVER (PARTITION BY finding) AS total,
           row_number() OVER (PARTITION BY finding ORDER BY shard, seq) AS rn
    FROM found WHERE ts >= {{since}}
) WHERE rn <= CASE WHEN finding = 'reset' THEN {RESETS_MAX} ELSE {FINDINGS_PER_KIND_MAX} END
"""

SEQS_SQL = f"""
WITH per_seq AS (
    SELECT shard, b, seq, count(*) AS n
    FROM (SELECT /*+ REPARTITION(b) */ shard, seq div {SEQ_BUCKET} AS b, seq FROM {EVENTS_VIEW}) s
    GROUP BY shard, b, seq
)
SELECT shard, b, min(seq) AS lo, max(seq) AS hi, count(*) AS seqs, sum(n) AS rows
FROM per_seq GROUP BY shard, b
"""


def _seq_findings(
    spark: SparkSession, snaps: Sequence[LogSnapshot], seq_tos: Sequence[int]
) -> dict[str, tuple[int, list[dict]]]:
    """Duplicated seqs and missing ranges of seqs in [log start, seq_to) of each shard."""
    buckets = sorted(spark.sql(SEQS_SQL).toArrow().to_pylist(),
                     key=lambda r: (r["shard"], r["b"]))
    gaps: list[tuple[int, int, int]] = []
    bad: list[tuple[int, int]] = []
    for snap, seq_to in zip(snaps, seq_tos, strict=True):
        expected = snap.start_seq
        for bk in buckets:
            if bk["shard"] != snap.shard:
                continue
            if bk["lo"] > expected:
                gaps.append((snap.shard, expected, bk["lo"]))
            if bk["seqs"] != bk["hi"] - bk["lo"] + 1 or bk["rows"] != bk["seqs"]:
                bad.append((snap.shard, bk["b"]))
            expected = max(expected, bk["hi"] + 1)
        if expected < seq_to:
            gaps.append((snap.shard, expected, seq_to))
    dups: list[dict[str, Any]] = []
    refined = bad[:SEQ_BUCKETS_REFINED_MAX]
    if refined:
        chosen = " OR ".join(f"(shard = {int(shard)} AND seq div {SEQ_BUCKET} = {int(b)})"
                             for shard, b in refined)
        rows = spark.sql(
            f"SELECT shard, seq, count(*) AS n FROM {EVENTS_VIEW} WHERE {chosen} "
            "GROUP BY shard, seq").toArrow().sort_by([("shard", "ascending"),
                                                      ("seq", "ascending")]).to_pylist()
        for prev, cur in zip(rows, rows[1:], strict=False):
            same_bucket = (prev["shard"] == cur["shard"]
                           and prev["seq"] // SEQ_BUCKET == cur["seq"] // SEQ_BUCKET)
            if same_bucket and cur["seq"] > prev["seq"] + 1:
                gaps.append((cur["shard"], prev["seq"] + 1, cur["seq"]))
        dups = [{"shard": r["shard"], "seq": r["seq"], "copies": r["n"]}
                for r in rows if r["n"] > 1]
    gaps.sort()
    gap_rows = [{"shard": shard, "gap_from": a, "gap_to": b} for shard, a, b in gaps]
    # Buckets beyond the refined ones only count (extra copies; their inner gaps as one each).
    unrefined = set(bad[SEQ_BUCKETS_REFINED_MAX:])
    rest = [bk for bk in buckets if (bk["shard"], bk["b"]) in unrefined]
    gap_total = len(gap_rows) + sum(bk["seqs"] != bk["hi"] - bk["lo"] + 1 for bk in rest)
    dup_total = len(dups) + sum(bk["rows"] - bk["seqs"] for bk in rest)
    return {
        "seq_gap": (gap_total, gap_rows[:FINDINGS_PER_KIND_MAX]),
        "seq_duplicate": (dup_total, dups[:FINDINGS_PER_KIND_MAX]),
    }


VIEW_QUERY = "SELECT consumer_group, topic, queue_id, committed_offset, generation FROM progress"


@dataclass(frozen=True)
class ViewExport:
    """The view's committed offsets as the audit compares them."""

    rows: list[dict[str, Any]]
    #: The log position the rows reflect (the replay stops there).
    seq: int
    #: The ledger time both sides use for broadcast liveness.
    now_ms: int
    #: "file": the DuckDB view file as the writer left it; "snapshot": rebuilt in memory from
    #: checkpoint + log by a read-only snapshot (a writer holds the file, or moved past it).
    source: str


def open_ledger(root: str | os.PathLike[str], clock: Callable[[], int]) -> Ledger:
    """The audit's ledger handle: a read-only snapshot (the manifest's segments, the newest
    checkpoint and the intact tail, an in-memory view). It never takes the writer lock, so a
    writer may open the ledger and append while it is open."""
    return Ledger.open(root, readonly=True, clock=clock)


def _view_file_rows(path: Path, now_ms: int) -> tuple[list[dict[str, Any]], int] | None:
    """The committed offsets in the DuckDB view file and the log position it reflects, or None
    when a writer holds the file (DuckDB lets nobody else open it) or there is none. The file is
    open read-only for this one query only: a writer starting in those milliseconds would find
    it locked."""
    if not path.exists():
        return None
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:  # IOException from another process's lock, ConnectionException from ours
        return None
    try:
        con.execute(f"SET VARIABLE ledger_now_ms = {int(now_ms)}")
        position = con.execute("SELECT max(next_seq) FROM view_position").fetchone()
        cursor = con.execute(VIEW_QUERY)
        columns = [d[0] for d in cursor.description]
        rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    except duckdb.Error:  # not a view this code wrote: let the snapshot answer
        return None
    finally:
        con.close()
    if position is None or position[0] is None:
        return None
    return rows, int(position[0])


def export_view(root: str | os.PathLike[str], now_ms: int | None = None) -> ViewExport:
    """The view's committed offsets, the log position they reflect and the ledger time, without
    the writer lock: a read-only snapshot first, then the DuckDB view file if no writer holds it
    and it does not reflect more of the log than the snapshot holds (a writer appended since);
    else the snapshot's own view."""
    from ledger.store.writer import VIEW_FILE, wall_clock_ms

    frozen = wall_clock_ms() if now_ms is None else now_ms  # one instant for both sides
    with open_ledger(root, lambda: frozen) as led:
        now = led.now_ms()
        snap_seq = led.log.next_seq
        snap_rows = led.sql(VIEW_QUERY).to_pylist()
        from_file = _view_file_rows(Path(root) / VIEW_FILE, now)
    if from_file is not None and from_file[1] <= snap_seq:
        return ViewExport(from_file[0], from_file[1], now, "file")
    return ViewExport(snap_rows, snap_seq, now, "snapshot")


def _compare(view: list[dict], replayed: list[dict]) -> tuple[int, list[dict[str, Any]]]:
    """Keys (shard, group, topic, queue) whose view and replay differ; both sides' rows carry
    their shard."""
    def keyed(rows: list[dict]) -> dict[tuple, tuple]:
        return {(r["shard"], r["consumer_group"], r["topic"], r["queue_id"]):
                (r["committed_offset"], r["generation"]) for r in rows}

    v, r = keyed(view), keyed(replayed)
    out = []
    for key in sorted(set(v) | set(r)):
        if v.get(key) != r.get(key):
            vv, rr = v.get(key, (None, None)), r.get(key, (None, None))
            out.append({
                "shard": key[0], "consumer_group": key[1], "topic": key[2], "queue_id": key[3],
                "view_committed": vv[0], "view_generation": vv[1],
                "replay_committed": rr[0], "replay_generation": rr[1],
            })
    return len(out), out[:FINDINGS_PER_KIND_MAX]


def _full_replay_point(snap: LogSnapshot, seq_to: int, now_ms: int) -> ReplayPoint:
    """From the log start: from nothing when the log starts at 0, else from the first
    checkpoint at or after the start (retention leaves one there)."""
    if snap.start_seq == 0:
        return ReplayPoint(0, seq_to, now_ms, None)
    later = [(c, p) for c, p in snap.checkpoints if snap.start_seq <= c <= seq_to]
    if not later:
        raise HistoryUnavailable(
            f"the log starts at seq {snap.start_seq} and no checkpoint at or after it: "
            "a full replay is not possible")
    return ReplayPoint(later[0][0], seq_to, now_ms, later[0][1])


def _message(kind: str, r: dict[str, Any]) -> str:
    where = f"{r.get('consumer_group')} {r.get('topic')}:{r.get('queue_id')}"
    if r.get("client_id"):
        where += f" client {r['client_id']}"
    if kind == "view_mismatch":
        return (f"{where}: view has committed {r['view_committed']} gen {r['view_generation']}, "
                f"replay has {r['replay_committed']} gen {r['replay_generation']}")
    if kind == "commit_regression":
        return (f"{where}: commit {r['offset']} at seq {r['seq']} is below {r['prev_value']} "
                f"({r['prev_kind']} at seq {r['prev_seq']}) with no reset in between")
    if kind == "beyond_max_offset":
        return (f"{where}: {r['event_kind']} to {r['offset']} at seq {r['seq']} is above MaxOffset "
                f"{r['max_offset']}")
    if kind == "below_min_offset":
        return (f"{where}: {r['event_kind']} to {r['offset']} at seq {r['seq']} is below MinOffset "
                f"{r['min_offset']}")
    if kind == "seq_gap":
        return f"seqs {r['gap_from']}..{r['gap_to'] - 1} are missing"
    if kind == "seq_duplicate":
        return f"seq {r['seq']} appears {r['copies']} times"
    return kind


def reset_row(r: dict[str, Any]) -> dict[str, Any]:
    """A reset event as an auditor reads it: who, why, from -> to, messages replayed/skipped."""
    try:
        detail = json.loads(r["detail"]) if r["detail"] else {}
    except ValueError:
        detail = {"raw": r["detail"]}
    if not isinstance(detail, dict):
        detail = {"raw": detail}
    before, after = r["prev_offset"], r["offset"]
    delta = after - before if before is not None and after is not None else None
    return {
        "shard": r["shard"], "seq": r["seq"], "ts": r["ts"], "consumer_group": r["consumer_group"],
        "topic": r["topic"], "queue_id": r["queue_id"], "client_id": r["client_id"],
        "actor": r["actor"], "status": "refused" if r["kind"] == "reset_refused" else "applied",
        "mode": detail.get("mode"), "value": detail.get("value"), "reason": detail.get("reason"),
        "backward_only": bool(detail.get("backward_only", False)),
        "from_offset": before, "to_offset": after, "generation": r["generation"],
        "replays": -delta if delta is not None and delta < 0 else 0,
        "skips": delta if delta is not None and delta > 0 else 0,
    }


def prepare_views(
    spark: SparkSession, snaps: Sequence[LogSnapshot], seq_tos: Sequence[int]
) -> None:
    """Temp views the audit queries read, over every snapshot at once (rows tagged with their
    shard): events [log start, seq_to) of each, the checkpoint at each log start (when retention
    moved it) and the keyed position events (`timeline.KEYED_SQL`)."""
    bounds = [(snap.shard, snap.start_seq, seq_to)
              for snap, seq_to in zip(snaps, seq_tos, strict=True)]
    events = events_frame(spark, snaps, ranges=[(0, hi) for _, _, hi in bounds])
    events.where(shard_ranges([(shard, 0, hi) for shard, _, hi in bounds])) \
        .createOrReplaceTempView(EVENTS_VIEW)
    seeds = [(snap.shard, [p for c, p in snap.checkpoints if c == snap.start_seq and c > 0])
             for snap in snaps]
    sharded_parquet(spark, seeds, CHECKPOINT_SCHEMA).createOrReplaceTempView(CHECKPOINT_VIEW)
    keyed = keyed_sql(EVENTS_VIEW, CHECKPOINT_VIEW, shard_ranges(bounds))
    spark.sql(keyed).createOrReplaceTempView(KEYED_VIEW)


def _checked(
    roots: Sequence[Path], snaps: Sequence[LogSnapshot], exports: Sequence[ViewExport],
    seq_tos: Sequence[int], points: Sequence[ReplayPoint], replay_keys: int,
    since_ts: int | None,
) -> dict[str, Any]:
    """What the audit covered: per shard, and in total (one root: its own figures)."""
    shards = [
        {"shard": snap.shard, "root": str(root), "seq_from": snap.start_seq, "seq_to": seq_to,
         "now_ms": ex.now_ms, "view_source": ex.source, "view_keys": len(ex.rows),
         "replay_from_checkpoint": point.seq_from if point.checkpoint else None}
        for root, snap, ex, seq_to, point in zip(roots, snaps, exports, seq_tos, points,
                                                 strict=True)
    ]
    one = shards[0] if len(shards) == 1 else None
    return {
        "seq_from": one["seq_from"] if one else None,
        "seq_to": one["seq_to"] if one else None,
        "now_ms": max(s["now_ms"] for s in shards),
        "since_ts": since_ts,
        "view_source": one["view_source"] if one else None,
        "view_keys": sum(s["view_keys"] for s in shards),
        "replay_keys": replay_keys,
        "replay_from_checkpoint": one["replay_from_checkpoint"] if one else None,
        "shards": shards,
    }


def audit(
    roots: Roots,
    *,
    since_ts: int | None = None,
    master: str | None = None,
    report: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Audit one ledger root, or several as one dataset (see the module doc). `since_ts` limits
    the anomaly findings and the reset listing to events at or after it (the view check is
    always complete); `report` writes an HTML report there. `clean` is True when there are no
    findings; each finding and reset names its `shard` (the root's index in `roots`)."""
    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    chosen = as_roots(roots)
    timings: dict[str, float] = {}

    def lap(name: str, t: float) -> float:
        now = time.perf_counter()
        timings[name] = round(now - t, 3)
        return now

    say("exporting the view")
    from ledger.store.writer import wall_clock_ms

    frozen = wall_clock_ms()  # one instant for every shard and both sides
    exports: list[ViewExport] = []
    snaps: list[LogSnapshot] = []
    for shard, root in enumerate(chosen):
        exports.append(export_view(root, frozen))
        with open_reader(root) as log:
            snaps.append(snapshot_of(log, shard))
    view = [{"shard": snap.shard, **row}
            for snap, ex in zip(snaps, exports, strict=True) for row in ex.rows]
    seq_tos = [min(ex.seq, snap.next_seq) for snap, ex in zip(snaps, exports, strict=True)]
    t = lap("view_export", started)
    say("starting Spark")
    spark = spark_session(master)
    prepare_views(spark, snaps, seq_tos)
    t = lap("setup", t)

    say("full replay vs the view")
    points = [_full_replay_point(snap, seq_to, ex.now_ms)
              for snap, seq_to, ex in zip(snaps, seq_tos, exports, strict=True)]
    replayed = replay_frame(spark, snaps, points).toArrow().to_pylist()
    found: dict[str, tuple[int, list[dict]]] = {"view_mismatch": _compare(view, replayed)}
    t = lap("replay", t)

    say("commit regressions, offsets out of range, resets")
    since = int(since_ts) if since_ts is not None else -(2**62)
    rows = spark.sql(FINDINGS_SQL.format(since=since)).toArrow().to_pylist()
    rows.sort(key=lambda r: (r["shard"], r["seq"]))
    for kind in ("commit_regression", "beyond_max_offset", "below_min_offset"):
        mine = [r for r in rows if r["finding"] == kind]
        found[kind] = (mine[0]["total"] if mine else 0, mine)
    resets = [reset_row(r) for r in rows if r["finding"] == "reset"]
    resets_total = next((r["total"] for r in rows if r["finding"] == "reset"), 0)
    t = lap("anomalies", t)
    say("seq gaps and duplicates")
    found.update(_seq_findings(spark, snaps, seq_tos))
    t = lap("seqs", t)

    findings = []
    for kind, (_, items) in found.items():
        for item in items:
            row = {k: v for k, v in item.items() if k not in ("finding", "total", "rn")}
            if "kind" in row:  # the event's kind; `kind` of a finding names the finding
                row["event_kind"] = row.pop("kind")
            message = _message(kind, row)
            if len(chosen) > 1:
                message = f"shard {row['shard']}: {message}"
            findings.append({"kind": kind, **row, "message": message})
    result: dict[str, Any] = {
        "root": str(chosen[0]) if len(chosen) == 1 else ", ".join(str(r) for r in chosen),
        "roots": [str(r) for r in chosen],
        "clean": not any(total for total, _ in found.values()),
        "findings": findings,
        "findings_by_kind": {kind: total for kind, (total, _) in found.items()},
        "resets": resets,
        "resets_total": resets_total,
        "checked": _checked(chosen, snaps, exports, seq_tos, points, len(replayed), since_ts),
        "report": None,
        "seconds": timings,
    }
    if report is not None:
        say("lag over time")
        from spark_compaction.lag import lag_series
        from spark_compaction.report import write_report

        series = lag_series(spark, snaps, KEYED_VIEW, EVENTS_VIEW, CHECKPOINT_VIEW, since_ts)
        t = lap("lag", t)
        say("rendering the report")
        write_report(Path(report), result, series)
        result["report"] = str(report)
        lap("report", t)
    timings["total"] = round(time.perf_counter() - started, 3)
    return result
