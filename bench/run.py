"""`python -m bench.run --size smoke|default|full`: the ledger's benchmark against its baselines.

Why: the design's targets (DESIGN.md, "Performance notes") only mean something as ratios to the
obvious alternatives measured in the same run on the same machine. Every phase runs in a process
of its own (`bench.phases`: peak RSS per phase, a crash stays local); the ledger, SQLite and the
reference baselines run interleaved, one repeat of each in turn, so a change in the load of this
shared machine hits all of them alike. Every figure is kept as min/median/max over repeats.

Writes <out>/latest.json (machine, configuration, every figure, targets), <out>/latest.md (the
table of ratios and pass/MISSED) and <out>/scaling.png. Optional parts (Spark compaction,
bench/storage_bench.py, bench/compaction_bench.py) are recorded as skipped, absent or failed
rather than stopping the run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from bench import report, workload

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: Per size: the stream, history sizes of the scaling curve, segment size, repeats and budget.
SIZES: dict[str, dict] = {
    "smoke": {
        "commands": 20_000, "scaling": [5_000, 10_000, 20_000], "segment_events_max": 5_000,
        "recovery_commands": 20_000, "repeat": 3, "query_repeat": 3, "lookups": 2_000,
        "duckdb_lookups": 200, "reset_queues": 1_000, "reset_repeat": 5, "apply_chunk": 8_192,
        "feed_commands": 20_000, "spark": False,
        "extras": False, "quick_extras": True, "compaction_repeat": 1, "budget_s": 60,
    },
    "default": {
        # segments of 100k events (the setting's default is 1M) so that checkpoints, written at
        # each seal, take part in state-at-T within 1M events (the sublinear curve)
        "commands": 1_000_000, "scaling": [100_000, 200_000, 300_000, 500_000, 700_000, 1_000_000],
        "segment_events_max": 100_000, "recovery_commands": 1_000_000, "repeat": 3,
        "query_repeat": 3, "lookups": 10_000, "duckdb_lookups": 300, "reset_queues": 1_000,
        "reset_repeat": 20, "apply_chunk": 131_072, "feed_commands": 1_000_000, "spark": True,
        "extras": True, "quick_extras": True,
        "compaction_repeat": 2, "budget_s": 555,
    },
    "full": {
        "commands": 10_000_000,
        "scaling": [1_000_000, 2_000_000, 3_000_000, 5_000_000, 7_000_000, 10_000_000],
        "segment_events_max": 1_000_000, "recovery_commands": 1_000_000, "repeat": 3,
        "query_repeat": 3, "lookups": 10_000, "duckdb_lookups": 1_000, "reset_queues": 1_000,
        "reset_repeat": 20, "apply_chunk": 131_072, "feed_commands": 1_000_000, "spark": True,
        "extras": True, "quick_extras": False,
        "compaction_repeat": 2, "budget_s": None,
    },
}
SEED = 7
#: Seconds an optional phase is expected to need; skipped when the budget has less left.
EXTRA_ESTIMATE_S = {"compaction": 45.0, "compaction_bench": 90.0, "storage_bench": 30.0}
#: With this much budget left the compaction phase runs twice, else once.
COMPACTION_TWICE_S = 80.0
PHASE_TIMEOUT_S = 3600.0


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cmd(args: list[str]) -> str | None:
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=20, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (p.stdout or p.stderr).strip()
    return text.splitlines()[0] if text and p.returncode == 0 else None


def machine() -> dict:
    cpu_model = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    mem_kb = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kb = int(Path("/proc/meminfo").read_text().split("\n", 1)[0].split()[1])
    dirty = _cmd(["sh", "-c", "git status --porcelain | wc -l"])
    return {
        "cpu_count": os.cpu_count(), "cpu_affinity": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model, "memory_gb": round(mem_kb / 2**20, 1) if mem_kb else None,
        "platform": platform.platform(), "python": platform.python_version(),
        "pyarrow": _version("pyarrow"), "duckdb": _version("duckdb"),
        "pyspark": _version("pyspark"), "numpy": _version("numpy"), "msgspec": _version("msgspec"),
        "matplotlib": _version("matplotlib"), "sqlite": sqlite3.sqlite_version,
        "java": _cmd(["sh", "-c", "java -version 2>&1 | head -1"]),
        "git_commit": _cmd(["git", "rev-parse", "HEAD"]),
        "git_uncommitted_files": int(dirty) if dirty and dirty.isdigit() else None,
    }


def config_for(size: str, args: argparse.Namespace, workdir: Path) -> dict:
    cfg = dict(SIZES[size])
    if args.repeat:
        cfg["repeat"] = args.repeat
    cfg.update(size=size, seed=SEED, workdir=str(workdir), state_at_fraction=0.9,
               commands_file=str(workload.DATA_DIR / f"{workload.file_stem(cfg['commands'], SEED)}"
                                 ".ndjson"),
               recovery_file=str(workload.DATA_DIR / f"{workload.file_stem(cfg['recovery_commands'], SEED)}"
                                 ".ndjson"),
               compaction_bench_events=cfg["commands"], compaction_bench_segments=10)
    if args.no_spark:
        cfg["spark"] = False
    if args.no_extras:
        cfg["extras"] = False
    return cfg


def run_phase(name: str, cfg: dict, workdir: Path, timeout: float | None,
              repeat_index: int | None = None) -> dict:
    """Run one phase in a child process; its record (ok, result or error, rusage, seconds)."""
    tag = name if repeat_index is None else f"{name}-{repeat_index}"
    cfg_path, out_path = workdir / f"{tag}.config.json", workdir / f"{tag}.out.json"
    cfg_path.write_text(json.dumps({**cfg, "repeat_index": repeat_index}))
    out_path.unlink(missing_ok=True)
    t = time.perf_counter()
    log(f"{tag} ...")
    try:
        p = subprocess.run([sys.executable, "-m", "bench.phases", name, str(cfg_path),
                            str(out_path)], cwd=ROOT, timeout=timeout, capture_output=True,
                           text=True)
        stderr, code = p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        stderr, code = (e.stderr or b"").decode(errors="replace") if isinstance(
            e.stderr, bytes) else (e.stderr or ""), None
        record = {"phase": name, "ok": False, "error": f"timed out after {timeout:.0f} s"}
    else:
        if out_path.exists():
            record = json.loads(out_path.read_text())
        else:
            record = {"phase": name, "ok": False,
                      "error": f"child exited with {code} and no result: {stderr[-2000:]}"}
    record["wall_s"] = time.perf_counter() - t
    status = "ok" if record.get("ok") else f"FAILED: {record.get('error')}"
    log(f"{tag} {status} ({record['wall_s']:.1f} s)")
    if not record.get("ok") and stderr:
        record["stderr_tail"] = stderr[-3000:]
    return record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=tuple(SIZES), default="default")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory of latest.*")
    ap.add_argument("--repeat", type=int, help="repeats of every measured phase (default 3)")
    ap.add_argument("--no-spark", action="store_true", help="skip the Spark compaction parts")
    ap.add_argument("--no-extras", action="store_true",
                    help="skip bench/storage_bench.py and bench/compaction_bench.py")
    ap.add_argument("--workdir", type=Path, help="scratch directory (default: under bench/data)")
    ap.add_argument("--keep-work", action="store_true", help="keep the scratch directory")
    args = ap.parse_args(argv)

    started = time.perf_counter()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    load_start = list(os.getloadavg())
    base = args.workdir or workload.DATA_DIR
    base.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench-run-", dir=base))
    cfg = config_for(args.size, args, workdir)
    budget = cfg["budget_s"]
    log(f"size {args.size}: {cfg['commands']:,} commands, {cfg['repeat']} repeats, "
        f"scratch {workdir}")
    phases: dict[str, list[dict]] = {}
    skipped: dict[str, str] = {}

    def add(name: str, rec: dict) -> None:
        phases.setdefault(name, []).append(rec)

    def left() -> float | None:
        return None if budget is None else budget - (time.perf_counter() - started)

    try:
        prep = run_phase("prepare", cfg, workdir, PHASE_TIMEOUT_S)
        add("prepare", prep)
        if not prep.get("ok"):
            raise SystemExit(f"cannot prepare the workload: {prep.get('error')}")
        if cfg["recovery_commands"] != cfg["commands"]:
            add("prepare", run_phase("prepare", {**cfg, "commands": cfg["recovery_commands"]},
                                     workdir, PHASE_TIMEOUT_S))
        for r in range(cfg["repeat"]):
            for name in ("apply", "sqlite", "references", "feeds"):
                add(name, run_phase(name, cfg, workdir, PHASE_TIMEOUT_S, repeat_index=r))
        for name in ("recovery_build", "recovery_open", "reset", "lag"):
            add(name, run_phase(name, cfg, workdir, PHASE_TIMEOUT_S))
        # cheapest first: when the budget runs short, the costly extra is the one left out
        optional = [
            ("compaction", cfg["spark"], "Spark compaction off (--no-spark or smoke)"),
            ("storage_bench", cfg["extras"], "extras off (--no-extras or smoke)"),
            ("compaction_bench", cfg["spark"] and cfg["extras"],
             "Spark or extras off (--no-spark/--no-extras or smoke)"),
        ]
        for name, wanted, why in optional:
            module = {"compaction_bench": "bench.compaction_bench",
                      "storage_bench": "bench.storage_bench"}.get(name)
            remaining = left()
            if not wanted:
                skipped[name] = f"skipped: {why}"
            elif module and importlib.util.find_spec(module) is None:
                skipped[name] = f"absent: {module.replace('.', '/')}.py does not exist (yet)"
            elif remaining is not None and remaining < EXTRA_ESTIMATE_S[name]:
                skipped[name] = (f"skipped: {remaining:.0f} s left of the {budget} s budget, "
                                 f"about {EXTRA_ESTIMATE_S[name]:.0f} s needed")
            else:
                timeout = PHASE_TIMEOUT_S if remaining is None else max(remaining, 30.0)
                run_cfg = cfg
                if name == "compaction" and remaining is not None and remaining < COMPACTION_TWICE_S:
                    run_cfg = {**cfg, "compaction_repeat": 1}
                add(name, run_phase(name, run_cfg, workdir, timeout))
            if name in skipped:
                log(f"{name}: {skipped[name]}")
    finally:
        if not args.keep_work:
            shutil.rmtree(workdir, ignore_errors=True)

    raw = {
        "schema_version": 1,
        "size": args.size,
        "started_at": started_at,
        "elapsed_s": time.perf_counter() - started,
        "budget_s": budget,
        "machine": machine(),
        "load_average": {"start": load_start, "end": list(os.getloadavg())},
        "config": {k: v for k, v in cfg.items() if k not in ("workdir",)},
        "phases": phases,
        "skipped": skipped,
    }
    out = report.build(raw)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    (args.out / "latest.md").write_text(report.markdown(out))
    try:
        report.plot(out, args.out / "scaling.png")
    except Exception as e:  # a missing plot must not lose the figures
        log(f"scaling.png not written: {type(e).__name__}: {e}")
    log(f"done in {out['elapsed_s']:.0f} s: {args.out / 'latest.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
