"""The DuckDB materialized view of the fold (DESIGN.md, View).

Tables hold the current state; only rows the fold touched since the last flush are rewritten,
in one transaction together with the log position they reflect (exactly-once catch-up, as a
pyeventsourcing projection). `events` is a temporary view over the sealed Parquet segments and
the decoded active tail, so SQL sees every event.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ledger.errors import LedgerError
from ledger.fold.events import EVENT_SCHEMA
from ledger.fold.position import PositionTable, rows_of
from ledger.fold.state import Key, QueueKey, State
from ledger.store.checkpoint import store_times
from ledger.store.positions import has_offset, key_columns, position_columns

DDL = """
CREATE TABLE IF NOT EXISTS offsets (
    consumer_group VARCHAR NOT NULL, topic VARCHAR NOT NULL, queue_id INTEGER NOT NULL,
    committed_offset BIGINT, pulled_offset BIGINT, generation INTEGER NOT NULL,
    pending BOOLEAN NOT NULL, last_client VARCHAR, last_active_ts BIGINT, last_update_ts BIGINT
);
CREATE TABLE IF NOT EXISTS client_offsets (
    consumer_group VARCHAR NOT NULL, topic VARCHAR NOT NULL, queue_id INTEGER NOT NULL,
    client_id VARCHAR NOT NULL, committed_offset BIGINT, pulled_offset BIGINT,
    generation INTEGER NOT NULL, pending BOOLEAN NOT NULL, last_active_ts BIGINT,
    last_update_ts BIGINT
);
CREATE TABLE IF NOT EXISTS queues (
    topic VARCHAR NOT NULL, queue_id INTEGER NOT NULL, min_offset BIGINT NOT NULL,
    max_offset BIGINT NOT NULL, last_update_ts BIGINT
);
CREATE TABLE IF NOT EXISTS groups (
    consumer_group VARCHAR NOT NULL, mode VARCHAR NOT NULL, initial VARCHAR NOT NULL,
    client_timeout_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS appends (
    topic VARCHAR NOT NULL, queue_id INTEGER NOT NULL, first_offset BIGINT NOT NULL,
    ts BIGINT NOT NULL, store_ts BIGINT
);
-- null store_ts: unknown (an importer's bound); files written before that allowed it
ALTER TABLE appends ALTER COLUMN store_ts DROP NOT NULL;
CREATE TABLE IF NOT EXISTS view_position (next_seq BIGINT NOT NULL);
"""
#: The views over the tables (also created in the read-only SQL sandbox over copies of them).
VIEWS_DDL = """
CREATE OR REPLACE VIEW pending_resets AS
    SELECT consumer_group, topic, queue_id, NULL::VARCHAR AS client_id, generation
    FROM offsets WHERE pending
    UNION ALL
    SELECT consumer_group, topic, queue_id, client_id, generation FROM client_offsets WHERE pending;
CREATE OR REPLACE VIEW progress AS
WITH clock AS (
    SELECT coalesce(TRY_CAST(getvariable('ledger_now_ms') AS BIGINT), epoch_ms(now())) AS now_ms
), broadcast AS (
    SELECT c.consumer_group, c.topic, c.queue_id,
           min(c.committed_offset) FILTER (
               WHERE (SELECT now_ms FROM clock) - c.last_active_ts
                     <= coalesce(g.client_timeout_ms, 120000)) AS live_committed,
           min(c.pulled_offset) FILTER (
               WHERE (SELECT now_ms FROM clock) - c.last_active_ts
                     <= coalesce(g.client_timeout_ms, 120000)) AS live_pulled,
           max(c.generation) AS generation, max(c.last_update_ts) AS last_update_ts
    FROM client_offsets c JOIN groups g USING (consumer_group)
    WHERE c.committed_offset IS NOT NULL AND g.mode = 'broadcast'
    GROUP BY ALL
), keyed AS (
    SELECT consumer_group, topic, queue_id FROM offsets WHERE committed_offset IS NOT NULL
    UNION
    SELECT consumer_group, topic, queue_id FROM broadcast
), merged AS (
    SELECT k.consumer_group, k.topic, k.queue_id,
           CASE WHEN b.live_committed IS NOT NULL THEN b.live_committed
                ELSE o.committed_offset END AS committed_offset,
           CASE WHEN b.live_committed IS NOT NULL THEN b.live_pulled
                ELSE o.pulled_offset END AS pulled_offset,
           coalesce(o.generation, b.generation) AS generation,
           greatest(o.last_update_ts, b.last_update_ts) AS last_update_ts
    FROM keyed k
    LEFT JOIN offsets o USING (consumer_group, topic, queue_id)
    LEFT JOIN broadcast b USING (consumer_group, topic, queue_id)
)
SELECT m.consumer_group, m.topic, m.queue_id, q.min_offset, q.max_offset,
       m.committed_offset,
       greatest(coalesce(m.pulled_offset, m.committed_offset), m.committed_offset)
           AS pulled_offset,
       -- null while the queue's bounds are unknown (DuckDB's greatest skips a null)
       CASE WHEN q.max_offset IS NOT NULL THEN greatest(q.max_offset - m.committed_offset, 0)
       END AS lag,
       -- time lag: how long the message at the committed offset has waited (its append's store
       -- time; the append holding an offset is the last one starting at or before it)
       CASE WHEN q.max_offset <= m.committed_offset THEN 0
            ELSE (SELECT now_ms FROM clock) - a.store_ts END AS lag_ms,
       greatest(coalesce(m.pulled_offset, m.committed_offset) - m.committed_offset, 0)
           AS inflight,
       CASE WHEN q.max_offset IS NOT NULL
            THEN greatest(q.max_offset - greatest(coalesce(m.pulled_offset, m.committed_offset),
                                                  m.committed_offset), 0) END AS ready,
       m.generation,
       m.last_update_ts,
       m.committed_offset < q.min_offset AS behind_retention
FROM merged m LEFT JOIN queues q USING (topic, queue_id)
ASOF LEFT JOIN appends a
    ON a.topic = m.topic AND a.queue_id = m.queue_id AND a.first_offset <= m.committed_offset
WHERE m.committed_offset IS NOT NULL;
"""

VIEW_TABLES = ("offsets", "client_offsets", "queues", "groups", "appends")

_OFFSETS_SCHEMA = pa.schema([
    ("consumer_group", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("committed_offset", pa.int64()), ("pulled_offset", pa.int64()),
    ("generation", pa.int32()), ("pending", pa.bool_()), ("last_client", pa.string()),
    ("last_active_ts", pa.int64()), ("last_update_ts", pa.int64()),
])
_CLIENTS_SCHEMA = pa.schema([
    ("consumer_group", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("client_id", pa.string()), ("committed_offset", pa.int64()), ("pulled_offset", pa.int64()),
    ("generation", pa.int32()), ("pending", pa.bool_()), ("last_active_ts", pa.int64()),
    ("last_update_ts", pa.int64()),
])
_QUEUES_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queue_id", pa.int32()), ("min_offset", pa.int64()),
    ("max_offset", pa.int64()), ("last_update_ts", pa.int64()),
])
_APPENDS_SCHEMA = pa.schema([
    ("topic", pa.string()), ("queue_id", pa.int32()), ("first_offset", pa.int64()),
    ("ts", pa.int64()), ("store_ts", pa.int64()),
])
_GROUPS_SCHEMA = pa.schema([
    ("consumer_group", pa.string()), ("mode", pa.string()), ("initial", pa.string()),
    ("client_timeout_ms", pa.int64()),
])

# The derived prev_offset of commits and pulls, for events appended before it was stored: the
# previous value of the same position of the same key (a broadcast client is its own key).
# expire/delete set it to null: -1 stands for that null inside the window so IGNORE NULLS
# skips only events of other kinds.
EVENTS_SELECT = """
WITH raw AS ({source}),
pre AS (
    SELECT r.*, coalesce(g.mode = 'broadcast' AND r.client_id IS NOT NULL, false) AS per_client
    FROM raw r LEFT JOIN groups g USING (consumer_group)
    {prefilter}
)
SELECT seq, ts, kind, consumer_group, topic, queue_id, "offset",
       CASE WHEN prev_offset IS NOT NULL OR kind NOT IN ('commit', 'pull') THEN prev_offset
            WHEN kind = 'commit' THEN nullif(last_value(
                CASE WHEN kind IN ('initial', 'commit', 'reset', 'sync', 'clamp', 'expire', 'delete')
                     THEN coalesce("offset", -1) END IGNORE NULLS) OVER w, -1)
            ELSE nullif(last_value(
                CASE WHEN kind IN ('pull', 'initial', 'reset', 'expire', 'delete')
                     THEN coalesce("offset", -1) END IGNORE NULLS) OVER w, -1)
       END AS prev_offset,
       generation, client_id, coalesce(actor, client_id) AS actor, store_ts, detail
FROM pre
WINDOW w AS (
    PARTITION BY consumer_group, topic, queue_id, CASE WHEN per_client THEN client_id END
    ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
"""
# Events that store their prev_offset: read as they are (a filter reaches the Parquet scan).
STORED_SELECT = """
SELECT seq, ts, kind, consumer_group, topic, queue_id, "offset", prev_offset, generation,
       client_id, coalesce(actor, client_id) AS actor, store_ts, detail
FROM ({source}) stored {where}
"""


def events_select(source: str, prefilter: str = "", stored_from: int | None = 0) -> str:
    """The events of `source` as the `events` view shows them. Events from seq `stored_from`
    on store their prev_offset; before it (all of them when None: a directory no writer of
    this version opened) it is derived from the events before it. `prefilter` (a condition
    on key columns or an upper ts bound) may only drop whole keys or later events, never an
    event's predecessor."""
    if stored_from == 0:
        return STORED_SELECT.format(source=source,
                                    where=f"WHERE {prefilter}" if prefilter else "")
    older = source if stored_from is None else (
        f"SELECT * FROM ({source}) older WHERE seq < {int(stored_from)}")
    derived = EVENTS_SELECT.format(source=older,
                                   prefilter=f"WHERE {prefilter}" if prefilter else "")
    if stored_from is None:
        return derived
    newer = " AND ".join([f"seq >= {int(stored_from)}", *([prefilter] if prefilter else [])])
    return (f"SELECT * FROM ({derived}) UNION ALL "
            + STORED_SELECT.format(source=source, where=f"WHERE {newer}"))


def _in_list(items: Sequence[str]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in items) + "]"


def segments_source(paths: Sequence[Path], tail_name: str | None) -> str:
    """A SELECT over the sealed segments (pruned by DuckDB's Parquet statistics) and the tail."""
    cols = ", ".join(f'"{n}"' for n in EVENT_SCHEMA.names)
    parts = []
    if paths:
        parts.append(f"SELECT {cols} FROM read_parquet({_in_list([str(p) for p in paths])})")
    if tail_name:
        parts.append(f"SELECT {cols} FROM {tail_name}")
    if not parts:
        types = ", ".join(
            f'NULL::{_duck_type(f.type)} AS "{f.name}"' for f in EVENT_SCHEMA
        )
        parts.append(f"SELECT {types} WHERE false")
    return " UNION ALL ".join(parts)


def _duck_type(t: pa.DataType) -> str:
    return {pa.int64(): "BIGINT", pa.int32(): "INTEGER", pa.string(): "VARCHAR"}[t]


def _columns(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    """A few rows (queues, groups) to an Arrow table column by column."""
    if not rows:
        return schema.empty_table()
    cols = list(zip(*rows, strict=True))
    return pa.Table.from_arrays(
        [pa.array(c, f.type) for c, f in zip(cols, schema, strict=True)], schema=schema)


def _key_schema(schema: pa.Schema, n: int) -> pa.Schema:
    return pa.schema(list(schema)[:n])


_VIEW_FIELDS = {"committed": "committed_offset", "pulled": "pulled_offset"}


def _position_table(table: PositionTable, rows: np.ndarray | None, key_arrays: dict[str, pa.Array],
                    schema: pa.Schema, clients: list[str] | None = None) -> pa.Table:
    """Rows of `offsets` (or `client_offsets`) a column at a time, those of `rows` of `table`
    (None: all; `key_arrays`: their keys) that the view shows (an offset committed or pulled,
    or a reset pending)."""
    if not len(key_arrays["queue_id"]):
        return schema.empty_table()
    fields = [f.name for f in schema][3 + (clients is not None):]
    values = position_columns(table, rows, [
        next((k for k, v in _VIEW_FIELDS.items() if v == f), f) for f in fields])
    columns = {**key_arrays, **{_VIEW_FIELDS.get(k, k): v for k, v in values.items()}}
    if clients is not None:
        columns["client_id"] = pa.array(clients, pa.string())
    out = pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)
    return out.filter(has_offset(values))


def _clients_table(state: State, keys: Iterable[Key]) -> pa.Table:
    """The `client_offsets` rows of `keys` (broadcast groups' clients)."""
    rows = [(key, client, p) for key in keys for client, p in state.clients.get(key, {}).items()]
    return _position_table(state.client_table, rows_of([r[2] for r in rows]),
                           key_columns([r[0] for r in rows]), _CLIENTS_SCHEMA,
                           [r[1] for r in rows])


def _touched_rows(state: State, keys: set[Key], rows: set[int]) -> tuple[np.ndarray, list[Key]]:
    """The rows of `state.table` of the touched `keys` and `rows`, and the touched keys that
    have none (a broadcast client's, or a key only a delete touched)."""
    found = [state.positions.get(k) for k in keys]
    rows = rows | {p.row for p in found if p is not None}
    without = [k for k, p in zip(keys, found, strict=True) if p is None]
    return np.fromiter(rows, np.int64, len(rows)), without


def _touched_client_keys(state: State, at: np.ndarray, without: list[Key]) -> list[Key]:
    """The touched keys that broadcast clients hold offsets of (`state.clients`), `without`'s
    first, then in the order of the rows `at`. Found from the few broadcast keys' rows, not by
    naming every touched row's key: a flush of keys10x's 156,194 rows named each one in Python
    (75 ms at an apply's close) to keep a few dozen."""
    if not state.clients:
        return []
    client_rows = [p.row for p in map(state.positions.get, state.clients) if p is not None]
    named = at[np.isin(at, np.asarray(client_rows, np.int64))].tolist()
    return [k for k in without if k in state.clients] + [state.table.key_of(r) for r in named]


@dataclass
class _Changes:
    """One flush, taken from the state at one log position: per table the rows to write and
    the keys whose rows they replace (None: all rows), the appends to add, the position."""

    replaced: list[tuple[str, pa.Table, pa.Table | None, tuple[str, ...]]]
    all_appends: bool
    new_appends: pa.Table
    next_seq: int
    held: dict[QueueKey, int]  # appends per queue the table holds once written
    # the state's dirty sets: keys, rows, queues, groups
    taken: tuple[set[Key], set[int], set[QueueKey], set[str]] | None = None

    def give_back(self, state: State) -> None:
        """Not written: its keys are dirty again, for the next flush."""
        if self.taken is not None:
            state.dirty_keys |= self.taken[0]
            state.dirty_rows |= self.taken[1]
            state.dirty_queues |= self.taken[2]
            state.dirty_groups |= self.taken[3]


class View:
    """The DuckDB connection holding the view tables; file-backed or in memory (readers)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        con.execute("SET threads TO 2")
        # sealed segments are immutable files never renamed over: footers read once
        con.execute("SET parquet_metadata_cache = true")
        had_appends = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'appends'"
        ).fetchall()[0][0]
        con.execute(DDL)
        con.execute(VIEWS_DDL)
        if not had_appends:  # a view written before appends were kept: rewritten at open
            con.execute("DELETE FROM view_position")
        # the position written last (only this connection writes the view): flushes of a
        # clean state then cost no query
        self._position: int | None = None
        # appends are only ever added: per queue, how many the table holds
        self._appends_held: dict[QueueKey, int] = {
            (t, q): n for t, q, n in con.execute(
                "SELECT topic, queue_id, count(*) FROM appends GROUP BY ALL").fetchall()}
        # the background flush: its thread and connection (made on first use), the one in flight
        self._flusher: ThreadPoolExecutor | None = None
        self._flusher_con: duckdb.DuckDBPyConnection | None = None
        self._in_flight: tuple[_Changes, Future[None]] | None = None

    @classmethod
    def open(cls, path: Path | None) -> View:
        try:
            return cls(duckdb.connect(str(path) if path is not None else ":memory:"))
        except duckdb.IOException as e:  # another process holds the file (DuckDB's lock)
            text = " ".join(str(e).split())
            holder = re.search(r"\(PID \d+\)", text)
            raise LedgerError(
                f"cannot open the view {path}: {text[:holder.end()] if holder else text[:200]}; "
                "close the other process's connection to it") from None

    def position(self) -> int | None:
        if self._position is None:
            rows = self.con.execute("SELECT max(next_seq) FROM view_position").fetchall()
            self._position = rows[0][0] if rows else None
        return self._position

    def set_clock(self, now_ms: int) -> None:
        self.con.execute(f"SET VARIABLE ledger_now_ms = {int(now_ms)}")

    def write_full(self, state: State, next_seq: int) -> None:
        """Replace every table with the state (rebuild, or catch-up after a gap)."""
        with contextlib.suppress(Exception):  # what it failed to write, this writes
            self.wait_flushed(state)
        self._commit(self.con, self._changes(state, None, None, None, next_seq))
        state.clear_dirty()

    def flush(self, state: State, next_seq: int) -> None:
        """Write the rows touched since the last flush plus the position, in one transaction
        (after the flush in flight, whose failure is raised here, its rows dirty again)."""
        self.wait_flushed(state)
        changes = self._take_dirty(state, next_seq)
        if changes is None:
            return
        try:
            self._commit(self.con, changes)
        except BaseException:
            changes.give_back(state)
            raise

    def flush_in_background(self, state: State, next_seq: int) -> None:
        """As `flush`, but only the rows are taken here (as Arrow, from the state as it is now);
        the DuckDB transaction runs on the view's own thread and connection, so a writer goes
        on appending meanwhile. At most one is in flight: this waits for the one before."""
        self.wait_flushed(state)
        changes = self._take_dirty(state, next_seq)
        if changes is None:
            return
        if self._flusher is None:
            self._flusher = ThreadPoolExecutor(1, thread_name_prefix="view-flush")
            self._flusher_con = self.con.cursor()
        con = self._flusher_con
        self._in_flight = (changes, self._flusher.submit(self._commit, con, changes))

    def wait_flushed(self, state: State) -> None:
        """Wait for the background flush in flight, if any; if it failed, its rows are dirty
        again in `state` and its error is raised."""
        if self._in_flight is None:
            return
        changes, done = self._in_flight
        self._in_flight = None
        try:
            done.result()
        except BaseException:
            changes.give_back(state)
            raise

    def _take_dirty(self, state: State, next_seq: int) -> _Changes | None:
        """The rows touched since the last flush (taken out of the state's dirty sets), or
        None when there are none and the view is at `next_seq` already."""
        if not state.dirty() and self.position() == next_seq:
            return None
        taken = (state.dirty_keys, state.dirty_rows, state.dirty_queues, state.dirty_groups)
        state.clear_dirty()
        return self._changes(state, taken[0], taken[2], taken[3], next_seq, rows=taken[1],
                             taken=taken)

    def _changes(
        self, state: State, keys: set[Key] | None, queues: set[QueueKey] | None,
        groups: set[str] | None, next_seq: int, *, rows: set[int] | None = None,
        taken: tuple[set[Key], set[int], set[QueueKey], set[str]] | None = None,
    ) -> _Changes:
        """What a flush writes, as Arrow: the rows of `keys` and of the state table's `rows`,
        `queues` and `groups` (None: all of them, replacing the tables) and the appends the
        table lacks. `taken`: the state's dirty sets these were taken out of (given back if the
        write fails)."""
        table = state.table
        if keys is None:
            offsets = _position_table(table, None, table.key_arrays(), _OFFSETS_SCHEMA)
            touched = None
            client_keys: Iterable[Key] = state.clients.keys()
        else:
            at, without = _touched_rows(state, keys, rows or set())
            key_arrays = table.key_arrays(at)
            offsets = _position_table(table, at, key_arrays, _OFFSETS_SCHEMA)
            touched = pa.concat_tables([pa.table(key_arrays), pa.table(key_columns(without))])
            client_keys = _touched_client_keys(state, at, without)
        q_iter = list(state.queues.keys() if queues is None else queues)
        q_rows = [(*qk, state.queues[qk].min_offset, state.queues[qk].max_offset,
                   state.queues[qk].last_update_ts) for qk in q_iter if qk in state.queues]
        g_iter = state.groups.keys() if groups is None else groups
        g_rows = [(g, state.groups[g].mode, state.groups[g].initial,
                   state.groups[g].client_timeout_ms) for g in g_iter if g in state.groups]
        held = {} if queues is None else self._appends_held
        key_cols = ("consumer_group", "topic", "queue_id")
        return _Changes(
            replaced=[
                ("offsets", offsets, touched, key_cols),
                ("client_offsets", _clients_table(state, client_keys), touched, key_cols),
                ("queues", _columns(q_rows, _QUEUES_SCHEMA), None if queues is None else _columns(
                    [(*q,) for q in queues], _key_schema(_QUEUES_SCHEMA, 2)), ("topic", "queue_id")),
                ("groups", _columns(g_rows, _GROUPS_SCHEMA), None if groups is None else _columns(
                    [(g,) for g in groups], _key_schema(_GROUPS_SCHEMA, 1)), ("consumer_group",)),
            ],
            all_appends=queues is None, new_appends=_new_appends(state, q_iter, held),
            next_seq=next_seq,
            held={**held, **{qk: len(state.queues[qk].append_offset)
                             for qk in q_iter if qk in state.queues}},
            taken=taken)

    def _commit(self, con: duckdb.DuckDBPyConnection, changes: _Changes) -> None:
        """`changes` in one transaction on `con`, with the position they reflect."""
        con.execute("BEGIN TRANSACTION")
        try:
            for table, rows, keys, key_cols in changes.replaced:
                self._replace(con, table, rows, keys, key_cols)
            if changes.all_appends:
                con.execute("DELETE FROM appends")
            if changes.new_appends.num_rows:
                con.register("_appends", changes.new_appends)
                con.execute("INSERT INTO appends SELECT * FROM _appends")
                con.unregister("_appends")
            con.execute("DELETE FROM view_position")
            con.execute("INSERT INTO view_position VALUES (?)", [changes.next_seq])
            con.execute("COMMIT")
        except BaseException:
            self._position = None
            con.execute("ROLLBACK")
            raise
        self._position = changes.next_seq
        self._appends_held = changes.held

    @staticmethod
    def _replace(
        con: duckdb.DuckDBPyConnection, table: str, rows: pa.Table, keys: pa.Table | None,
        key_cols: tuple[str, ...],
    ) -> None:
        """Delete the rows of `keys` (all rows when None), insert `rows`."""
        if keys is None:
            con.execute(f"DELETE FROM {table}")
        elif keys.num_rows:
            con.register("_touched", keys)
            cond = " AND ".join(f"{table}.{c} = _touched.{c}" for c in key_cols)
            con.execute(f"DELETE FROM {table} USING _touched WHERE {cond}")
            con.unregister("_touched")
        if rows.num_rows:
            con.register("_rows", rows)
            con.execute(f"INSERT INTO {table} SELECT * FROM _rows")
            con.unregister("_rows")

    def refresh_events(self, segment_paths: Sequence[Path], tail: pa.Table,
                       stored_from: int | None) -> None:
        """Point the `events` view at the current segments and tail (and `events_raw`, the
        rows as stored, at them too); prev_offset is derived before seq `stored_from` only."""
        self.con.register("events_tail", tail)
        source = segments_source(segment_paths, "events_tail")
        self.con.execute("CREATE OR REPLACE TEMP VIEW events AS "
                         + events_select(source, stored_from=stored_from))
        self.con.execute("CREATE OR REPLACE TEMP VIEW events_raw AS " + source)

    def tables(self) -> dict[str, pa.Table]:
        """The view's tables as Arrow (what the SQL sandbox queries)."""
        return {name: arrow_result(self.con.execute(f"SELECT * FROM {name}"))
                for name in VIEW_TABLES}

    def close(self) -> None:
        """Close the connections (a background flush in flight is waited for first)."""
        try:
            if self._in_flight is not None:
                self._in_flight[1].exception()
        finally:
            if self._flusher is not None:
                self._flusher.shutdown()
            if self._flusher_con is not None:
                self._flusher_con.close()
            self.con.close()


def stored_position(path: Path) -> int | None:
    """The log position the view file at `path` records (None: no file, or never written), read
    in a short read-only connection: a writer opening the log asks it before the view is open."""
    if not path.exists():
        return None
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as e:
        raise LedgerError(f"cannot read the view {path}: {' '.join(str(e).split())[:200]}") from None
    try:
        row = con.execute("SELECT max(next_seq) FROM view_position").fetchone()
    except duckdb.CatalogException:  # a view file without the table: never written
        return None
    finally:
        con.close()
    return row[0] if row else None


def _new_appends(state: State, queues: Any, held: dict[QueueKey, int]) -> pa.Table:
    """The appends of `queues` the table does not hold yet, as Arrow (no per-row tuples)."""
    parts: dict[str, list] = {name: [] for name in _APPENDS_SCHEMA.names}
    for qk in queues:
        q = state.queues.get(qk)
        if q is None:
            continue
        start = held.get(qk, 0)
        n = len(q.append_offset) - start
        if n <= 0:
            continue
        parts["topic"].append(pa.array([qk[0]] * n, pa.string()))
        parts["queue_id"].append(pa.array([qk[1]] * n, pa.int32()))
        parts["first_offset"].append(pa.array(q.append_offset[start:], pa.int64()))
        parts["ts"].append(pa.array(q.append_ts[start:], pa.int64()))
        parts["store_ts"].append(store_times(q.append_store_ts[start:]))
    return pa.Table.from_arrays(
        [pa.chunked_array(parts[f.name], f.type) for f in _APPENDS_SCHEMA], schema=_APPENDS_SCHEMA)


def arrow_result(cursor: Any) -> pa.Table:
    """A DuckDB result as Arrow: DuckDB 2 renamed `fetch_arrow_table` to `to_arrow_table` (and
    warns about the copy a DB-API result makes, which these small results can afford)."""
    import warnings

    fetch = getattr(cursor, "to_arrow_table", None) or cursor.fetch_arrow_table
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return fetch()
