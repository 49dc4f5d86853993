"""`python -m bench.read_scaling`: reads that name a group or a key, at 1M, 10M (and 30M) events,
next to SQLite's indexed answer (issue 22).

Why: the auditors' question ("who moved group G's offsets in this hour") must cost what its
answer costs, not what the ledger holds. Each size is the pinned workload (bench/workload.py,
200 groups x 10 topics x 8 queues) with its clock stretched so that 1M events make a day (the
issue's shape), applied with `apply_arrow` into segments of 1M events; the same events, read
back from the ledger's log, go into SQLite with indexes on (consumer_group, ts) and
(consumer_group, topic, queue_id, ts). Both answer, in this process, interleaved, best and
median of `--repeat`:

- one group's last hour, one group's hour of day 1 (`history --group G --since --until`);
- one key's newest 100 events (`history --group G --topic T --queue Q --limit 100`);
- one group's state an hour before the end (`at T --group G`; SQLite: one seek per key);
- one group's lag then (`lag --group G --at T`; SQLite: per key the committed offset, its last
  10 commits and MaxOffset at T, the rows the evaluation reads).

Each question is also asked of a second reader that keeps no decoded row group
(storage/decoded.py with a budget of 0), so that every read decodes what it reads: the
"decoding each read" column, the cost of a row group not read lately.

With `--http`, the group's last hour through `offset-ledger serve` against a plain HTTP server
over the SQLite index (bench/baselines/sqlite_history_server.py, the same granian stack and the
same JSON), wrk at 1 and 16 connections. Built ledgers and SQLite files are cached under
bench/.cache, keyed by the workload's parameters and `CACHE_VERSION`. Writes
bench/results/read-scaling-latest.{json,md}.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

import storage.decoded
from bench import workload

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(__file__).resolve().parent / ".cache"
RESULTS = Path(__file__).resolve().parent / "results"
#: Bump when a cached ledger or SQLite file would be built differently.
CACHE_VERSION = 1
SEED = 7
#: 1M commands of the pinned workload span 98.4 s of ledger time; stretched, about a day.
STRETCH = 878
DAY_MS = 86_400_000
HOUR_MS = 3_600_000
SEGMENT_EVENTS = 1_000_000
APPLY_ROWS = 131_072
GROUP = "GID_app-101"
KEY = (GROUP, "topic-03", 5)
SIZES = {"default": [1_000_000, 10_000_000], "full": [1_000_000, 10_000_000, 30_000_000],
         "smoke": [200_000]}
SETTING_KINDS = ("initial", "commit", "reset", "sync", "clamp", "expire", "delete")


def log(msg: str) -> None:
    print(f"[read-scaling {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- building


def stretched(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with its times (ts, store_time, to_datetime) stretched around T0."""
    for name in ("ts", "store_time", "to_datetime"):
        i = batch.schema.get_field_index(name)
        col = batch.column(i)
        moved = pc.add(pc.multiply(pc.subtract(col, workload.T0_MS), STRETCH), workload.T0_MS)
        batch = batch.set_column(i, batch.schema.field(i), moved)
    return batch


def command_batches(n_commands: int) -> Iterator[pa.Table]:
    """The pinned stream of `n_commands`, stretched, in tables of about APPLY_ROWS commands."""
    shape = workload.Shape()
    dicts = workload._dictionaries(shape)
    pending: list[pa.RecordBatch] = []
    rows = 0
    for chunk in workload.chunks(n_commands, SEED, shape):
        pending.append(stretched(workload.chunk_arrow(chunk, shape, dicts)))
        rows += len(chunk)
        if rows >= APPLY_ROWS:
            yield pa.Table.from_batches(pending)
            pending, rows = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


def cache_dir(n_commands: int) -> Path:
    return CACHE / (f"read-scaling-n{n_commands}-s{SEED}-x{STRETCH}-seg{SEGMENT_EVENTS}"
                    f"-v{CACHE_VERSION}")


