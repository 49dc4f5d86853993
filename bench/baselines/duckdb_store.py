"""DuckDB-alone baseline: events appended from Arrow, current offsets upserted per batch.

Why: the ledger keeps its view in DuckDB; this measures DuckDB doing all of it (no log, no
in-process state): per 10,000 commands one transaction that appends the batch's event rows from
Arrow and upserts the batch's current offsets, pre-aggregated column-wise to the last event per
key (`INSERT ... ON CONFLICT DO UPDATE` refuses two rows for one key in a statement anyway).
Point lookups from Python show the per-query overhead that makes the ledger keep state in process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from bench.baselines.common import (
    COMMITTED_KINDS,
    EventRows,
    Key,
    State,
    percentiles_us,
    sample_keys,
    summary,
    timings,
)

_KINDS_SQL = ", ".join(f"'{k}'" for k in COMMITTED_KINDS)
_KINDS = pa.array(COMMITTED_KINDS, pa.string())

SCHEMA = """
CREATE TABLE events (
    seq BIGINT NOT NULL, ts BIGINT NOT NULL, kind VARCHAR NOT NULL, consumer_group VARCHAR,
    topic VARCHAR, queue_id INTEGER, "offset" BIGINT, prev_offset BIGINT, generation INTEGER,
    client_id VARCHAR, actor VARCHAR, store_ts BIGINT, detail VARCHAR
);
CREATE TABLE offsets (
    consumer_group VARCHAR NOT NULL, topic VARCHAR NOT NULL, queue_id INTEGER NOT NULL,
    "offset" BIGINT, generation INTEGER, seq BIGINT NOT NULL, ts BIGINT NOT NULL,
    PRIMARY KEY (consumer_group, topic, queue_id)
);
"""
UPSERT = """
INSERT INTO offsets SELECT consumer_group, topic, queue_id, "offset", generation, seq, ts
FROM last_batch
ON CONFLICT (consumer_group, topic, queue_id) DO UPDATE SET
    "offset" = excluded."offset", generation = excluded.generation, seq = excluded.seq,
    ts = excluded.ts
"""
STATE_AT = f"""
SELECT consumer_group, topic, queue_id, arg_max("offset", seq) AS "offset"
FROM events WHERE ts <= $t AND kind IN ({_KINDS_SQL})
GROUP BY consumer_group, topic, queue_id
"""
LOOKUP = 'SELECT "offset", generation FROM offsets WHERE consumer_group = $1 AND topic = $2 ' \
    "AND queue_id = $3"
GROUP_HISTORY = "SELECT * FROM events WHERE consumer_group = $1 AND ts BETWEEN $2 AND $3 " \
    "ORDER BY seq"


def last_per_key(batch: pa.Table) -> pa.Table:
    """The batch's last committed-kind event per key, column-wise (Arrow hash aggregation)."""
    rows = batch.filter(pc.is_in(batch.column("kind"), value_set=_KINDS))
    agg = rows.group_by(["consumer_group", "topic", "queue_id"], use_threads=False).aggregate(
        [("offset", "last"), ("generation", "last"), ("seq", "last"), ("ts", "last")]
    )
    cols = ["consumer_group", "topic", "queue_id", "offset_last", "generation_last", "seq_last",
            "ts_last"]
    return agg.select(cols).rename_columns([c.removesuffix("_last") for c in cols])


