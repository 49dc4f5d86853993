"""SQLite baseline: a history table plus an UPSERTed table of current offsets.

Why: "just put it in SQLite" is the obvious alternative to the ledger; this is it done honestly:
WAL mode with synchronous=FULL (the WAL is fsynced at every commit, as the ledger fsyncs per
batch), one transaction per 10,000 commands, executemany with prepared statements, current
offsets pre-aggregated per transaction (last event per key) and UPSERTed, a 256 MiB page cache,
and checkpoints every 64k WAL pages instead of 1k: random inserts into the key index dirty
thousands of index pages per transaction, and a 1k-page autocheckpoint copies them back into the
database after every commit (measured: 1.7x slower). The final checkpoint is in the timing.
State at T is answered two ways: GROUP BY over the history (a scan), and one index seek per key
on a covering index (consumer_group, topic, queue_id, ts, seq, kind, offset), the design's
(consumer_group, topic, queue_id, ts) index widened so that no table row is read to find a key's
latest event (seq is the rowid, stored in every index entry anyway).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from bench.baselines.common import (
    COLUMNS,
    COMMITTED_KINDS,
    EventRows,
    Key,
    State,
    percentiles_us,
    pylist,
    sample_keys,
    summary,
    timings,
)

_KINDS_SQL = ", ".join(f"'{k}'" for k in COMMITTED_KINDS)
_COMMITTED = frozenset(COMMITTED_KINDS)

SCHEMA = """
CREATE TABLE history (
    seq INTEGER PRIMARY KEY,
    ts INTEGER NOT NULL,
    kind TEXT NOT NULL,
    consumer_group TEXT,
    topic TEXT,
    queue_id INTEGER,
    "offset" INTEGER,
    prev_offset INTEGER,
    generation INTEGER,
    client_id TEXT,
    actor TEXT,
    store_ts INTEGER,
    detail TEXT
);
CREATE TABLE offsets (
    consumer_group TEXT NOT NULL,
    topic TEXT NOT NULL,
    queue_id INTEGER NOT NULL,
    "offset" INTEGER,
    generation INTEGER,
    seq INTEGER NOT NULL,
    ts INTEGER NOT NULL,
    PRIMARY KEY (consumer_group, topic, queue_id)
) WITHOUT ROWID;
"""
INDEX = (
    'CREATE INDEX history_key_ts ON history (consumer_group, topic, queue_id, ts, seq, kind, '
    '"offset")'
)
INSERT = f"INSERT INTO history VALUES ({', '.join('?' * len(COLUMNS))})"
UPSERT = (
    'INSERT INTO offsets (consumer_group, topic, queue_id, "offset", generation, seq, ts) '
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (consumer_group, topic, queue_id) DO UPDATE SET "
    '"offset" = excluded."offset", generation = excluded.generation, seq = excluded.seq, '
    "ts = excluded.ts"
)
STATE_GROUP_BY = f"""
SELECT h.consumer_group, h.topic, h.queue_id, h."offset"
FROM (SELECT max(seq) AS s FROM history NOT INDEXED
      WHERE ts <= :t AND kind IN ({_KINDS_SQL})
      GROUP BY consumer_group, topic, queue_id) AS m
JOIN history AS h ON h.seq = m.s
"""
STATE_SEEK = f"""
SELECT h.consumer_group, h.topic, h.queue_id, h."offset"
FROM offsets AS k
JOIN history AS h ON h.seq = (
    SELECT x.seq FROM history AS x INDEXED BY history_key_ts
    WHERE x.consumer_group = k.consumer_group AND x.topic = k.topic
      AND x.queue_id = k.queue_id AND x.ts <= :t AND x.kind IN ({_KINDS_SQL})
    ORDER BY x.ts DESC, x.seq DESC LIMIT 1)