def build(n_commands: int) -> Path:
    """The ledger and SQLite files of a size, built once (a half-built one is rebuilt)."""
    d = cache_dir(n_commands)
    if (d / "done.json").exists():
        return d
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    from bench.phases import FixedClock
    from ledger import Ledger

    log(f"building the {n_commands:,}-command ledger in {d}")
    started = time.perf_counter()
    with Ledger.open(d / "ledger", backfill=True, clock=FixedClock(), durability="none",
                     segment_events_max=SEGMENT_EVENTS) as led:
        for table in command_batches(n_commands):
            led.apply_arrow(table)
        events = led.log.next_seq
        first_ts = led.log.read(seq_lt=1, columns=["ts"]).column("ts")[0].as_py()
        last_ts = led.state.last_ts
    apply_s = time.perf_counter() - started
    log(f"{events:,} events in {apply_s:.0f} s; SQLite ...")
    started = time.perf_counter()
    sqlite_from_log(d / "ledger", d / "events.sqlite")
    facts = {"commands": n_commands, "events": events, "first_ts": first_ts, "last_ts": last_ts,
             "apply_s": apply_s, "sqlite_s": time.perf_counter() - started}
    (d / "done.json").write_text(json.dumps(facts))
    return d


SQLITE_SCHEMA = """
CREATE TABLE events (seq INTEGER PRIMARY KEY, ts INTEGER NOT NULL, kind TEXT NOT NULL,
    consumer_group TEXT, topic TEXT, queue_id INTEGER, "offset" INTEGER, prev_offset INTEGER,
    generation INTEGER, client_id TEXT, actor TEXT, store_ts INTEGER, detail TEXT);
"""
SQLITE_INDEXES = """
CREATE INDEX events_group_ts ON events (consumer_group, ts);
CREATE INDEX events_key_ts ON events (consumer_group, topic, queue_id, ts);
CREATE INDEX events_queue_ts ON events (topic, queue_id, kind, ts);
"""


def sqlite_from_log(ledger_root: Path, path: Path) -> None:
    """The ledger's own events (its log, read back) in SQLite, then the indexes."""
    from ledger import Ledger

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    conn.executescript(SQLITE_SCHEMA)
    with Ledger.open(ledger_root, readonly=True) as led:
        end = led.log.next_seq
        for lo in range(0, end, 500_000):
            t = led.log.read(seq_gte=lo, seq_lt=min(end, lo + 500_000))
            t = t.set_column(t.schema.get_field_index("actor"), "actor",
                             pc.coalesce(t.column("actor"), t.column("client_id")))
            rows = zip(*(t.column(n).to_pylist() for n in t.column_names), strict=True)
            conn.execute("BEGIN")
            conn.executemany(f"INSERT INTO events VALUES ({', '.join('?' * t.num_columns)})", rows)
            conn.execute("COMMIT")
    conn.executescript(SQLITE_INDEXES)
    conn.execute("ANALYZE")
    conn.close()


# ----------------------------------------------------------------------------- the questions


def windows(facts: dict[str, Any]) -> dict[str, Any]:
    """The questions' parameters for a built size."""
    end = facts["last_ts"]
    day1 = facts["first_ts"] + 12 * HOUR_MS
    return {"last_hour": (end - HOUR_MS, end), "day1_hour": (day1, day1 + HOUR_MS),
            "at": end - HOUR_MS}


def ledger_questions(led: Any, w: dict[str, Any]) -> dict[str, Callable[[], int]]:
    """Each question through the ledger's public API: the rows (or keys) it answers."""
    g, t, q = KEY
    return {
        "one group, the last hour": lambda: led.history(
            group=GROUP, since_ms=w["last_hour"][0], until_ms=w["last_hour"][1]).num_rows,
        "one group, an hour of day 1": lambda: led.history(
            group=GROUP, since_ms=w["day1_hour"][0], until_ms=w["day1_hour"][1]).num_rows,
        "one key, its newest 100 events": lambda: led.history(
            group=g, topic=t, queue_id=q, limit=100).num_rows,
        "one group's state at T": lambda: led.state_at(ts=w["at"], group=GROUP).num_rows,
        "one group's lag at T": lambda: len(led.lag(group=GROUP, at_ms=w["at"])[0]["queues"]),
    }


