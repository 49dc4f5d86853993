"""Benchmark phases, each run in a process of its own by `bench.run`.

Why a process per phase: peak RSS is only meaningful per process (ru_maxrss never goes down),
and a phase that crashes or hangs must not take the whole run with it. A child is started as
`python -m bench.phases NAME CONFIG.json OUT.json`; it writes `{"ok", "result" | "error",
"rusage", ...}` to OUT.json. CONFIG.json is the run's configuration (see `bench.run.config_for`)
plus `repeat_index` for the phases that run once per repeat (interleaved by the parent so that
ledger and baselines see the same machine load).

Timed regions hold only the operation measured: commands are decoded from the pinned NDJSON
before each timed `Ledger.apply` call; event rows for the baselines come from the cache.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import numpy as np

from bench import workload
from bench.baselines.common import EventRows, ensure_events, percentiles_us, sample_keys

T0_MS = workload.T0_MS
BROADCAST_PREFIX = "GID_bcast"


class FixedClock:
    """The injected clock: fixed at the workload's start, so ledger time follows the commands'
    `ts` and nothing rolls by age mid-run."""

    def __init__(self, now_ms: int = T0_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


# ----------------------------------------------------------------------------- helpers


def timed(fn: Callable[[], object], k: int) -> tuple[list[float], object]:
    """Seconds of `k` calls of `fn` (all samples) and the last result."""
    out: list[float] = []
    result: object = None
    for _ in range(max(1, k)):
        t = time.perf_counter()
        result = fn()
        out.append(time.perf_counter() - t)
    return out, result


def arrow_chunks(path: Path, bounds: list[int]) -> Iterator[tuple[int, int, object]]:
    """Commands [lo, hi) as Arrow tables (the Parquet twin of the NDJSON file): the column-wise
    form `Ledger.apply` folds per batch."""
    table = workload.load_arrow(path)
    if table.num_rows < bounds[-1]:
        raise RuntimeError(f"{path} holds fewer than {bounds[-1]} commands")
    lo = 0
    for hi in bounds:
        yield lo, hi, table.slice(lo, hi - lo)
        lo = hi


def command_chunks(path: Path, bounds: list[int]) -> Iterator[tuple[int, int, list[dict]]]:
    """Commands [lo, hi) of the NDJSON file as decoded dicts, for consecutive `bounds`."""
    dec = msgspec.json.Decoder()
    with open(path, "rb") as f:
        lo = 0
        for hi in bounds:
            cmds = [dec.decode(line) for line in itertools.islice(f, hi - lo)]
            if len(cmds) != hi - lo:
                raise RuntimeError(f"{path} holds fewer than {hi} commands")
            yield lo, hi, cmds
            lo = hi


def chunk_bounds(n: int, chunk: int, marks: list[int]) -> list[int]:
    return sorted({*range(chunk, n, chunk), n, *(m for m in marks if 0 < m <= n)})


def history_window(events: EventRows) -> tuple[str, int, int]:
    """The group and time window of the history query (the SQLite baseline's choice: a sampled
    group, +-5% of the stream's time span around its middle)."""
    t_mid, t_end, t_0 = events.time_at(0.5), events.time_at(1.0), events.time_at(0.0)
    group = sample_keys(events, 1, seed=3)[0][0]
    return group, t_mid - (t_end - t_0) // 20, t_mid + (t_end - t_0) // 20


def time_at_prefix(events: EventRows, n_commands: int, fraction: float) -> tuple[int, int]:
    """(T, events) for the first `n_commands` commands: T is the ts of the event at `fraction`
    of that prefix's events."""
    n_ev = int(np.searchsorted(events.cmd_index, n_commands))
    i = min(n_ev - 1, max(0, int(n_ev * fraction)))
    return int(events.table.column("ts")[i].as_py()), n_ev


def without_broadcast(state: dict) -> dict:
    """State-at answers compared on clustering groups only: for the broadcast group the ledger
    answers the minimum over live clients, the baselines the latest client position."""
    return {k: v for k, v in state.items() if not k[0].startswith(BROADCAST_PREFIX)}


def lookup_latencies(fn: Callable, keys: list[tuple]) -> dict:
    samples = []
    clock = time.perf_counter_ns
    for k in keys:
        t = clock()
        fn(*k)
        samples.append(clock() - t)
    return percentiles_us(samples)


def descendants_peak_rss_kb() -> int:
    """Largest VmHWM among live descendant processes (the Spark JVM is never reaped by us)."""
    me = os.getpid()
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    peak = 0
    for pid in parent:
        p, seen = parent.get(pid), 0
        while p is not None and p != me and p > 1 and seen < 64:
            p, seen = parent.get(p), seen + 1
        if p == me:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak = max(peak, int(line.split()[1]))
            except OSError:
                continue
    return peak


def _events(cfg: dict) -> EventRows:
    return ensure_events(Path(cfg["commands_file"]))


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    return path


# ----------------------------------------------------------------------------- phases


def phase_prepare(cfg: dict) -> dict:
    """Write (or reuse) the pinned command file and its event rows; not a measured phase."""
    t = time.perf_counter()
    path = workload.ensure_file(cfg["commands"], cfg["seed"])
    t_file = time.perf_counter() - t
    t = time.perf_counter()
    events = ensure_events(path)
    return {"file": str(path), "ensure_file_s": t_file, "ensure_events_s": time.perf_counter() - t,
            "events": events.n_events, "commands": events.n_commands,
            "anomalies": dict(events.anomalies)}


def phase_apply(cfg: dict) -> dict:
    """One repeat: Ledger.apply_arrow (durability always) over the whole stream as Arrow tables
    (the column-wise path, results as a table), pausing the clock at each history size of
    `scaling` to time state_at(T at 90% of the history so far); then lookups, the group history,
    and bytes per event after rolling the active segment. The first repeat also times
    `Ledger.apply` on the same tables (a result dict per line) and on decoded dicts (the
    per-command path `offset-ledger apply` takes)."""
    from ledger import Ledger

    path = Path(cfg["commands_file"])
    events = _events(cfg)
    n, k = cfg["commands"], cfg["query_repeat"]
    scaling = sorted(cfg["scaling"])
    points = {s: time_at_prefix(events, s, cfg["state_at_fraction"]) for s in scaling}
    keys = sample_keys(events, cfg["lookups"])
    group, lo, hi = history_window(events)
    t_final = points[n][0]
    want = None
    if cfg["repeat_index"] == 0:
        from bench.baselines import dict_fold

        want = without_broadcast(dict_fold.state_at(events, t_final))
    n_events_ref = events.n_events
    del events
    gc.collect()

    root = _fresh(Path(cfg["workdir"]) / f"apply-{cfg['repeat_index']}")
    ledger = Ledger.open(root, backfill=True, clock=FixedClock(), durability="always",
                         segment_events_max=cfg["segment_events_max"])
    elapsed, errors, prev_n, prev_t = 0.0, 0, 0, 0.0
    scale_out = []
    state_rows = None
    for _lo, hi_n, cmds in arrow_chunks(path, chunk_bounds(n, cfg["apply_chunk"], scaling)):
        t = time.perf_counter()
        results = ledger.apply_arrow(cmds)
        elapsed += time.perf_counter() - t
        errors += results.num_rows - results.column("error").null_count
        del cmds
        if hi_n in points:
            at, n_ev = points[hi_n]
            times, table = timed(lambda at=at: ledger.state_at(ts=at), k)
            seq_to = int(n_ev * cfg["state_at_fraction"])  # about: T is that event's ts
            cps = [c for c in ledger.log.checkpoints() if c <= seq_to]
            scale_out.append({
                "commands": hi_n, "events": ledger.log.next_seq, "T": at,
                "apply_s": elapsed,
                "commands_per_s_cumulative": hi_n / elapsed,
                "commands_per_s_interval": (hi_n - prev_n) / (elapsed - prev_t),
                "state_at_s": times, "state_at_rows": table.num_rows,  # type: ignore[union-attr]
                "checkpoint_seq": cps[-1] if cps else None,
                "events_after_checkpoint": seq_to - (cps[-1] if cps else 0),
                "segments": len(ledger.log.segments()),
            })
            prev_n, prev_t = hi_n, elapsed
            if hi_n == n:
                state_rows = table
    out: dict = {
        "commands": n, "events": ledger.log.next_seq, "events_reference": n_events_ref,
        "errors": errors, "apply_s": elapsed, "commands_per_s": n / elapsed,
        "events_per_s": ledger.log.next_seq / elapsed, "scaling": scale_out, "T": t_final,
        "settings": {"durability": "always", "segment_events_max": cfg["segment_events_max"],
                     "apply_batch_commands": ledger.settings.apply_batch_commands},
    }
    if want is not None and state_rows is not None:
        got = without_broadcast({(r["consumer_group"], r["topic"], r["queue_id"]):
                                 r["committed_offset"] for r in state_rows.to_pylist()})
        out["state_at_agrees_with_dict_fold"] = got == want
        out["state_at_keys_compared"] = len(want)
        out["state_at_mismatches"] = sum(1 for key in want.keys() | got.keys()
                                         if want.get(key) != got.get(key))
    lat = lookup_latencies(ledger.committed, keys)  # one pass to warm, then the measured ones
    lats = [lookup_latencies(ledger.committed, keys) for _ in range(k)]
    out["lookup"] = {"p50_us": [x["p50_us"] for x in lats], "p99_us": [x["p99_us"] for x in lats],
                     "n": lat["n"]}
    times, table = timed(lambda: ledger.history(group=group, since_ms=lo, until_ms=hi), k)
    out["history"] = {"s": times, "rows": table.num_rows, "group": group,  # type: ignore[union-attr]
                      "since_ms": lo, "until_ms": hi}
    t = time.perf_counter()
    ledger.log.roll()
    out["roll_s"] = time.perf_counter() - t
    segs = ledger.log.segments()
    sealed_events = sum(s.events for s in segs)
    out["sealed"] = {"segments": len(segs), "events": sealed_events,
                     "bytes": sum(s.bytes for s in segs),
                     "bytes_per_event": sum(s.bytes for s in segs) / max(1, sealed_events)}
    out["checkpoints"] = len(ledger.log.checkpoints())
    ledger.close()
    if cfg["repeat_index"] == 0:
        out["arrow_dict_results"] = _apply_other(cfg, path, n, dicts=False)
        out["dicts"] = _apply_other(cfg, path, n, dicts=True)
    keep = Path(cfg["workdir"]) / "apply-final"
    if cfg["repeat_index"] == cfg["repeat"] - 1:
        shutil.rmtree(keep, ignore_errors=True)
        root.rename(keep)
    else:
        shutil.rmtree(root, ignore_errors=True)
    return out


def _apply_other(cfg: dict, path: Path, n: int, dicts: bool) -> dict:
    """The same stream through `Ledger.apply`, yielding a result dict per line: as decoded dicts
    (the per-command path `offset-ledger apply` takes) or as Arrow tables (column-wise)."""
    from ledger import Ledger

    root = _fresh(Path(cfg["workdir"]) / "apply-other")
    ledger = Ledger.open(root, backfill=True, clock=FixedClock(), durability="always",
                         segment_events_max=cfg["segment_events_max"])
    elapsed, errors = 0.0, 0
    chunks = command_chunks if dicts else arrow_chunks
    for _lo, _hi, cmds in chunks(path, chunk_bounds(n, cfg["apply_chunk"], [])):
        t = time.perf_counter()
        for res in ledger.apply(cmds):
            if "error" in res:
                errors += 1
        elapsed += time.perf_counter() - t
    events = ledger.log.next_seq
    ledger.close()
    shutil.rmtree(root, ignore_errors=True)
    return {"apply_s": elapsed, "commands_per_s": n / elapsed, "events": events, "errors": errors}


def phase_sqlite(cfg: dict) -> dict:
    """One repeat of the SQLite baseline: durable ingest with and without the covering index,
    then state-at-T (GROUP BY scan and index seek), lookups and the group history."""
    from bench.baselines import sqlite_store as sq

    events = _events(cfg)
    k = cfg["query_repeat"]
    work = Path(cfg["workdir"])
    plain, indexed = work / "sqlite-plain.db", work / "sqlite-indexed.db"
    t_final, _ = time_at_prefix(events, cfg["commands"], cfg["state_at_fraction"])
    group, lo, hi = history_window(events)
    keys = sample_keys(events, cfg["lookups"])
    out: dict = {"T": t_final, "commands": events.n_commands, "events": events.n_events}
    first = cfg["repeat_index"] == 0
    gc.collect()
    out["ingest_plain"] = sq.ingest(events, plain, index=False)
    if first:
        # ingest with the covering index maintained costs twice the plain one: once per run
        out["ingest_indexed"] = sq.ingest(events, indexed, index=True)

    conn = sq.connect(plain)
    # the scan takes seconds: once per repeat (the repeats give its spread)
    out["state_at_group_by_s"], by_group = timed(lambda: sq.state_at_group_by(conn, t_final), 1)
    if first:
        out["bytes_per_event_plain"] = sq.compact_size(conn, plain) / events.n_events
    else:  # the same covering index, built at once on the plain table, for the seeks
        t = time.perf_counter()
        conn.execute(sq.INDEX)
        out["create_index_s"] = time.perf_counter() - t
        indexed = plain
    conn.close()
    conn = sq.connect(indexed)
    out["state_at_seek_s"], by_seek = timed(lambda: sq.state_at_seek(conn, t_final), k)
    out["state_at_seek_loop_s"], _ = timed(lambda: sq.state_at_seek_loop(conn, t_final), 1)
    out["state_at_agree"] = by_group == by_seek
    out["state_at_keys"] = len(by_seek)  # type: ignore[arg-type]
    if first:
        from bench.baselines import dict_fold

        out["state_at_agrees_with_dict_fold"] = (
            without_broadcast(by_seek) == without_broadcast(dict_fold.state_at(events, t_final)))
        out["plan_seek"] = sq.plan(conn, sq.STATE_SEEK, {"t": t_final})
    out["history_s"], rows = timed(
        lambda: conn.execute(sq.GROUP_HISTORY, (group, lo, hi)).fetchall(), k)
    out["history_rows"] = len(rows)  # type: ignore[arg-type]
    lats = [sq.lookups(conn, keys) for _ in range(k)]
    out["lookup"] = {"p50_us": [x["p50_us"] for x in lats], "p99_us": [x["p99_us"] for x in lats],
                     "n": len(keys)}
    if first:
        out["bytes_per_event_indexed"] = sq.compact_size(conn, indexed) / events.n_events
    conn.close()
    for db in (plain, indexed):
        for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            p.unlink(missing_ok=True)
    return out


def phase_references(cfg: dict) -> dict:
    """One repeat of the reference baselines: DuckDB alone, the dict fold, plain Parquet."""
    import duckdb

    from bench.baselines import dict_fold, parquet_plain
    from bench.baselines import duckdb_store as dd

    events = _events(cfg)
    k = cfg["query_repeat"]
    work = Path(cfg["workdir"])
    t_final, _ = time_at_prefix(events, cfg["commands"], cfg["state_at_fraction"])
    group, lo, hi = history_window(events)
    out: dict = {"T": t_final}
    db = work / "duckdb.db"
    gc.collect()
    out["duckdb_ingest"] = dd.ingest(events, db)
    out["duckdb_bytes_per_event"] = os.path.getsize(db) / events.n_events
    con = duckdb.connect(str(db))
    out["duckdb_state_at_s"], _ = timed(lambda: dd.state_at(con, t_final), k)
    out["duckdb_history_s"], _ = timed(
        lambda: con.execute(dd.GROUP_HISTORY, [group, lo, hi]).fetchall(), k)
    keys = sample_keys(events, cfg["duckdb_lookups"])
    lats = [dd.lookups(con, keys) for _ in range(k)]
    out["duckdb_lookup"] = {"p50_us": [x["p50_us"] for x in lats],
                            "p99_us": [x["p99_us"] for x in lats], "n": len(keys)}
    con.close()
    for p in (db, Path(f"{db}.wal")):
        p.unlink(missing_ok=True)
    columns = dict_fold._columns(events)
    enabled = gc.isenabled()
    gc.disable()
    try:
        fold_s, _ = timed(lambda: dict_fold.fold(columns), 1)
        at_s, _ = timed(lambda: dict_fold.fold(columns, t_final), 1)
    finally:
        if enabled:
            gc.enable()
    out["dict_fold"] = {"fold_s": fold_s[0], "commands_per_s": events.n_commands / fold_s[0],
                        "events_per_s": events.n_events / fold_s[0], "state_at_s": at_s}
    if cfg["repeat_index"] == 0:
        out["parquet_plain"] = parquet_plain.run(events, work, repeat=1)
    return out


def _recovery_root(cfg: dict) -> Path:
    return Path(cfg["workdir"]) / "recovery-pristine"


def phase_recovery_build(cfg: dict) -> dict:
    """A ledger whose whole history is one unsealed tail (durability none, to build it fast)."""
    from ledger import Ledger

    n = cfg["recovery_commands"]
    path = Path(cfg["recovery_file"])
    root = _fresh(_recovery_root(cfg))
    ledger = Ledger.open(root, backfill=True, clock=FixedClock(), durability="none",
                         segment_events_max=100_000_000, segment_bytes_max=2**32 - 1)
    elapsed = 0.0
    for _lo, _hi, cmds in command_chunks(path, chunk_bounds(n, cfg["apply_chunk"], [])):
        t = time.perf_counter()
        for _ in ledger.apply(cmds):
            pass
        elapsed += time.perf_counter() - t
    out = {"commands": n, "events": ledger.log.next_seq, "segments": len(ledger.log.segments()),
           "apply_s": elapsed, "commands_per_s_durability_none": n / elapsed}
    ledger.close()
    out["bytes_on_disk"] = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    return out


def phase_recovery_open(cfg: dict) -> dict:
    """Time Ledger.open on a copy of the built ledger: with its view current (a restart), and
    with the view file gone (the view rebuilt from the state); state-at-T with no checkpoint."""
    from ledger import Ledger

    pristine = _recovery_root(cfg)
    k = cfg["repeat"]
    out: dict = {"open_s": [], "open_view_rebuilt_s": [], "state_at_s": []}
    for r in range(k):
        for variant in ("open_s", "open_view_rebuilt_s"):
            root = _fresh(Path(cfg["workdir"]) / f"recovery-{r}")
            shutil.copytree(pristine, root)
            if variant == "open_view_rebuilt_s":
                (root / "view.duckdb").unlink()
                for wal in root.glob("view.duckdb.wal"):
                    wal.unlink()
            gc.collect()
            t = time.perf_counter()
            ledger = Ledger.open(root, backfill=True, clock=FixedClock())
            out[variant].append(time.perf_counter() - t)
            out["events"] = ledger.log.next_seq
            out["sealed_segments"] = len(ledger.log.segments())
            out["tail_events"] = ledger.log.tail().num_rows
            cps = ledger.log.checkpoints()
            out["checkpoints"] = cps
            out["events_replayed_at_open"] = ledger.log.next_seq - max(
                [c for c in cps if c <= ledger.log.next_seq], default=0)
            if variant == "open_s":
                at = ledger.state.last_ts - (ledger.state.last_ts - T0_MS) // 10
                times, _ = timed(lambda at=at, led=ledger: led.state_at(ts=at), 1)
                out["state_at_s"] += times
            ledger.close()
            shutil.rmtree(root, ignore_errors=True)
    return out


def phase_reset(cfg: dict) -> dict:
    """Plan time of a to-datetime reset over a group with `reset_queues` queues of one topic."""
    from ledger import Ledger, Scenario, Scope

    nq, group, topic = cfg["reset_queues"], "GID_reset-plan", "topic-wide"
    root = _fresh(Path(cfg["workdir"]) / "reset")
    ledger = Ledger.open(root, backfill=True, clock=FixedClock(), durability="none")
    cmds: list[dict] = [{"op": "group_set", "group": group, "mode": "clustering",
                         "initial": "earliest", "ts": T0_MS}]
    for step in range(4):
        cmds += [{"op": "queue_append", "topic": topic, "queue_id": q, "count": 250,
                  "store_time": T0_MS - (4 - step) * 900_000, "ts": T0_MS} for q in range(nq)]
    cmds += [{"op": "pull", "group": group, "topic": topic, "queue_id": q, "client": "10.0.0.1|1",
              "max": 32, "ts": T0_MS + 1} for q in range(nq)]
    cmds += [{"op": "commit", "group": group, "topic": topic, "queue_id": q, "offset": 1 + q % 32,
              "client": "10.0.0.1|1", "ts": T0_MS + 2} for q in range(nq)]
    errors = sum(1 for r in ledger.apply(cmds) if "error" in r)
    at = T0_MS - 3 * 900_000 + 1  # inside the second append of every queue
    scenario, scope = Scenario("to_datetime", at), Scope(topics=((topic, None),))
    times, plan = timed(lambda: ledger.reset(group, scenario, scope=scope), cfg["reset_repeat"])
    items = plan.items  # type: ignore[union-attr]
    out = {"queues": nq, "build_errors": errors, "plan_s": times, "plan_items": len(items),
           "targets": sorted({i.to_offset for i in items})[:5]}
    ledger.close()
    shutil.rmtree(root, ignore_errors=True)
    return out


def phase_lag(cfg: dict) -> dict:
    """Ledger.lag of one group and of every group on the apply phase's ledger, at its end (the
    ledger's now: the injected clock at its last event) and at T (90% of its time span), read-
    only as `offset-ledger lag` opens it; and one group's lag series (60 points over the span,
    the SQL macro). Statuses are kept as a check, and lag_ms against progress's."""
    from ledger import Ledger

    root = Path(cfg["workdir"]) / "apply-final"
    if not root.exists():
        raise RuntimeError("no ledger from the apply phase to ask")
    k = max(5, cfg["query_repeat"])
    group = workload.Shape().group_name(17)
    clock = FixedClock()
    out: dict = {"group": group}
    with Ledger.open(root, readonly=True, clock=clock) as led:
        segments = led.log.segments()
        t0 = segments[0].ts_min if segments else T0_MS
        end = clock.now_ms = led.state.last_ts
        at = t0 + (end - t0) * 9 // 10
        out.update(events=led.log.next_seq, T=at, end=end, checkpoints=len(led.log.checkpoints()))
        runs = {"one_group_now_s": lambda: led.lag(group=group),
                "all_groups_now_s": lambda: led.lag(),
                "one_group_at_s": lambda: led.lag(group=group, at_ms=at),
                "all_groups_at_s": lambda: led.lag(at_ms=at)}
        docs = {}
        for name, fn in runs.items():
            out[name], docs[name] = timed(fn, k)
        step = max(1, (end - t0) // 59)
        out["series_one_group_s"], series = timed(
            lambda: led.lag_series(since_ms=t0, until_ms=t0 + 59 * step, every_ms=step,
                                   group=group), 3)
        out["series_points"] = sum(len(q["series"]) for q in series)  # type: ignore[union-attr]
        for name in ("all_groups_now_s", "all_groups_at_s"):
            statuses: dict[str, int] = {}
            for g in docs[name]:  # type: ignore[union-attr]
                statuses[g["status"]] = statuses.get(g["status"], 0) + 1
            out[name.replace("_s", "_statuses")] = statuses
        progress = {(r["topic"], r["queue_id"]): r["lag_ms"] for r in led.progress(group)}
        now_doc = docs["one_group_now_s"][0]  # type: ignore[index]
        out["lag_ms_equals_progress"] = progress == {
            (q["topic"], q["queue_id"]): q["lag_ms"] for q in now_doc["queues"]}
        out["queues_of_group"] = len(now_doc["queues"])
    return out


def phase_compaction(cfg: dict) -> dict:
    """Spark local[2] compaction of the apply phase's sealed segments (bytes per event after it,
    events/s), next to a DuckDB COPY of the same rows in the same order (a reference)."""
    import duckdb

    from spark_compaction.compaction import SORT_KEYS, compact_root
    from spark_compaction.session import spark_session
    from storage import SegmentedLog

    source = Path(cfg["workdir"]) / "apply-final"
    if not source.exists():
        raise RuntimeError("no sealed ledger from the apply phase to compact")
    t = time.perf_counter()
    spark = spark_session("local[2]")
    out: dict = {"spark_start_s": time.perf_counter() - t, "master": spark.sparkContext.master,
                 "runs": []}
    from ledger.fold.events import EVENT_SCHEMA

    with SegmentedLog.open(source, EVENT_SCHEMA, None, writer=False) as log:
        paths = [str(s.path) for s in log.segments()]
        events = sum(s.events for s in log.segments())
    k = cfg["compaction_repeat"]
    out.update({"events": events, "segments_in": len(paths), "seconds": [], "events_per_s": [],
                "bytes_per_event_before": None, "bytes_per_event_after": []})
    for r in range(k):
        root = _fresh(Path(cfg["workdir"]) / f"compact-{r}")
        shutil.copytree(source, root)
        t = time.perf_counter()
        res = compact_root(root, master="local[2]")
        dt = time.perf_counter() - t
        out["seconds"].append(dt)
        out["events_per_s"].append(res["events"] / dt)
        out["bytes_per_event_before"] = res["bytes_before"] / max(1, res["events"])
        out["bytes_per_event_after"].append(res["bytes_after"] / max(1, res["events"]))
        out["segments_after"] = res["segments_after"]
        out["runs"].append(res["runs"])
        shutil.rmtree(root, ignore_errors=True)
    out["jvm_peak_rss_kb"] = descendants_peak_rss_kb()
    con = duckdb.connect()
    con.execute("SET threads = 2")
    dst = Path(cfg["workdir"]) / "duckdb-copy.parquet"
    # the reference sorts as the compaction did (its default order: seq)
    orders = {run.get("order") for r in out["runs"] for run in r} - {None}
    order = ", ".join(SORT_KEYS) if orders == {"key"} else "seq"
    out["order"] = "key" if orders == {"key"} else "seq"
    sql = (f"COPY (SELECT * FROM read_parquet({paths!r}) ORDER BY {order}) TO '{dst}' "
           "(FORMAT parquet, COMPRESSION zstd)")
    times, _ = timed(lambda: con.execute(sql), k)
    out["duckdb_copy"] = {"seconds": times, "events_per_s": [events / s for s in times],
                          "bytes_per_event": dst.stat().st_size / max(1, events)}
    con.close()
    dst.unlink(missing_ok=True)
    return out


def phase_compaction_bench(cfg: dict) -> dict:
    """bench/compaction_bench.py (Spark local[2] vs DuckDB COPY), when it exists."""
    import importlib

    mod = importlib.import_module("bench.compaction_bench")
    return mod.run(events=cfg["compaction_bench_events"], segments=cfg["compaction_bench_segments"],
                   quick=cfg["quick_extras"])


def phase_storage_bench(cfg: dict) -> dict:
    """bench/storage_bench.py (the segmented log against SQLite and plain Parquet)."""
    import importlib

    mod = importlib.import_module("bench.storage_bench")
    return mod.run(quick=cfg["quick_extras"])


def _ledger_events(ledger: object, results: object, n: int) -> EventRows:
    """The events a ledger wrote, each with the index of the command that caused it (results'
    `seq` is a command's last event; commands that wrote none are skipped)."""
    events = ledger.log.read()  # type: ignore[attr-defined]
    seqs = results.column("seq").to_numpy(zero_copy_only=False)  # type: ignore[attr-defined]
    has = np.flatnonzero(~np.isnan(seqs.astype(np.float64)))
    lasts = seqs[has].astype(np.int64)
    at = np.searchsorted(lasts, events.column("seq").to_numpy(), side="left")
    return EventRows(events, has[np.minimum(at, len(has) - 1)], n)


def phase_feeds(cfg: dict) -> dict:
    """One repeat of every feed (bench/feeds.py), each three ways on the same commands:
    `offset-ledger apply FILE.ndjson` as a user runs it (a process of its own: wall time,
    and its CPU), `Ledger.apply_arrow` of the Parquet twin in process (the table read before
    the clock starts), and SQLite's durable ingest of the same events (the ledger's own: the
    reference fold reads only the pinned workload's columns), its store calls only, as in
    phase_sqlite."""
    import pyarrow.parquet as pq

    from bench.baselines import sqlite_store as sq
    from bench.feeds import FEEDS, ensure_feed
    from ledger import Ledger

    n = cfg["feed_commands"]
    work = Path(cfg["workdir"])
    cli = Path(sys.executable).with_name("offset-ledger")
    out: dict = {"commands": n}
    for feed in FEEDS:
        path = ensure_feed(feed, n, cfg["seed"])
        rec: dict = {"file": path.name}
        root = _fresh(work / f"feed-{feed}-cli")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        p = subprocess.run([str(cli), "--data-dir", str(root), "apply", str(path)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            raise RuntimeError(f"offset-ledger apply {path.name} exited {p.returncode}: "
                               f"{p.stderr[-500:]}")
        with Ledger.open(root, readonly=True) as led:
            cli_events = led.log.next_seq
        shutil.rmtree(root, ignore_errors=True)
        rec["cli"] = {"s": wall, "commands_per_s": n / wall,
                      "cpu_s": (after.ru_utime - before.ru_utime)
                      + (after.ru_stime - before.ru_stime), "events": cli_events}
        table = pq.read_table(path.with_suffix(".parquet"))
        root = _fresh(work / f"feed-{feed}-arrow")
        gc.collect()
        ledger = Ledger.open(root, durability="always")
        t, c = time.perf_counter(), time.process_time()
        results = ledger.apply_arrow(table)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        rec["arrow"] = {"s": wall, "commands_per_s": n / wall, "cpu_s": cpu,
                        "events": ledger.log.next_seq,
                        "errors": results.num_rows - results.column("error").null_count}
        events = _ledger_events(ledger, results, n)
        ledger.close()
        del table, results
        shutil.rmtree(root, ignore_errors=True)
        db = work / f"feed-{feed}.sqlite"
        ingest = sq.ingest(events, db, index=False)
        rec["sqlite"] = {"commands_per_s": ingest["commands_per_s"], "store_s": ingest["store_s"],
                         "events": events.n_events}
        for q in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            q.unlink(missing_ok=True)
        del events
        out[feed] = rec
    return out


PHASES: dict[str, Callable[[dict], dict]] = {
    "prepare": phase_prepare,
    "apply": phase_apply,
    "sqlite": phase_sqlite,
    "references": phase_references,
    "recovery_build": phase_recovery_build,
    "recovery_open": phase_recovery_open,
    "reset": phase_reset,
    "lag": phase_lag,
    "feeds": phase_feeds,
    "compaction": phase_compaction,
    "compaction_bench": phase_compaction_bench,
    "storage_bench": phase_storage_bench,
}


def _jsonable(x: object) -> object:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def main(argv: list[str] | None = None) -> int:
    name, config_path, out_path = (argv or sys.argv[1:])[:3]
    cfg = json.loads(Path(config_path).read_text())
    load0 = os.getloadavg()
    t = time.perf_counter()
    record: dict = {"phase": name, "repeat_index": cfg.get("repeat_index")}
    try:
        record["result"] = _jsonable(PHASES[name](cfg))
        record["ok"] = True
    except BaseException as e:  # the parent reports it; the run goes on
        record["ok"] = False
        record["error"] = f"{type(e).__name__}: {e}"
        record["traceback"] = traceback.format_exc()
    record["seconds"] = time.perf_counter() - t
    record["load_average"] = {"start": list(load0), "end": list(os.getloadavg())}
    record["rusage"] = {
        "self_maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "children_maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        "descendants_peak_kb": descendants_peak_rss_kb(),
    }
    Path(out_path).write_text(json.dumps(record, indent=1))
    sys.stdout.flush()
    # the Spark JVM (if any) goes with us; skip interpreter teardown of big heaps
    os._exit(0)


if __name__ == "__main__":
    main()