"""
SEEK_ONE = f"""
SELECT "offset" FROM history INDEXED BY history_key_ts
WHERE consumer_group = ? AND topic = ? AND queue_id = ? AND ts <= ? AND kind IN ({_KINDS_SQL})
ORDER BY ts DESC, seq DESC LIMIT 1
"""
GROUP_HISTORY = "SELECT * FROM history WHERE consumer_group = ? AND ts BETWEEN ? AND ? ORDER BY seq"
LOOKUP = 'SELECT "offset", generation FROM offsets WHERE consumer_group = ? AND topic = ? ' \
    "AND queue_id = ?"


def connect(path: Path) -> sqlite3.Connection:
    """A connection in WAL mode with synchronous=FULL, autocommit (explicit transactions)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA cache_size=-262144")
    conn.execute("PRAGMA wal_autocheckpoint=65536")
    conn.execute("PRAGMA temp_store=MEMORY")
    return conn


def _rows(batch) -> list[tuple]:
    return list(zip(*(pylist(batch.column(n)) for n in COLUMNS), strict=True))


def ingest(events: EventRows, path: Path, index: bool = True,
           commands_per_batch: int = 10_000) -> dict:
    """Store all event rows, one durable transaction per batch; seconds spent in SQLite."""
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if p.exists():
            p.unlink()
    conn = connect(path)
    conn.executescript(SCHEMA)
    if index:
        conn.execute(INDEX)
    store_s = prep_s = 0.0
    n_tx = 0
    cpu0 = time.process_time()
    for batch in events.batches(commands_per_batch):
        t0 = time.perf_counter()
        rows = _rows(batch)  # the rows as a SQLite-based ledger's fold would hand them over
        t1 = time.perf_counter()
        last: dict[Key, tuple] = {}
        for r in rows:
            if r[2] in _COMMITTED:
                last[(r[3], r[4], r[5])] = (r[3], r[4], r[5], r[6], r[8], r[0], r[1])
        conn.execute("BEGIN")
        conn.executemany(INSERT, rows)
        conn.executemany(UPSERT, last.values())
        conn.execute("COMMIT")
        t2 = time.perf_counter()
        prep_s += t1 - t0
        store_s += t2 - t1
        n_tx += 1
    t0 = time.perf_counter()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    checkpoint_s = time.perf_counter() - t0
    store_s += checkpoint_s
    cpu_s = time.process_time() - cpu0 - prep_s  # approximate: prep is all CPU
    conn.close()
    return {"store_s": store_s, "cpu_s": cpu_s, "prep_s": prep_s, "checkpoint_s": checkpoint_s,
            "transactions": n_tx,
            "commands_per_s": events.n_commands / store_s,
            "events_per_s": events.n_events / store_s}


def state_at_group_by(conn: sqlite3.Connection, ts: int) -> State:
    return {(g, t, q): o for g, t, q, o in conn.execute(STATE_GROUP_BY, {"t": ts})}


def state_at_seek(conn: sqlite3.Connection, ts: int) -> State:
    """One correlated subquery per key, which the planner runs as one index seek."""
    return {(g, t, q): o for g, t, q, o in conn.execute(STATE_SEEK, {"t": ts})}


def state_at_seek_loop(conn: sqlite3.Connection, ts: int) -> State:
    """The same seek issued from Python once per distinct key."""
    keys = conn.execute("SELECT consumer_group, topic, queue_id FROM offsets").fetchall()
    out: State = {}
    for g, t, q in keys:
        row = conn.execute(SEEK_ONE, (g, t, q, ts)).fetchone()
        if row is not None:
            out[(g, t, q)] = row[0]
    return out