HISTORY_SQL = "SELECT * FROM events WHERE consumer_group = ? AND ts BETWEEN ? AND ? ORDER BY seq"
NEWEST_SQL = ("SELECT * FROM (SELECT * FROM events WHERE consumer_group = ? AND topic = ? "
              "AND queue_id = ? ORDER BY ts DESC, seq DESC LIMIT 100) ORDER BY seq")
KEYS_SQL = "SELECT DISTINCT topic, queue_id FROM events WHERE consumer_group = ? AND ts <= ?"
_IN_SETTING = ", ".join(f"'{k}'" for k in SETTING_KINDS)
SEEK_SQL = (f'SELECT "offset", generation FROM events WHERE consumer_group = ? AND topic = ? '
            f"AND queue_id = ? AND ts <= ? AND kind IN ({_IN_SETTING}) "
            "ORDER BY ts DESC, seq DESC LIMIT 1")
WINDOW_SQL = ('SELECT ts, "offset" FROM events WHERE consumer_group = ? AND topic = ? '
              "AND queue_id = ? AND ts <= ? AND kind IN ('commit', 'sync') "
              "ORDER BY ts DESC, seq DESC LIMIT 10")
MAX_OFFSET_SQL = ('SELECT "offset" FROM events WHERE topic = ? AND queue_id = ? '
                  "AND kind = 'queue_append' AND ts <= ? ORDER BY ts DESC LIMIT 1")


def sqlite_questions(conn: sqlite3.Connection, w: dict[str, Any]) -> dict[str, Callable[[], int]]:
    """The same questions answered by SQLite's indexes."""
    g, t, q = KEY

    def state() -> list[tuple]:
        out = []
        for topic, queue in conn.execute(KEYS_SQL, (GROUP, w["at"])).fetchall():
            row = conn.execute(SEEK_SQL, (GROUP, topic, queue, w["at"])).fetchone()
            if row is not None and row[0] is not None:
                out.append((topic, queue, *row))
        return out

    def lag() -> int:
        keys = state()
        for topic, queue, _, _ in keys:
            conn.execute(WINDOW_SQL, (GROUP, topic, queue, w["at"])).fetchall()
            conn.execute(MAX_OFFSET_SQL, (topic, queue, w["at"])).fetchone()
        return len(keys)

    return {
        "one group, the last hour": lambda: len(conn.execute(
            HISTORY_SQL, (GROUP, *w["last_hour"])).fetchall()),
        "one group, an hour of day 1": lambda: len(conn.execute(
            HISTORY_SQL, (GROUP, *w["day1_hour"])).fetchall()),
        "one key, its newest 100 events": lambda: len(conn.execute(
            NEWEST_SQL, (g, t, q)).fetchall()),
        "one group's state at T": lambda: len(state()),
        "one group's lag at T": lag,
    }


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    started = time.perf_counter()
    rows = fn()
    return time.perf_counter() - started, rows


