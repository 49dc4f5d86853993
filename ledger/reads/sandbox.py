"""Read-only SQL that the engine itself keeps read-only (not a text check): every query runs in
a fresh in-memory DuckDB over Arrow copies of the view's tables and an Arrow dataset of the
log's segments, with file system access, extension loading and configuration changes
disabled. Nothing a query does can reach the view file, the log or the machine's files, and
only one SELECT (or EXPLAIN) statement is accepted, told apart from a syntax error. A query
runs apart from the ledger that prepared it, under a time limit, and can be interrupted.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ledger.errors import InvalidInput, QueryStopped
from ledger.fold.events import EVENT_SCHEMA
from ledger.reads.lag_series import install_lag_series
from ledger.reads.timeline import EMPTY_CHECKPOINT
from ledger.store.view import VIEWS_DDL, View, arrow_result, events_select

READ_STATEMENTS = ("SELECT", "EXPLAIN")
LOCKED_CONFIG = {"enable_external_access": False, "autoinstall_known_extensions": False,
                 "autoload_known_extensions": False, "allow_community_extensions": False}


def statement_kind(con: duckdb.DuckDBPyConnection, query: str) -> str:
    """The one statement's type; InvalidInput for a syntax error, several statements or a
    statement that is not a read, each with its own message."""
    try:
        statements = con.extract_statements(query)
    except duckdb.ParserException as e:
        raise InvalidInput(f"sql syntax error: {_first_line(e)}") from None
    if len(statements) != 1:
        raise InvalidInput(f"sql must be one read-only statement, got {len(statements)}")
    kind = statements[0].type.name
    if kind not in READ_STATEMENTS:
        name = statement_name(statements[0].query, kind)
        article = "an" if name[0] in "AEIOU" else "a"
        raise InvalidInput(f"sql must be one read-only query (SELECT ...), not {article} {name} "
                           "statement")
    return kind


_COMMENTS = re.compile(r"\s*(?:--[^\n]*(?:\n|$)|/\*.*?\*/)", re.S)
_KEYWORDS = re.compile(r"\s*((?:FORCE\s+)?[A-Za-z]+)", re.I)


def statement_name(text: str, kind: str) -> str:
    """What the user wrote (`INSTALL`, `FORCE INSTALL`, `CHECKPOINT`), not DuckDB's statement
    type (both INSTALL and LOAD are a LOAD, CHECKPOINT a CALL): the words leading the
    statement, comments skipped; the type when there are none or they are a WITH."""
    at = 0
    while (m := _COMMENTS.match(text, at)) is not None and m.end() > at:
        at = m.end()
    words = _KEYWORDS.match(text, at)
    name = " ".join(words.group(1).upper().split()) if words else kind
    return kind if name == "WITH" else name  # WITH ... DELETE: the type says what it does


class SqlQuery:
    """One query in its sandbox, ready to run: everything it reads is copied or listed at
    `prepare_read_only`, so it runs apart from the ledger that prepared it (a server's other
    reads do not wait for it). `run` stops it after `timeout_s`; `interrupt` stops it from
    any thread (its client left, the server stops)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, query: str) -> None:
        self._con = con
        self.query = query
        self._stopped_because: str | None = None
        self._lock = threading.Lock()

    def run(self, timeout_s: float | None = None) -> pa.Table:
        """The answer; InvalidInput for an error of the query, QueryStopped when it ran past
        `timeout_s` seconds or was interrupted. Closes the sandbox."""
        timer = None
        if timeout_s is not None:
            timer = threading.Timer(timeout_s, self.interrupt,
                                    (f"it ran past the time limit of {timeout_s:g} s",))
            timer.daemon = True
            timer.start()
        try:
            if self._stopped_because is not None:
                raise QueryStopped(f"sql stopped: {self._stopped_because}")
            return arrow_result(self._con.execute(self.query))
        except duckdb.InterruptException:
            raise QueryStopped(f"sql stopped: {self._stopped_because or 'interrupted'}"
                               ) from None
        except duckdb.Error as e:
            raise InvalidInput(f"sql error: {_first_line(e)}") from None
        finally:
            if timer is not None:
                timer.cancel()
            self.close()

    def interrupt(self, because: str = "interrupted") -> None:
        """Stop the query (from any thread); the first reason given is the one reported."""
        with self._lock:
            if self._stopped_because is None:
                self._stopped_because = because
            if self._con is not None:
                self._con.interrupt()

    def close(self) -> None:
        with self._lock:
            if self._con is not None:
                self._con.close()
                self._con = None  # type: ignore[assignment]


def prepare_read_only(view: View, segments: Sequence[Path], tail: pa.Table,
                      checkpoint: Path | None, query: str) -> SqlQuery:
    """`query` over copies of the view's tables, its views (progress, pending_resets), the
    events of `segments` plus `tail` (`events`, and `events_raw` without the derived
    prev_offset) and the `lag_series` macro over them and `checkpoint` (the state where the
    log starts, None at seq 0), in a sandbox of its own, not yet run."""
    con = duckdb.connect(":memory:", config=dict(LOCKED_CONFIG))
    try:
        statement_kind(con, query)
        con.execute("SET threads TO 2")
        for name, table in view.tables().items():
            con.register(name, table)
        clock = view.con.execute("SELECT getvariable('ledger_now_ms')").fetchone()
        if clock and clock[0] is not None:
            con.execute(f"SET VARIABLE ledger_now_ms = {int(clock[0])}")
        con.execute(VIEWS_DDL)
        con.register("events_segments", ds.dataset([str(p) for p in segments], schema=EVENT_SCHEMA,
                                                   format="parquet"))
        con.register("events_tail", tail)
        cols = ", ".join(f'"{n}"' for n in EVENT_SCHEMA.names)
        source = (f"SELECT {cols} FROM events_segments UNION ALL SELECT {cols} FROM events_tail")
        con.execute("CREATE VIEW events AS " + events_select(source))
        con.execute("CREATE VIEW events_raw AS " + source)
        start = "SELECT * FROM " + (_registered(con, "lag_series_start", pq.read_table(checkpoint))
                                    if checkpoint is not None else EMPTY_CHECKPOINT)
        install_lag_series(con, start)
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return SqlQuery(con, query)


def run_over_tables(tables: dict[str, pa.Table], query: str,
                    timeout_s: float | None = None) -> pa.Table:
    """`query` (one read, checked as above) over `tables` only, in the same locked engine and
    under the same time limit: how a cluster runs SQL over the union of its shards' tables."""
    con = duckdb.connect(":memory:", config=dict(LOCKED_CONFIG))
    try:
        statement_kind(con, query)
        con.execute("SET threads TO 2")
        for name, table in tables.items():
            con.register(name, table)
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return SqlQuery(con, query).run(timeout_s)


def _registered(con: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> str:
    con.register(name, table)
    return name


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