def plan(conn: sqlite3.Connection, sql: str, params: object) -> list[str]:
    """EXPLAIN QUERY PLAN details, to verify that seeks are seeks."""
    return [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def lookups(conn: sqlite3.Connection, keys: list[Key]) -> dict:
    samples = []
    stmt = LOOKUP
    for k in keys:
        t = time.perf_counter_ns()
        conn.execute(stmt, k).fetchone()
        samples.append(time.perf_counter_ns() - t)
    return percentiles_us(samples)


def compact_size(conn: sqlite3.Connection, path: Path) -> int:
    """Bytes of the database file after a truncating checkpoint and VACUUM."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return os.path.getsize(path)


def run(events: EventRows, workdir: Path, repeat: int = 3, lookups_n: int = 10_000,
        keep: bool = False) -> dict:
    """All SQLite figures for one event stream; databases live in `workdir`."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    plain_db, indexed_db = workdir / "sqlite-plain.db", workdir / "sqlite-indexed.db"
    t_mid, t_end = events.time_at(0.5), events.time_at(1.0)
    out: dict = {"events": events.n_events, "commands": events.n_commands, "T": t_mid}
    out["ingest_plain"] = ingest(events, plain_db, index=False)
    out["ingest_indexed"] = ingest(events, indexed_db, index=True)

    conn = connect(plain_db)
    out["state_at_T_group_by_s"], by_group = timings(lambda: state_at_group_by(conn, t_mid),
                                                     repeat)
    out["plan_group_by"] = plan(conn, STATE_GROUP_BY, {"t": t_mid})
    lo = t_mid - (t_end - events.time_at(0.0)) // 20
    hi = t_mid + (t_end - events.time_at(0.0)) // 20
    group = sample_keys(events, 1, seed=3)[0][0] if events.n_events else ""
    out["group_history_plain_s"], rows = timings(
        lambda: conn.execute(GROUP_HISTORY, (group, lo, hi)).fetchall(), repeat)
    out["bytes_per_event_plain"] = compact_size(conn, plain_db) / max(1, events.n_events)
    conn.close()

    conn = connect(indexed_db)
    out["state_at_T_seek_s"], by_seek = timings(lambda: state_at_seek(conn, t_mid), repeat)
    out["plan_seek"] = plan(conn, STATE_SEEK, {"t": t_mid})
    out["state_at_T_seek_loop_s"], by_loop = timings(lambda: state_at_seek_loop(conn, t_mid),
                                                     repeat)
    out["plan_seek_one"] = plan(conn, SEEK_ONE, ("g", "t", 0, t_mid))
    out["state_at_T_keys"] = len(by_seek)  # type: ignore[arg-type]
    out["state_at_T_agree"] = by_group == by_seek == by_loop
    out["group_history_s"], rows = timings(
        lambda: conn.execute(GROUP_HISTORY, (group, lo, hi)).fetchall(), repeat)
    out["group_history_rows"] = len(rows)  # type: ignore[arg-type]
    out["plan_group_history"] = plan(conn, GROUP_HISTORY, (group, lo, hi))
    keys = sample_keys(events, lookups_n)
    lat = [lookups(conn, keys) for _ in range(max(1, repeat))]
    out["lookup"] = {"p50_us": summary([x["p50_us"] for x in lat]),
                     "p99_us": summary([x["p99_us"] for x in lat]), "n": len(keys)}
    out["bytes_per_event_indexed"] = compact_size(conn, indexed_db) / max(1, events.n_events)
    conn.close()
    if not keep:
        for db in (plain_db, indexed_db):
            for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
                if p.exists():
                    p.unlink()
    return out


def state_answers(events: EventRows, workdir: Path, times: Sequence[int]) -> list[dict[str, State]]:
    """State at each of `times` by each SQLite method (tests compare them with the dict fold)."""
    db = Path(workdir) / "sqlite-answers.db"
    ingest(events, db, index=True)
    conn = connect(db)
    try:
        return [{"group_by": state_at_group_by(conn, ts), "seek": state_at_seek(conn, ts),
                 "seek_loop": state_at_seek_loop(conn, ts)} for ts in times]
    finally:
        conn.close()


__all__ = ["connect", "ingest", "plan", "run", "state_answers", "state_at_group_by",
           "state_at_seek", "state_at_seek_loop"]
