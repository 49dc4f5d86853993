"""A ledger checked against the reference model: results per line, the log, the view's tables,
the current snapshot and the state at past times, each compared with what the model says."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from tests.support.reference import EVENT_COLUMNS, INVALID, ReferenceLedger

VIEW_TABLES = ("offsets", "client_offsets", "queues", "groups")
_KEY_COLUMNS = {"offsets": 3, "client_offsets": 4, "queues": 2, "groups": 1}


def model_run(lines: Iterable[Any], *, clock_ms: int = 0,
              **kw: Any) -> tuple[ReferenceLedger, list[dict[str, Any]]]:
    """The model after `lines`, and its result per line."""
    model = ReferenceLedger(**kw)
    return model, [model.apply(line, clock_ms) for line in lines]


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    """A ledger result as the model words it: no line number, bad-input errors as `INVALID`
    (a rule's refusal keeps its wording: "commit refused: stale")."""
    out = {k: v for k, v in result.items() if k != "line"}
    error = out.get("error")
    if error is not None and not str(error).startswith("commit refused: "):
        out["error"] = INVALID
    return out


def agrees(result: dict[str, Any], want: dict[str, Any]) -> bool:
    """A ledger result says what the model's does: bad input is refused (in any words), and
    every field the model answers has the model's value (fields the ledger adds beside them,
    such as a reset's group, are not the rules' business)."""
    got = comparable(result)
    if want.get("error") == INVALID:
        return got.get("error") == INVALID
    return ("error" in got) == ("error" in want) and {k: got.get(k) for k in want} == want


def assert_results(got: list[dict[str, Any]], want: list[dict[str, Any]],
                   lines: list[Any], where: str) -> None:
    """Line by line, naming the first line whose answer differs (and the line itself)."""
    assert len(got) == len(want), (where, len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert agrees(g, w), (where, f"line {i + 1}", lines[i], g, w)


def rows(table: pa.Table) -> list[tuple]:
    """An Arrow table as tuples in column order."""
    return list(zip(*table.to_pydict().values(), strict=True)) if table.num_columns else []


def event_rows(events: pa.Table) -> list[tuple]:
    """Logged events as the model decides them (every column but `detail`)."""
    return rows(events.select(list(EVENT_COLUMNS)))


def model_event_rows(model: ReferenceLedger) -> list[tuple]:
    return [tuple(e[c] for c in EVENT_COLUMNS) for e in model.events]


def sorted_by_key(table: str, found: Iterable[tuple]) -> list[tuple]:
    return sorted(found, key=lambda r: r[:_KEY_COLUMNS[table]])


def assert_events(logged: pa.Table, model: ReferenceLedger, where: str) -> None:
    got, want = event_rows(logged), model_event_rows(model)
    for i, (g, w) in enumerate(zip(got, want, strict=False)):
        assert g == w, (where, f"event {i}", dict(zip(EVENT_COLUMNS, g, strict=True)),
                        dict(zip(EVENT_COLUMNS, w, strict=True)))
    assert len(got) == len(want), (where, f"{len(got)} events logged, the model has {len(want)}")


def view_tables(query: Any) -> dict[str, list[tuple]]:
    """The view's tables through `query(sql) -> rows`, sorted as the model sorts them."""
    return {t: sorted_by_key(t, query(f"SELECT * FROM {t}")) for t in VIEW_TABLES}


def assert_view(got: dict[str, list[tuple]], model: ReferenceLedger, where: str) -> None:
    want = model.view_rows()
    for table in VIEW_TABLES:
        assert got[table] == want[table], (where, table, got[table], want[table])


def assert_ledger_agrees(led: Any, model: ReferenceLedger, times: Iterable[int],
                         where: str) -> None:
    """The log, the view, the snapshot now and the state at each of `times` equal the model's
    (through the public API only: `log.read`, `sql`, `snapshot`, `state_at`)."""
    assert_events(led.log.read(), model, where)
    assert_view(view_tables(lambda sql: rows(led.sql(sql))), model, where)
    now = led.now_ms()
    assert led.snapshot() == model.snapshot(now), (where, "snapshot", now)
    for t in times:
        assert rows(led.state_at(ts=t)) == model.state_at(t), (where, "state_at", t)


def view_file(path: Path) -> tuple[int | None, dict[str, list[tuple]]] | None:
    """The view's DuckDB file as it is on disk, read-only (DuckDB replays its own WAL in memory
    and changes nothing): its log position (None before its first flush) and its tables; None
    when there is no file. Read before any writer opens the ledger, whose open rebuilds it."""
    if not path.exists():
        return None
    con = duckdb.connect(str(path), read_only=True)
    try:
        try:
            ((position,),) = con.execute("SELECT max(next_seq) FROM view_position").fetchall()
        except duckdb.CatalogException:  # killed before its tables were created
            return None, {t: [] for t in VIEW_TABLES}
        return position, view_tables(lambda sql: con.execute(sql).fetchall())
    finally:
        con.close()


def log_view(events: pa.Table) -> dict[str, list[tuple]]:
    """The view tables the model's fold of a logged history gives."""
    return ReferenceLedger.from_log(events.to_pylist()).view_rows()
