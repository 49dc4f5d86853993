"""From the phases' raw records to measures, targets, latest.md and scaling.png.

Why: the raw records (one per phase process) say what each phase saw; a reader needs the few
figures that answer the design's targets, each as min/median/max over repeats and as a ratio to
its baseline measured in the same run. Ratios are "ledger advantage": > 1 means the ledger is
better (higher throughput, or less time / bytes / latency). Where ledger and baseline ran the
same number of interleaved repeats the ratio is taken per repeat (paired), else from medians.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path

#: Measures every run reports: key -> (label, unit, better). Keys in SPARK_KEYS may be skipped.
MEASURES: dict[str, tuple[str, str, str]] = {
    "apply_commands_per_s": ("Ledger.apply_arrow (Arrow in and out), durability always", "cmd/s",
                             "higher"),
    "apply_arrow_dicts_commands_per_s": ("Ledger.apply of Arrow tables (a result dict per line)",
                                         "cmd/s", "higher"),
    "apply_dicts_commands_per_s": ("Ledger.apply of dicts (per command), durability always",
                                   "cmd/s", "higher"),
    "sqlite_commands_per_s": ("SQLite ingest (history + UPSERT, WAL, FULL)", "cmd/s", "higher"),
    "sqlite_indexed_commands_per_s": ("SQLite ingest with covering index", "cmd/s", "higher"),
    "duckdb_commands_per_s": ("DuckDB-alone ingest", "cmd/s", "higher"),
    "dict_fold_commands_per_s": ("dict fold of event rows (no storage)", "cmd/s", "higher"),
    "sealed_bytes_per_event": ("sealed segments", "B/event", "lower"),
    "compacted_bytes_per_event": ("after Spark compaction", "B/event", "lower"),
    "sqlite_bytes_per_event": ("SQLite, no extra index (VACUUMed)", "B/event", "lower"),
    "sqlite_indexed_bytes_per_event": ("SQLite with covering index (VACUUMed)", "B/event", "lower"),
    "duckdb_bytes_per_event": ("DuckDB file", "B/event", "lower"),
    "parquet_plain_bytes_per_event": ("plain Parquet, pyarrow defaults", "B/event", "lower"),
    "lookup_p50_us": ("Ledger.committed p50", "us", "lower"),
    "lookup_p99_us": ("Ledger.committed p99", "us", "lower"),
    "sqlite_lookup_p50_us": ("SQLite point query p50", "us", "lower"),
    "sqlite_lookup_p99_us": ("SQLite point query p99", "us", "lower"),
    "duckdb_lookup_p99_us": ("DuckDB point query p99", "us", "lower"),
    "state_at_s": ("Ledger.state_at(ts=T), T at 90%", "s", "lower"),
    "sqlite_state_at_group_by_s": ("SQLite GROUP BY scan", "s", "lower"),
    "sqlite_state_at_seek_s": ("SQLite covering-index seek per key", "s", "lower"),
    "sqlite_state_at_seek_loop_s": ("SQLite seek per key from Python", "s", "lower"),
    "duckdb_state_at_s": ("DuckDB arg_max GROUP BY", "s", "lower"),
    "dict_fold_state_at_s": ("dict fold up to T", "s", "lower"),
    "state_at_unsealed_tail_s": ("Ledger.state_at on the unsealed-tail ledger (no segment)", "s",
                                 "lower"),
    "history_s": ("Ledger.history(group, window)", "s", "lower"),
    "sqlite_history_s": ("SQLite group + ts window", "s", "lower"),
    "duckdb_history_s": ("DuckDB group + ts window", "s", "lower"),
    "reset_plan_s": ("Ledger.reset plan, 1,000 queues, to_datetime", "s", "lower"),
    "lag_one_group_s": ("Ledger.lag of one group (80 queues), now", "s", "lower"),
    "lag_all_groups_s": ("Ledger.lag of every group (16,000 queues), now", "s", "lower"),
    "lag_one_group_at_s": ("Ledger.lag of one group at T (90%)", "s", "lower"),
    "lag_all_groups_at_s": ("Ledger.lag of every group at T (90%)", "s", "lower"),
    "lag_series_s": ("Ledger.lag_series of one group, 60 points (SQL)", "s", "lower"),
    "open_s": ("Ledger.open, unsealed tail, view current", "s", "lower"),
    "open_view_rebuilt_s": ("Ledger.open, unsealed tail, view file gone", "s", "lower"),
    "compaction_events_per_s": ("Spark local[2] compact_root", "event/s", "higher"),
    "duckdb_copy_events_per_s": ("DuckDB COPY sorted to Parquet", "event/s", "higher"),
}
#: The feeds every path is measured on (bench/feeds.py): `offset-ledger apply` of the NDJSON,
#: Ledger.apply_arrow of its Parquet twin, SQLite's ingest of the same commands' events.
FEED_NAMES: tuple[str, ...] = ("mixed", "commits", "keys10x")
FEED_PATHS: dict[str, str] = {"cli": "`offset-ledger apply` NDJSON", "arrow": "Ledger.apply_arrow",
                              "sqlite": "SQLite ingest"}
for _feed in FEED_NAMES:
    for _path, _label in FEED_PATHS.items():
        MEASURES[f"feed_{_feed}_{_path}_commands_per_s"] = (f"{_label}, feed {_feed}", "cmd/s",
                                                            "higher")
SPARK_KEYS = frozenset({"compacted_bytes_per_event", "compaction_events_per_s",
                        "duckdb_copy_events_per_s"})

#: (label, measure, baseline or None, kind, threshold); kinds: "ratio" (advantage >= threshold),
#: "le" / "lt" (the measure's median against the threshold).
TARGETS: list[tuple[str, str, str | None, str, float]] = [
    ("throughput >= 3x SQLite", "apply_commands_per_s", "sqlite_commands_per_s", "ratio", 3.0),
    ("sealed <= 8 B/event", "sealed_bytes_per_event", "sqlite_bytes_per_event", "le", 8.0),
    ("compacted <= 5 B/event", "compacted_bytes_per_event", "sqlite_bytes_per_event", "le", 5.0),
    ("lookup p99 < 50 us", "lookup_p99_us", "sqlite_lookup_p99_us", "lt", 50.0),
    ("state-at-T >= 20x faster than GROUP BY", "state_at_s", "sqlite_state_at_group_by_s",
     "ratio", 20.0),
    ("state-at-T no slower than index seek", "state_at_s", "sqlite_state_at_seek_s", "ratio", 1.0),
    ("open with unsealed tail < 2 s", "open_s", None, "lt", 2.0),
    ("lag of one group < 50 ms", "lag_one_group_s", None, "lt", 0.05),
    ("lag of all groups < 1 s", "lag_all_groups_s", None, "lt", 1.0),
    ("group history no slower than SQLite's index", "history_s", "sqlite_history_s", "ratio",
     1.0),
    *[(f"NDJSON apply >= 3x SQLite, feed {f}", f"feed_{f}_cli_commands_per_s",
       f"feed_{f}_sqlite_commands_per_s", "ratio", 3.0) for f in FEED_NAMES],
    *[(f"apply_arrow >= 5x SQLite, feed {f}", f"feed_{f}_arrow_commands_per_s",
       f"feed_{f}_sqlite_commands_per_s", "ratio", 5.0) for f in FEED_NAMES],
]
#: Comparisons without a target: (measure, baseline).
COMPARISONS: list[tuple[str, str]] = [
    ("apply_arrow_dicts_commands_per_s", "sqlite_commands_per_s"),
    ("apply_dicts_commands_per_s", "sqlite_commands_per_s"),
    ("apply_commands_per_s", "apply_dicts_commands_per_s"),
    ("apply_commands_per_s", "sqlite_indexed_commands_per_s"),
    ("apply_commands_per_s", "duckdb_commands_per_s"),
    ("apply_commands_per_s", "dict_fold_commands_per_s"),
    ("sealed_bytes_per_event", "sqlite_indexed_bytes_per_event"),
    ("sealed_bytes_per_event", "duckdb_bytes_per_event"),
    ("sealed_bytes_per_event", "parquet_plain_bytes_per_event"),
    ("compacted_bytes_per_event", "sealed_bytes_per_event"),
    ("lookup_p50_us", "sqlite_lookup_p50_us"),
    ("lookup_p99_us", "duckdb_lookup_p99_us"),
    ("state_at_s", "sqlite_state_at_seek_loop_s"),
    ("state_at_s", "duckdb_state_at_s"),
    ("state_at_s", "dict_fold_state_at_s"),
    ("state_at_s", "state_at_unsealed_tail_s"),
    ("history_s", "sqlite_history_s"),
    ("history_s", "duckdb_history_s"),
    ("compaction_events_per_s", "duckdb_copy_events_per_s"),
]


#: Figures of the optional benches shown in latest.md (when present in their results).
EXTRA_FIGURES: dict[str, list[tuple[str, str]]] = {
    "storage_bench": [
        ("records", "records"),
        ("append, batches of 1000, always (records/s)",
         "segmented_log.append_batch_1000_always.records_per_s"),
        ("seal (records/s)", "segmented_log.seal.records_per_s"),
        ("sealed bytes/record", "segmented_log.sealed_bytes_per_record"),
        ("SQLite append, batches of 1000 (records/s)",
         "sqlite_wal_full.append_batch_1000_fsync.records_per_s"),
    ],
    "compaction_bench": [
        ("events", "events"),
        ("Spark local[2] events/s", "spark.events_per_s"),
        ("Spark events/s in a fresh process (session start and warm-up included)",
         "spark.events_per_s_in_a_fresh_process"),
        ("DuckDB COPY events/s", "duckdb_copy.events_per_s"),
        ("bytes/event before / after Spark / after DuckDB", "bytes_per_event"),
        ("group history query s", "history_query_s"),
        ("note", "fixed_cost.note"),
    ],
}


# ----------------------------------------------------------------------------- figures


def summary(values: Iterable[float]) -> dict:
    v = [float(x) for x in values]
    return {"min": min(v), "median": statistics.median(v), "max": max(v), "n": len(v)}


def _measure(key: str, per_repeat: list[list[float]] | None, skipped: str | None = None) -> dict:
    """`per_repeat`: samples of each repeat (one or more each)."""
    label, unit, better = MEASURES[key]
    m: dict = {"label": label, "unit": unit, "better": better}
    samples = [x for rep in (per_repeat or []) for x in rep if x is not None]
    if not samples:
        m.update(min=None, median=None, max=None, n=0,
                 skipped=skipped or "no figure: its phase failed or did not run")
        return m
    m.update(summary(samples))
    m["per_repeat"] = [statistics.median(rep) for rep in per_repeat if rep]  # type: ignore[union-attr]
    return m


def _ok(phases: dict, name: str) -> list[dict]:
    return [p["result"] for p in phases.get(name, []) if p.get("ok")]


def _dig(d: dict, path: str) -> object:
    for part in path.split("."):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def _reps(records: list[dict], path: str) -> list[list[float]]:
    """Per record the value(s) at `path` (a number or a list of numbers)."""
    out = []
    for r in records:
        v = _dig(r, path)
        if isinstance(v, list):
            out.append([float(x) for x in v])
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out.append([float(v)])
    return out


def advantage(m: dict, b: dict) -> dict | None:
    """Ledger advantage of measure `m` over baseline `b` (> 1: the ledger is better)."""
    if m.get("median") is None or b.get("median") is None:
        return None
    higher = m["better"] == "higher"

    def adv(x: float, y: float) -> float:
        if higher:
            return x / y if y else float("inf")
        return y / x if x else float("inf")

    pm, pb = m.get("per_repeat") or [], b.get("per_repeat") or []
    if len(pm) == len(pb) and len(pm) > 1:
        s = summary(adv(x, y) for x, y in zip(pm, pb, strict=True))
        return {**s, "paired": True}
    med = adv(m["median"], b["median"])
    lo = adv(m["min"], b["max"]) if higher else adv(m["max"], b["min"])
    hi = adv(m["max"], b["min"]) if higher else adv(m["min"], b["max"])
    return {"min": lo, "median": med, "max": hi, "n": 1, "paired": False}


def build(raw: dict) -> dict:
    """Measures, scaling curve, peak RSS and targets from the raw phase records."""
    ph = raw["phases"]
    apply, sq, refs = _ok(ph, "apply"), _ok(ph, "sqlite"), _ok(ph, "references")
    rec, reset, comp = _ok(ph, "recovery_open"), _ok(ph, "reset"), _ok(ph, "compaction")
    lag, feeds = _ok(ph, "lag"), _ok(ph, "feeds")
    last = [{"s": r["scaling"][-1]["state_at_s"]} for r in apply if r.get("scaling")]
    spark_note = raw.get("skipped", {}).get("compaction")
    sources: dict[str, tuple[list[dict], str]] = {
        "apply_commands_per_s": (apply, "commands_per_s"),
        "apply_dicts_commands_per_s": (apply, "dicts.commands_per_s"),
        "apply_arrow_dicts_commands_per_s": (apply, "arrow_dict_results.commands_per_s"),
        "sqlite_commands_per_s": (sq, "ingest_plain.commands_per_s"),
        "sqlite_indexed_commands_per_s": (sq, "ingest_indexed.commands_per_s"),
        "duckdb_commands_per_s": (refs, "duckdb_ingest.commands_per_s"),
        "dict_fold_commands_per_s": (refs, "dict_fold.commands_per_s"),
        "sealed_bytes_per_event": (apply, "sealed.bytes_per_event"),
        "compacted_bytes_per_event": (comp, "bytes_per_event_after"),
        "sqlite_bytes_per_event": (sq, "bytes_per_event_plain"),
        "sqlite_indexed_bytes_per_event": (sq, "bytes_per_event_indexed"),
        "duckdb_bytes_per_event": (refs, "duckdb_bytes_per_event"),
        "parquet_plain_bytes_per_event": (refs, "parquet_plain.defaults.bytes_per_event"),
        "lookup_p50_us": (apply, "lookup.p50_us"),
        "lookup_p99_us": (apply, "lookup.p99_us"),
        "sqlite_lookup_p50_us": (sq, "lookup.p50_us"),
        "sqlite_lookup_p99_us": (sq, "lookup.p99_us"),
        "duckdb_lookup_p99_us": (refs, "duckdb_lookup.p99_us"),
        "state_at_s": (last, "s"),
        "sqlite_state_at_group_by_s": (sq, "state_at_group_by_s"),
        "sqlite_state_at_seek_s": (sq, "state_at_seek_s"),
        "sqlite_state_at_seek_loop_s": (sq, "state_at_seek_loop_s"),
        "duckdb_state_at_s": (refs, "duckdb_state_at_s"),
        "dict_fold_state_at_s": (refs, "dict_fold.state_at_s"),
        "state_at_unsealed_tail_s": (rec, "state_at_s"),
        "history_s": (apply, "history.s"),
        "sqlite_history_s": (sq, "history_s"),
        "duckdb_history_s": (refs, "duckdb_history_s"),
        "reset_plan_s": (reset, "plan_s"),
        "lag_one_group_s": (lag, "one_group_now_s"),
        "lag_all_groups_s": (lag, "all_groups_now_s"),
        "lag_one_group_at_s": (lag, "one_group_at_s"),
        "lag_all_groups_at_s": (lag, "all_groups_at_s"),
        "lag_series_s": (lag, "series_one_group_s"),
        "open_s": (rec, "open_s"),
        "open_view_rebuilt_s": (rec, "open_view_rebuilt_s"),
        "compaction_events_per_s": (comp, "events_per_s"),
        "duckdb_copy_events_per_s": (comp, "duckdb_copy.events_per_s"),
        **{f"feed_{f}_{p}_commands_per_s": (feeds, f"{f}.{p}.commands_per_s")
           for f in FEED_NAMES for p in FEED_PATHS},
    }
    measures = {}
    for key in MEASURES:
        records, path = sources[key]
        per_repeat = _reps(records, path)
        if key in ("compacted_bytes_per_event", "compaction_events_per_s",
                   "duckdb_copy_events_per_s"):
            per_repeat = [[x] for rep in per_repeat for x in rep]  # runs inside one process
        measures[key] = _measure(key, per_repeat, spark_note if key in SPARK_KEYS else None)

    targets = []
    for label, key, base, kind, threshold in TARGETS:
        m = measures[key]
        b = measures[base] if base else None
        adv = advantage(m, b) if b else None
        t: dict = {"target": label, "measure": key, "baseline": base, "kind": kind,
                   "threshold": threshold, "value": m.get("median"), "advantage": adv}
        if m.get("median") is None:
            t["result"] = "not measured"
            t["note"] = m.get("skipped")
        elif kind == "ratio":
            t["result"] = "pass" if adv and adv["median"] >= threshold else "MISSED"
        elif kind == "le":
            t["result"] = "pass" if m["median"] <= threshold else "MISSED"
        else:
            t["result"] = "pass" if m["median"] < threshold else "MISSED"
        targets.append(t)
    comparisons = [{"measure": a, "baseline": b, "advantage": advantage(measures[a], measures[b])}
                   for a, b in COMPARISONS]

    scaling = []
    if apply and apply[0].get("scaling"):
        for i, point in enumerate(apply[0]["scaling"]):
            pts = [r["scaling"][i] for r in apply if len(r.get("scaling", [])) > i]
            scaling.append({
                "commands": point["commands"], "events": point["events"], "T": point["T"],
                "checkpoint_seq": point["checkpoint_seq"], "segments": point["segments"],
                "events_after_checkpoint": point.get("events_after_checkpoint"),
                "state_at_s": summary(x for p in pts for x in p["state_at_s"]),
                "commands_per_s_interval": summary(p["commands_per_s_interval"] for p in pts),
                "commands_per_s_cumulative": summary(p["commands_per_s_cumulative"] for p in pts),
            })

    rss = {}
    for name, recs in ph.items():
        vals = []
        for r in recs:
            ru = r.get("rusage") or {}
            if ru:
                vals.append(max(ru.get("self_maxrss_kb", 0), ru.get("descendants_peak_kb", 0),
                                ru.get("children_maxrss_kb", 0)) / 1024)
        if vals:
            rss[name] = {**summary(vals), "unit": "MiB",
                         "python_mib": summary(r["rusage"]["self_maxrss_kb"] / 1024 for r in recs
                                               if r.get("rusage"))}
    failures = {f"{name}[{i}]": {"error": r.get("error"), "traceback": r.get("traceback"),
                                 "stderr_tail": r.get("stderr_tail")}
                for name, recs in ph.items() for i, r in enumerate(recs) if not r.get("ok")}
    extras = {}
    for name in ("storage_bench", "compaction_bench"):
        recs = ph.get(name, [])
        if name in raw.get("skipped", {}):
            extras[name] = {"status": raw["skipped"][name]}
        elif recs and recs[0].get("ok"):
            extras[name] = {"status": "ok", "seconds": recs[0].get("wall_s"),
                            "result": recs[0]["result"]}
        elif recs:
            extras[name] = {"status": f"failed: {recs[0].get('error')}"}
    checks = {
        "ledger_apply_errors": [r.get("errors") for r in apply],
        "ledger_events_equal_reference": all(r["events"] == r["events_reference"] for r in apply)
        if apply else None,
        "ledger_state_at_agrees_with_dict_fold": next(
            (r["state_at_agrees_with_dict_fold"] for r in apply
             if "state_at_agrees_with_dict_fold" in r), None),
        "sqlite_state_at_agrees_with_dict_fold": next(
            (r["state_at_agrees_with_dict_fold"] for r in sq
             if "state_at_agrees_with_dict_fold" in r), None),
        "sqlite_group_by_equals_seek": all(r.get("state_at_agree") for r in sq) if sq else None,
        "history_rows": {"ledger": apply[0]["history"]["rows"] if apply else None,
                         "sqlite": sq[0]["history_rows"] if sq else None},
        "reset_plan_items": reset[0]["plan_items"] if reset else None,
        "recovery_tail_events": rec[0].get("tail_events") if rec else None,
        "recovery_sealed_segments": rec[0].get("sealed_segments") if rec else None,
        "recovery_checkpoints": rec[0].get("checkpoints") if rec else None,
        "recovery_events_replayed_at_open": rec[0].get("events_replayed_at_open") if rec else None,
        "lag_statuses": {"now": lag[0]["all_groups_now_statuses"],
                         "at_T": lag[0]["all_groups_at_statuses"]} if lag else None,
        "lag_ms_equals_progress": lag[0]["lag_ms_equals_progress"] if lag else None,
        "feed_events": {f: {p: feeds[0][f][p]["events"] for p in FEED_PATHS}
                        for f in FEED_NAMES if f in feeds[0]} if feeds else None,
        "feed_arrow_errors": {f: [r[f]["arrow"]["errors"] for r in feeds if f in r]
                              for f in FEED_NAMES} if feeds else None,
        "feed_cli_cpu_s": {f: summary(r[f]["cli"]["cpu_s"] for r in feeds if f in r)["median"]
                           for f in FEED_NAMES if all(f in r for r in feeds)} if feeds else None,
        "feed_arrow_cpu_s": {f: summary(r[f]["arrow"]["cpu_s"] for r in feeds if f in r)["median"]
                             for f in FEED_NAMES if all(f in r for r in feeds)} if feeds else None,
    }
    return {**raw, "measures": measures, "targets": targets, "comparisons": comparisons,
            "scaling": scaling, "peak_rss": rss, "checks": checks, "extras": extras,
            "failures": failures}


# ----------------------------------------------------------------------------- markdown


def fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "n/a"
    if unit == "s":
        if v < 1e-3:
            return f"{v * 1e6:.0f} us"
        return f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s"
    if unit in ("cmd/s", "event/s"):
        return f"{v / 1e6:.2f}M/s" if v >= 1e6 else f"{v / 1e3:.1f}k/s"
    if unit == "us":
        return f"{v:.1f} us"
    if unit in ("B/event", "MiB"):
        return f"{v:.2f}" + (" B" if unit == "B/event" else " MiB")
    return f"{v:.3g}"


def triple(m: dict) -> str:
    if m.get("median") is None:
        return f"n/a ({m.get('skipped')})"
    u = m["unit"]
    if m.get("n") == 1:
        return f"**{fmt(m['median'], u)}** (1 run)"
    if m["min"] == m["max"]:
        return f"**{fmt(m['median'], u)}**"
    return f"{fmt(m['min'], u)} / **{fmt(m['median'], u)}** / {fmt(m['max'], u)}"


def ratio_text(a: dict | None) -> str:
    if not a:
        return "n/a"
    kind = "paired" if a.get("paired") else "medians"
    return f"**{a['median']:.2f}x** ({a['min']:.2f}-{a['max']:.2f}, {kind})"


def markdown(r: dict) -> str:
    m, mach, cfg = r["measures"], r["machine"], r["config"]
    n_events = next((p["result"].get("events") for p in r["phases"].get("prepare", [])
                     if p.get("ok")), None)
    lines = [
        f"# offset-ledger benchmark: size `{r['size']}`",
        "",
        f"Run {r['started_at']}, {r['elapsed_s']:.0f} s"
        + (f" (budget {r['budget_s']} s)" if r.get("budget_s") else "")
        + f"; commit `{(mach.get('git_commit') or '?')[:12]}`"
        + (f" + {mach['git_uncommitted_files']} uncommitted files"
           if mach.get("git_uncommitted_files") else ""),
        f"Machine: {mach['cpu_count']} CPUs ({mach.get('cpu_model')}), {mach.get('memory_gb')} GB; "
        f"Python {mach['python']}, pyarrow {mach['pyarrow']}, duckdb {mach['duckdb']}, "
        f"pyspark {mach['pyspark']}, SQLite {mach['sqlite']}; load average (1/5/15 min) "
        f"{'/'.join(f'{x:.2f}' for x in r['load_average']['start'])} at start, "
        f"{'/'.join(f'{x:.2f}' for x in r['load_average']['end'])} at end (shared machine).",
        f"Workload: {cfg['commands']:,} commands (seed {cfg['seed']}, 200 groups x 10 topics x 8 "
        f"queues) = {n_events:,} events; {cfg['repeat']} repeats, ledger / SQLite / references "
        f"interleaved; every figure min / **median** / max; ledger segments of "
        f"{cfg['segment_events_max']:,} events (the ledger checkpoints at each seal and at its own "
        "interval; the scaling table shows which checkpoint each state-at-T used).",
        "Ratios are the ledger's advantage (> 1: ledger better), per repeat when paired.",
        "",
        "## Targets",
        "",
        "| Target | Ledger | Baseline | Ledger advantage | Result |",
        "|---|---|---|---|---|",
    ]
    for t in r["targets"]:
        base = m[t["baseline"]] if t["baseline"] else None
        base_txt = f"{base['label']}: {triple(base)}" if base else "-"
        res = t["result"]
        if res == "MISSED":
            if t["kind"] == "ratio":
                res = f"**MISSED** ({t['advantage']['median']:.2f}x, needs {t['threshold']:g}x)"
            else:
                res = (f"**MISSED** ({fmt(t['value'], m[t['measure']]['unit'])}, "
                       f"{t['value'] / t['threshold']:.2f}x the limit)")
        elif res == "not measured":
            res = f"not measured ({t.get('note')})"
        lines.append(f"| {t['target']} | {triple(m[t['measure']])} | {base_txt} | "
                     f"{ratio_text(t['advantage'])} | {res} |")
    lines += ["", "## Comparisons (no target)", "",
              "| Ledger measure | Ledger | Against | Against value | Ledger advantage |",
              "|---|---|---|---|---|"]
    for c in r["comparisons"]:
        a, b = m[c["measure"]], m[c["baseline"]]
        lines.append(f"| {a['label']} | {triple(a)} | {b['label']} | {triple(b)} | "
                     f"{ratio_text(c['advantage'])} |")
    lines += feeds_markdown(r)
    rp = m["reset_plan_s"]
    lines += ["", f"Reset plan ({rp['label']}): {triple(rp)}; "
              f"open with the view file gone: {triple(m['open_view_rebuilt_s'])}.", "",
              f"Lag at T (90%): one group {triple(m['lag_one_group_at_s'])}, every group "
              f"{triple(m['lag_all_groups_at_s'])}; {m['lag_series_s']['label']}: "
              f"{triple(m['lag_series_s'])}.", ""]
    if r["scaling"]:
        lines += ["## Scaling with history size", "",
                  "State at T = 90% of the history so far (after applying the first N commands); "
                  "throughput of Ledger.apply over the commands since the previous size. "
                  "See scaling.png.", "",
                  "| History (commands) | Events | Newest checkpoint at or before T (seq) | "
                  "Events after it, up to T | State at T | Ledger.apply (interval) |",
                  "|---|---|---|---|---|---|"]
        for s in r["scaling"]:
            st = {**s["state_at_s"], "unit": "s"}
            tp = {**s["commands_per_s_interval"], "unit": "cmd/s"}
            cp = f"{s['checkpoint_seq']:,}" if s["checkpoint_seq"] is not None else "none"
            after = s.get("events_after_checkpoint")
            lines.append(f"| {s['commands']:,} | {s['events']:,} | {cp} | "
                         f"{after:,} | {triple(st)} | {triple(tp)} |" if after is not None else
                         f"| {s['commands']:,} | {s['events']:,} | {cp} | ? | {triple(st)} | "
                         f"{triple(tp)} |")
        lines.append("")
    lines += ["## Peak RSS per phase (process; Spark: largest of Python and JVM)", "",
              "| Phase | Peak RSS | Python process |", "|---|---|---|"]
    for name, v in r["peak_rss"].items():
        lines.append(f"| {name} | {triple(v)} | {triple({**v['python_mib'], 'unit': 'MiB'})} |")
    lines += ["", "## Optional parts", ""]
    for name in ("storage_bench", "compaction_bench"):
        e = r["extras"].get(name, {"status": "not run"})
        lines.append(f"- `bench/{name}.py`: {e['status']}")
        res = e.get("result") or {}
        if isinstance(res.get("targets"), dict):
            for k, v in res["targets"].items():
                lines.append(f"  - {k}: {'pass' if v else 'MISSED'}")
        for label, path in EXTRA_FIGURES[name]:
            v = _dig(res, path)
            if v is not None:
                lines.append(f"  - {label}: {v}")
        if res:
            lines.append("  - all figures in latest.json under `extras`; one run (it does not repeat)")
    if "compaction" in r.get("skipped", {}):
        lines.append(f"- Spark compaction: {r['skipped']['compaction']}")
    ck = r["checks"]
    lines += ["", "## Checks", "",
              f"- Ledger.apply errors per repeat: {ck['ledger_apply_errors']}; events equal the "
              f"reference fold's: {ck['ledger_events_equal_reference']}",
              f"- state at T agrees with the dict fold (clustering groups): ledger "
              f"{ck['ledger_state_at_agrees_with_dict_fold']}, SQLite "
              f"{ck['sqlite_state_at_agrees_with_dict_fold']}; SQLite GROUP BY = seek: "
              f"{ck['sqlite_group_by_equals_seek']}",
              f"- group history rows: {ck['history_rows']}; reset plan items: "
              f"{ck['reset_plan_items']}; recovery tail events: {ck['recovery_tail_events']} "
              f"(sealed segments {ck['recovery_sealed_segments']}, checkpoints at "
              f"{ck['recovery_checkpoints']}, events replayed at open "
              f"{ck['recovery_events_replayed_at_open']})",
              f"- lag: group statuses of the whole ledger {ck.get('lag_statuses')}; one group's "
              f"lag_ms equals progress's: {ck.get('lag_ms_equals_progress')}"]
    if r["failures"]:
        lines += ["", "## Failed phases", ""]
        for name, f in r["failures"].items():
            lines.append(f"- {name}: {f['error']}")
    lines += ["", "## How measured", "",
              "- Ledger.apply: the pinned NDJSON decoded to dicts before each timed call (decode "
              "and generation not counted), fed in chunks of "
              f"{cfg['apply_chunk']:,} commands; fixed injected clock (ledger time = the commands' "
              "ts). SQLite / DuckDB ingest the event rows the reference fold derives from the same "
              "stream, one transaction per 10,000 commands, timing only the store calls (their "
              "fold and row conversion are not counted).",
              "- Bytes per event: sealed = sum of sealed segment bytes / events after rolling the "
              "active segment; SQLite after a truncating checkpoint and VACUUM.",
              f"- Lookups: {cfg['lookups']:,} sampled keys per pass (DuckDB "
              f"{cfg['duckdb_lookups']:,}), one warm-up pass (ledger); p50/p99 per pass. State at "
              "T: T at 90% of the history; SQLite GROUP BY on the table without the extra index, "
              "seek on the covering index (first repeat: the database ingested with the index, "
              "whose ingest is timed once; later repeats: the index built on the plain table).",
              "- Lag: the last apply repeat's ledger opened read-only (as `offset-ledger lag` "
              "opens it) with the clock at its last event (now), 5 calls per figure; one group is "
              "GID_app-017; T at 90% of its time span; the series spans the whole history.",
              "- Open: a ledger whose history is one unsealed tail (built with durability none), "
              "copied fresh before each timed open; page cache warm.",
              "- Peak RSS: ru_maxrss of the phase's process (each phase and repeat is its own "
              "process), and VmHWM of its child processes (the Spark JVM)."]
    return "\n".join(lines) + "\n"


def feeds_markdown(r: dict) -> list[str]:
    """Every feed, the slowest (by the CLI's advantage over SQLite) first."""
    m, ck = r["measures"], r["checks"]
    rows = []
    for f in FEED_NAMES:
        cli, arrow, sq = (m[f"feed_{f}_{p}_commands_per_s"] for p in FEED_PATHS)
        if sq.get("median") is None:
            continue
        rows.append((advantage(cli, sq), advantage(arrow, sq), f, cli, arrow, sq))
    if not rows:
        return []
    rows.sort(key=lambda x: (x[0] or {}).get("median") or 0.0)
    n = r["config"].get("feed_commands")
    out = ["", f"## Feeds ({n:,} commands each; slowest first)", "",
           "`offset-ledger apply FILE.ndjson` in a process of its own (wall time, so Python's "
           "start and the imports count), `Ledger.apply_arrow` of the Parquet twin in process, "
           "SQLite's durable ingest of the events apply_arrow wrote (store calls only).", "",
           "| Feed | NDJSON apply (CLI) | CPU s | x SQLite | apply_arrow | CPU s | x SQLite | "
           "SQLite ingest |", "|---|---|---|---|---|---|---|---|"]
    cli_cpu, arrow_cpu = ck.get("feed_cli_cpu_s") or {}, ck.get("feed_arrow_cpu_s") or {}
    for a_cli, a_arrow, f, cli, arrow, sq in rows:
        c1, c2 = cli_cpu.get(f), arrow_cpu.get(f)
        out.append(f"| {f} | {triple(cli)} | {'n/a' if c1 is None else f'{c1:.2f}'} | "
                   f"{ratio_text(a_cli)} | {triple(arrow)} | "
                   f"{'n/a' if c2 is None else f'{c2:.2f}'} | {ratio_text(a_arrow)} | "
                   f"{triple(sq)} |")
    out += ["", f"Events per feed (CLI / apply_arrow / SQLite): {ck.get('feed_events')}",
            ""]
    return out


# ----------------------------------------------------------------------------- plot


def plot(r: dict, path: Path) -> None:
    """Throughput and state-at-T time against history size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sc = r["scaling"]
    if not sc:
        raise ValueError("no scaling points")
    m = r["measures"]
    x = [s["commands"] for s in sc]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.3))

    def errbar(ax, xs, sums, label, **kw):
        med = [s["median"] for s in sums]
        lo = [s["median"] - s["min"] for s in sums]
        hi = [s["max"] - s["median"] for s in sums]
        ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=4, label=label, **kw)

    errbar(a1, x, [s["commands_per_s_interval"] for s in sc], "Ledger.apply (interval)")
    for key, style in (("sqlite_commands_per_s", "--"), ("duckdb_commands_per_s", ":")):
        if m[key]["median"] is not None:
            a1.axhline(m[key]["median"], ls=style, color="gray" if "sqlite" in key else "tab:green",
                       label=f"{m[key]['label']} (full size)")
    if m["sqlite_commands_per_s"]["median"] is not None:
        a1.axhline(3 * m["sqlite_commands_per_s"]["median"], ls="-.", color="tab:red",
                   label="target: 3x SQLite")
    a1.set_xscale("log")
    a1.set_yscale("log")
    a1.set_xlabel("history size (commands)")
    a1.set_ylabel("commands / s")
    a1.set_title("throughput vs history size")
    a1.legend(fontsize=7, loc="center right", framealpha=0.9)

    errbar(a2, x, [s["state_at_s"] for s in sc], "Ledger.state_at (checkpoints)")
    for s in sc:
        if s.get("events_after_checkpoint") is not None:
            a2.annotate(f"{s['events_after_checkpoint'] / 1000:.0f}k ev after cp",
                        (s["commands"], s["state_at_s"]["median"]), textcoords="offset points",
                        xytext=(4, -12), fontsize=6)
    for key, mk, shift in (("sqlite_state_at_group_by_s", "s", 1.0),
                           ("sqlite_state_at_seek_s", "^", 1.07), ("duckdb_state_at_s", "v", 0.93)):
        if m[key]["median"] is not None:  # shifted a little so that no marker hides another
            a2.plot([x[-1] * shift], [m[key]["median"]], mk, ms=8,
                    label=f"{m[key]['label']} (full size)")
    nc = m["state_at_unsealed_tail_s"]
    if nc["median"] is not None:
        a2.plot([r["config"]["recovery_commands"]], [nc["median"]], "x", ms=9, color="black",
                label="Ledger.state_at, unsealed-tail ledger")
    a2.set_xscale("log")
    a2.set_yscale("log")
    a2.set_xlabel("history size (commands)")
    a2.set_ylabel("seconds (T at 90% of history)")
    a2.set_title("state at T vs history size")
    a2.legend(fontsize=7, loc="upper left", framealpha=0.9)
    fig.suptitle(f"offset-ledger bench, size {r['size']}, {r['started_at']} "
                 f"(median, bars = min..max of repeats)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.report [DIR]`: rewrite latest.md and scaling.png from DIR/latest.json."""
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m bench.report", description=main.__doc__)
    ap.add_argument("dir", type=Path, nargs="?", default=Path(__file__).resolve().parent / "results")
    ns = ap.parse_args(argv)
    data = json.loads((ns.dir / "latest.json").read_text())
    raw = {k: v for k, v in data.items() if k not in BUILT}
    out = build(raw)
    (ns.dir / "latest.md").write_text(markdown(out))
    plot(out, ns.dir / "scaling.png")
    return 0


#: Keys `build` adds to the raw record (dropped and rebuilt by `main`).
BUILT = ("measures", "targets", "comparisons", "scaling", "peak_rss", "checks", "extras",
         "failures")

if __name__ == "__main__":
    raise SystemExit(main())