def ingest(events: EventRows, path: Path, commands_per_batch: int = 10_000) -> dict:
    """Append every batch and upsert its offsets, one transaction per batch."""
    for p in (path, Path(f"{path}.wal")):
        if p.exists():
            p.unlink()
    con = duckdb.connect(str(path))
    con.execute(SCHEMA)
    store_s = 0.0
    n_tx = 0
    cpu0 = time.process_time()
    for batch in events.batches(commands_per_batch):
        t0 = time.perf_counter()
        last = last_per_key(batch)
        con.execute("BEGIN")
        con.register("batch", batch)
        con.register("last_batch", last)
        con.execute("INSERT INTO events SELECT * FROM batch")
        con.execute(UPSERT)
        con.execute("COMMIT")
        con.unregister("batch")
        con.unregister("last_batch")
        store_s += time.perf_counter() - t0
        n_tx += 1
    t0 = time.perf_counter()
    con.execute("CHECKPOINT")
    checkpoint_s = time.perf_counter() - t0
    cpu_s = time.process_time() - cpu0  # all threads of the process
    con.close()
    return {"store_s": store_s, "cpu_s": cpu_s, "checkpoint_s": checkpoint_s,
            "transactions": n_tx,
            "commands_per_s": events.n_commands / store_s,
            "events_per_s": events.n_events / store_s}


def state_at(con: duckdb.DuckDBPyConnection, ts: int) -> State:
    """Latest committed-kind event per key at or before `ts` (arg_max over seq)."""
    return {(g, t, q): o for g, t, q, o in con.execute(STATE_AT, {"t": ts}).fetchall()}


def lookups(con: duckdb.DuckDBPyConnection, keys: list[Key], sql: str = LOOKUP) -> dict:
    """Latency of one parameterised point query per key (the planner scans: DuckDB 2.0 uses
    no ART index for a multi-column equality; the per-statement overhead dominates anyway,
    see `floor` in `run`)."""
    samples = []
    for k in keys:
        t = time.perf_counter_ns()
        con.execute(sql, list(k)).fetchone()
        samples.append(time.perf_counter_ns() - t)
    return percentiles_us(samples)


def run(events: EventRows, workdir: Path, repeat: int = 3, lookups_n: int = 2_000,
        keep: bool = False) -> dict:
    """All DuckDB figures for one event stream; the database lives in `workdir`."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "duckdb.db"
    t_mid, t_end, t_0 = events.time_at(0.5), events.time_at(1.0), events.time_at(0.0)
    out: dict = {"events": events.n_events, "commands": events.n_commands, "T": t_mid}
    out["ingest"] = ingest(events, db)
    out["bytes_per_event"] = os.path.getsize(db) / max(1, events.n_events)
    con = duckdb.connect(str(db))
    out["state_at_T_s"], answer = timings(lambda: state_at(con, t_mid), repeat)
    out["state_at_T_keys"] = len(answer)  # type: ignore[arg-type]
    group = sample_keys(events, 1, seed=3)[0][0] if events.n_events else ""
    lo, hi = t_mid - (t_end - t_0) // 20, t_mid + (t_end - t_0) // 20
    out["group_history_s"], rows = timings(
        lambda: con.execute(GROUP_HISTORY, [group, lo, hi]).fetchall(), repeat)
    out["group_history_rows"] = len(rows)  # type: ignore[arg-type]
    keys = sample_keys(events, lookups_n)
    lat = [lookups(con, keys) for _ in range(max(1, repeat))]
    out["lookup"] = {"p50_us": summary([x["p50_us"] for x in lat]),
                     "p99_us": summary([x["p99_us"] for x in lat]), "n": len(keys)}
    out["lookup_plan"] = con.execute("EXPLAIN " + LOOKUP, list(keys[0])).fetchall()[0][1] \
        if keys else ""
    out["query_floor"] = lookups(con, [()] * min(len(keys), 1_000), "SELECT 1")
    con.close()
    if not keep:
        for p in (db, Path(f"{db}.wal")):
            if p.exists():
                p.unlink()
    return out


def state_answers(events: EventRows, workdir: Path, times: Sequence[int]) -> list[State]:
    """State at each of `times` from one DuckDB ingest (tests compare with the dict fold)."""
    db = Path(workdir) / "duckdb-answer.db"
    ingest(events, db)
    con = duckdb.connect(str(db))
    try:
        return [state_at(con, ts) for ts in times]
    finally:
        con.close()