def measure(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """Every question at every size: ledger and SQLite, sizes interleaved (a change of this
    shared machine's load hits them alike); seconds and rows."""
    from bench.phases import FixedClock
    from ledger import Ledger

    opened = []
    for n in sizes:
        d = build(n)
        facts = json.loads((d / "done.json").read_text())
        w = windows(facts)
        conn = sqlite3.connect(d / "events.sqlite")
        conn.execute("PRAGMA cache_size=-262144")
        # a reader of the data directory, as the server's read side opens it
        t0 = time.perf_counter()
        led = Ledger.open(d / "ledger", readonly=True, clock=FixedClock(facts["last_ts"]))
        # the same reader keeping no decoded row group: every read decodes what it reads
        kept = storage.decoded.DECODED_BYTES_MAX
        storage.decoded.DECODED_BYTES_MAX = 0
        try:
            decoding = Ledger.open(d / "ledger", readonly=True, clock=FixedClock(facts["last_ts"]))
        finally:
            storage.decoded.DECODED_BYTES_MAX = kept
        opened.append({"n": n, "facts": facts, "open_s": time.perf_counter() - t0, "led": led,
                       "conn": conn, "ours": ledger_questions(led, w),
                       "decoding": ledger_questions(decoding, w), "decoding_led": decoding,
                       "theirs": sqlite_questions(conn, w)})
    gc.collect()
    out = [{"commands": o["n"], "events": o["facts"]["events"], "open_s": o["open_s"],
            "questions": {}} for o in opened]
    for name in opened[0]["ours"]:
        runs = [{"ledger_s": [], "sqlite_s": []} for _ in opened]
        for o, r in zip(opened, runs, strict=True):
            r["ledger_first_s"], r["rows"] = timed(o["ours"][name])  # builds index entries
            r["ledger_decoding_s"] = []
        for _ in range(repeat):
            for o, r in zip(opened, runs, strict=True):
                r["ledger_s"].append(timed(o["ours"][name])[0])
                r["ledger_decoding_s"].append(timed(o["decoding"][name])[0])
                s_, r["sqlite_rows"] = timed(o["theirs"][name])
                r["sqlite_s"].append(s_)
        for o, r, doc in zip(opened, runs, out, strict=True):
            for who in ("ledger", "ledger_decoding", "sqlite"):
                r[f"{who}_best_s"] = min(r[f"{who}_s"])
                r[f"{who}_median_s"] = statistics.median(r[f"{who}_s"])
            doc["questions"][name] = r
            log(f"{o['n']:,} {name}: ledger {r['ledger_best_s'] * 1e3:.2f} ms (first "
                f"{r['ledger_first_s'] * 1e3:.1f} ms, decoding each read "
                f"{r['ledger_decoding_best_s'] * 1e3:.2f} ms, {r['rows']} rows), SQLite "
                f"{r['sqlite_best_s'] * 1e3:.2f} ms ({r['sqlite_rows']} rows)")
    for o in opened:
        o["led"].close()
        o["decoding_led"].close()
        o["conn"].close()
    return out


def mechanisms(n_commands: int, repeat: int) -> dict[str, Any]:
    """The candidates for the read index, measured on one sealed segment of `n_commands`'
    ledger (one group's hour of day 1): row-group statistics as the ledger reads them, the same
    file through DuckDB (footers cached), with a page index (1,024-row pages) through DuckDB
    (which skips pages by it), and the segment in seq order with a bloom filter on the group
    through DuckDB (which reads bloom filters) and through the statistics."""
    import duckdb
    import pyarrow.parquet as pq

    from storage.sealed import write_options

    d = build(n_commands)
    facts = json.loads((d / "done.json").read_text())
    lo, hi = windows(facts)["day1_hour"]
    segment = sorted((d / "ledger" / "log").glob("*.parquet"))[0]
    table = pq.read_table(segment)
    work = d / "mechanisms"
    work.mkdir(exist_ok=True)
    from storage.settings import LogSettings

    options = write_options(table.schema, LogSettings())
    files = {"clustered (as sealed)": segment}
    files["clustered, page index, 1,024-row pages"] = work / "page-index.parquet"
    pq.write_table(table, files["clustered, page index, 1,024-row pages"],
                   **{**options, "row_group_size": 8192, "write_page_index": True,
                      "max_rows_per_page": 1024})
    seq_order = table.sort_by("seq")
    files["seq order, bloom filter on the group"] = work / "bloom.parquet"
    pq.write_table(seq_order, files["seq order, bloom filter on the group"],
                   **{**options, "bloom_filter_options": {"consumer_group": {"ndv": 256}}})
    sql = (f"SELECT * FROM read_parquet('{{path}}') WHERE consumer_group = '{GROUP}' "
           f"AND ts >= {lo} AND ts <= {hi}")
    out: dict[str, Any] = {"segment_events": table.num_rows, "rows": {}, "best_ms": {},
                           "bytes_per_event": {}}
    con = duckdb.connect()
    con.execute("SET parquet_metadata_cache = true")

    def duck(path: Path) -> Callable[[], int]:
        return lambda: con.sql(sql.format(path=path)).to_arrow_table().num_rows

    def stats(path: Path) -> Callable[[], int]:
        from storage.bounds import ReadStats, SeqTsRange
        from storage.fs import OsFileSystem
        from storage.index import SegmentIndexes
        from storage.sealed import SegmentRef, read_segment

        ref = SegmentRef(path, 0, 1 << 62, table.num_rows, path.stat().st_size)
        indexes = SegmentIndexes()
        bounds = SeqTsRange(ts_gte=lo, ts_lt=hi + 1)
        return lambda: read_segment(OsFileSystem(), ref, bounds, table.column_names,
                                    ReadStats(), indexes, {"consumer_group": (GROUP,)}).num_rows

    candidates = {
        "row-group statistics, resident (the ledger's read index)": stats(segment),
        "row-group statistics through DuckDB": duck(segment),
        "page index through DuckDB": duck(files["clustered, page index, 1,024-row pages"]),
        "bloom filter, seq order, through DuckDB": duck(files["seq order, bloom filter on the group"]),
        "statistics, seq order (no clustering)": stats(files["seq order, bloom filter on the group"]),
    }
    for name, fn in candidates.items():
        out["rows"][name] = fn()
        out["best_ms"][name] = min(timed(fn)[0] for _ in range(repeat)) * 1e3
        log(f"mechanism {name}: {out['best_ms'][name]:.2f} ms, {out['rows'][name]} rows")
    for name, path in files.items():
        out["bytes_per_event"][name] = path.stat().st_size / table.num_rows
    con.close()
    return out


# ----------------------------------------------------------------------------- HTTP


def measure_http(n_commands: int, duration_s: float) -> dict[str, Any]:
    """The group's last hour through `offset-ledger serve` and through the plain HTTP server
    over the SQLite index (same stack, same JSON), wrk at 1 and 16 connections."""
    from urllib.parse import urlencode

    from bench import http_load
    from bench.http_stacks.measure import RunningServer, Target

    d = build(n_commands)
    facts = json.loads((d / "done.json").read_text())
    lo, hi = windows(facts)["last_hour"]
    query = "/v1/history?" + urlencode({"group": GROUP, "since": lo, "until": hi})
    exe = Path(sys.executable).parent / "offset-ledger"
    granian = Path(sys.executable).parent / "granian"
    targets = {
        "ledger": Target("ledger", [str(exe), "--data-dir", str(d / "ledger"), "serve",
                                    "--port", "{port}"]),
        "sqlite": Target("sqlite", [str(granian), "--interface", "rsgi", "--loop", "uvloop",
                                    "--workers", "1", "--port", "{port}",
                                    "bench.baselines.sqlite_history_server:rsgi_app"],
                         env={"SQLITE_HISTORY_DB": str(d / "events.sqlite")}),
    }
    out: dict[str, Any] = {"path": query}
    for name, target in targets.items():
        with RunningServer(target, d / f"{name}-serve.log") as server:
            url = server.base_url + query
            http_load.run_wrk(url, 2, 4, script=get_script())  # warm-up
            out[name] = [{"connections": c, **http_load.run_wrk(
                url, duration_s, c, script=get_script()).as_dict()} for c in (1, 16)]
            log(f"{name}: " + ", ".join(f"{r['requests_per_s']:.0f} req/s at {r['connections']}"
                                        for r in out[name]))
    return out


def get_script() -> str:
    """A wrk script sending the URL's GET as is, printing the figures as the commit one does."""
    from bench import http_load

    text = http_load.commit_script()
    start, end = text.index("local counter = 0"), text.index("function done(")
    return text[:start] + "function request()\n  return wrk.format(\"GET\")\nend\n\n" + text[end:]


# ----------------------------------------------------------------------------- report


def ratio(ledger_s: float, sqlite_s: float) -> float:
    """SQLite's time over the ledger's: > 1 when the ledger is faster (the bench's convention)."""
    return sqlite_s / ledger_s if ledger_s > 0 else float("inf")


def markdown(out: dict[str, Any]) -> str:
    sizes = out["sizes"]
    base = sizes[0]
    lines = [f"Read scaling ({out['when']}, load {out['load'][0]:.1f}-{out['load'][1]:.1f}): "
             "best of " f"{out['repeat']} in process, one run; ratio = SQLite's time over the "
             "ledger's (> 1: the ledger is faster); growth = the ledger's time over its "
             f"{base['events'] / 1e6:.0f}M figure.", "",
             "| read | " + " | ".join(f"{s['events'] / 1e6:.0f}M events" for s in sizes)
             + " | decoding each read | SQLite (same events, indexed) | ratio | growth |",
             "|---|" + "---|" * (len(sizes) + 4)]
    names = sorted(base["questions"], key=lambda n: -max(
        s["questions"][n]["ledger_best_s"] for s in sizes))
    for name in names:
        per = [s["questions"][name] for s in sizes]
        cells = [f"{q['ledger_best_s'] * 1e3:.2f} ms ({q['rows']} rows)" for q in per]
        sq = " / ".join(f"{q['sqlite_best_s'] * 1e3:.2f}" for q in per)
        ratios = " / ".join(f"{ratio(q['ledger_best_s'], q['sqlite_best_s']):.2f}x" for q in per)
        growth = " / ".join(f"{q['ledger_best_s'] / per[0]['ledger_best_s']:.2f}x"
                            for q in per[1:]) or "-"
        decoding = " / ".join(f"{q['ledger_decoding_best_s'] * 1e3:.2f}" for q in per
                              if "ledger_decoding_best_s" in q) or "-"
        lines.append(f"| {name} | " + " | ".join(cells)
                     + f" | {decoding} ms | {sq} ms | {ratios} | {growth} |")
    lines.append("")
    lines.append("First read of each question after opening (index entries built): "
                 + "; ".join(f"{s['events'] / 1e6:.0f}M: " + ", ".join(
                     f"{qq['ledger_first_s'] * 1e3:.0f}" for qq in s["questions"].values())
                             + " ms" for s in sizes) + f" (in the order {', '.join(base['questions'])})."
                 + " Open (reader): " + ", ".join(f"{s['open_s']:.2f} s" for s in sizes) + ".")
    if out.get("mechanisms"):
        m = out["mechanisms"]
        lines += ["", f"The read index's candidates, one group's hour of day 1 in one sealed "
                  f"segment of {m['segment_events']:,} events (best of {out['repeat']}):", "",
                  "| mechanism | time | rows |", "|---|---|---|"]
        for name, ms in sorted(m["best_ms"].items(), key=lambda kv: -kv[1]):
            lines.append(f"| {name} | {ms:.2f} ms | {m['rows'][name]} |")
        lines += ["", "Bytes per event of the files: " + ", ".join(
            f"{name} {b:.2f} B" for name, b in m["bytes_per_event"].items()) + "."]
    if out.get("http"):
        h = out["http"]
        for conns in (1, 16):
            ours = next(r for r in h["ledger"] if r["connections"] == conns)
            theirs = next(r for r in h["sqlite"] if r["connections"] == conns)
            lines.append(f"- HTTP, the group's last hour, {conns} connection(s): serve "
                         f"{ours['requests_per_s']:.0f} req/s (p50 {ours['p50_ms']:.2f} ms), "
                         f"plain server over SQLite {theirs['requests_per_s']:.0f} req/s "
                         f"(p50 {theirs['p50_ms']:.2f} ms): "
                         f"{ours['requests_per_s'] / theirs['requests_per_s']:.2f}x")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    import os

    ap = argparse.ArgumentParser(prog="python -m bench.read_scaling", description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=tuple(SIZES), default="default")
    ap.add_argument("--commands", type=int, nargs="*", help="sizes in commands (overrides --size)")
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--http", action="store_true", help="also history through serve")
    ap.add_argument("--mechanisms", action="store_true",
                    help="also the read index's candidate mechanisms on one segment")
    ap.add_argument("--http-duration", type=float, default=8.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "read-scaling-latest")
    args = ap.parse_args(argv)
    sizes = args.commands or SIZES[args.size]
    load = [os.getloadavg()[0]]
    out: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "repeat": args.repeat,
                           "sizes": measure(sizes, args.repeat)}
    if args.mechanisms:
        out["mechanisms"] = mechanisms(sizes[0], args.repeat)
    if args.http:
        out["http"] = measure_http(sizes[-1], args.http_duration)
    load.append(os.getloadavg()[0])
    out["load"] = load
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")
    text = markdown(out)
    args.out.with_suffix(".md").write_text(text)
    print(text)
    return out


if __name__ == "__main__":
    main()
