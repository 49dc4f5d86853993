"""`python -m bench.http_stacks.run`: the candidate stacks under wrk and at a fixed rate.

Why this shape: every stack runs the same group-commit app (group_commit.py) in one process;
rounds interleave the stacks (in a new shuffled order each round) so that a slow minute of the
shared machine does not land on one stack only; each figure is kept per run, and the summary
gives min / median / max over the rounds. Raw runs go to a JSON file, the summary to stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench import http_load
from bench.http_stacks.measure import PYTHON, CpuMeter, RunningServer, Target, wait_for_quiet

STACKS: dict[str, Target] = {
    "uvicorn+starlette": Target("uvicorn+starlette", [
        PYTHON, "-m", "uvicorn", "bench.http_stacks.starlette_app:app", "--host", "127.0.0.1",
        "--port", "{port}", "--loop", "uvloop", "--http", "httptools", "--no-access-log",
        "--log-level", "warning"]),
    "granian-asgi+starlette": Target("granian-asgi+starlette", [
        PYTHON, "-m", "granian", "--interface", "asgi", "--loop", "uvloop", "--host", "127.0.0.1",
        "--port", "{port}", "--workers", "1", "--runtime-threads", "1", "--log-level", "warning",
        "bench.http_stacks.starlette_app:app"]),
    "granian-rsgi": Target("granian-rsgi", [
        PYTHON, "-m", "granian", "--interface", "rsgi", "--loop", "uvloop", "--host", "127.0.0.1",
        "--port", "{port}", "--workers", "1", "--runtime-threads", "1", "--log-level", "warning",
        "bench.http_stacks.granian_rsgi:app"]),
    "aiohttp": Target("aiohttp", [PYTHON, "-m", "bench.http_stacks.aiohttp_app", "--port", "{port}"]),
}


MAX_OTHER_CORES = 0.35
"""A run during which other processes used more than this is run again (up to RETRIES times)."""
RETRIES = 2


def measure_wrk(server: RunningServer, connections: list[int], duration_s: float,
                max_wait_s: float = 900.0, retries: int = RETRIES) -> list[dict]:
    """One wrk run per connection count against a warmed-up server, with its CPU meters."""
    http_load.run_wrk(server.commit_url, 2, 16)  # warm-up: imports, caches, allocator
    rows = []
    for conns in connections:
        for attempt in range(retries + 1):
            meter = CpuMeter(server.proc.pid)
            try:
                res = http_load.run_wrk(server.commit_url, duration_s, conns)
            except RuntimeError as exc:
                raise RuntimeError(f"{exc} (server exit code: {server.proc.poll()})") from exc
            cpu = meter.stop()
            if cpu["other_cores"] <= MAX_OTHER_CORES or attempt == retries:
                break
            print(f"  {conns} connections: others used {cpu['other_cores']:.2f} cores; again",
                  file=sys.stderr, flush=True)
            wait_for_quiet(max_wait_s=max_wait_s)
        rows.append({"connections": conns, **res.as_dict(), **cpu, "attempts": attempt + 1,
                     "server_cpu_us_per_req": cpu["server_cpu_s"] / res.requests * 1e6
                     if res.requests else None})
    return rows


def measure_fixed(server: RunningServer, rate: float, duration_s: float, connections: int,
                  max_wait_s: float = 900.0, retries: int = RETRIES) -> dict:
    """One fixed-rate run against a warmed-up server, with its CPU meters."""
    http_load.run_wrk(server.commit_url, 2, 16)
    for attempt in range(retries + 1):
        meter = CpuMeter(server.proc.pid)
        res = http_load.run_fixed_rate(server.commit_url, rate, duration_s, connections)
        cpu = meter.stop()
        if cpu["other_cores"] <= MAX_OTHER_CORES or attempt == retries:
            break
        print(f"  fixed rate: others used {cpu['other_cores']:.2f} cores; again", file=sys.stderr, flush=True)
        wait_for_quiet(max_wait_s=max_wait_s)
    return {"connections": connections, **res.as_dict(), **cpu, "attempts": attempt + 1,
            "server_cpu_us_per_req": cpu["server_cpu_s"] / res.requests * 1e6 if res.requests else None}


def summarize(runs: list[dict], keys: tuple[str, ...], fields: tuple[str, ...]) -> list[dict]:
    """min / median / max of each field over the runs sharing `keys`."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        groups[tuple(r[k] for k in keys)].append(r)
    out = []
    for key, rs in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        row: dict = dict(zip(keys, key, strict=True))
        row["n"] = len(rs)
        for f in fields:
            vals = sorted(r[f] for r in rs if r.get(f) is not None)
            if vals:
                row[f] = (vals[0], statistics.median(vals), vals[-1])
        out.append(row)
    return out


def _fmt(triple: tuple[float, float, float] | None, digits: int) -> str:
    if triple is None:
        return "-"
    lo, med, hi = triple
    return f"{med:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def markdown(summary: list[dict], keys: tuple[str, ...], fields: tuple[tuple[str, int], ...]) -> str:
    """A markdown table: median (min-max) per field."""
    head = [*keys, "n", *(f for f, _ in fields)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in summary:
        cells = [str(row[k]) for k in keys] + [str(row["n"])]
        cells += [_fmt(row.get(f), d) for f, d in fields]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


WRK_FIELDS = (("requests_per_s", 0), ("p50_ms", 2), ("p99_ms", 2), ("server_cpu_us_per_req", 0),
              ("other_cores", 2), ("non_2xx", 0), ("errors", 0))
FIXED_FIELDS = (("requests_per_s", 0), ("p50_ms", 2), ("p99_ms", 2), ("p999_ms", 2),
                ("server_cpu_us_per_req", 0), ("dispatch_lag_p99_ms", 2), ("other_cores", 2),
                ("errors", 0))


def save(args: argparse.Namespace, wrk_runs: list[dict], fixed_runs: list[dict],
         failures: list[dict]) -> None:
    """Write every run so far (after each cell, so that a crash loses at most one cell)."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                    "args": vars(args) | {"out": str(args.out)}, "wrk": wrk_runs,
                                    "fixed_rate": fixed_runs, "failures": failures}, indent=1))


def main(argv: list[str] | None = None) -> None:
    """Parse the options, run the rounds, write the raw runs and print the summary tables."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--stacks", default=",".join(STACKS))
    ap.add_argument("--modes", default="thread,inline,none",
                    help="HTTP_BENCH_SYNC values: thread, inline, none")
    ap.add_argument("--connections", default="1,16,64")
    ap.add_argument("--duration", type=float, default=12.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fixed-rate", type=float, default=2000.0, help="0: no fixed-rate runs")
    ap.add_argument("--fixed-duration", type=float, default=15.0)
    ap.add_argument("--fixed-connections", type=int, default=64)
    ap.add_argument("--out", type=Path, default=Path("bench/results/http_stacks-latest.json"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-wait", type=float, default=900.0,
                    help="seconds to wait for other jobs to quiet down before a cell runs anyway")
    ap.add_argument("--retries", type=int, default=RETRIES,
                    help=f"runs again when others used over {MAX_OTHER_CORES} cores meanwhile")
    args = ap.parse_args(argv)

    stacks = [STACKS[s] for s in args.stacks.split(",")]
    modes = args.modes.split(",")
    conns = [int(c) for c in args.connections.split(",")]
    http_load.wrk_path()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="http-stacks-"))
    wrk_runs: list[dict] = []
    fixed_runs: list[dict] = []
    failures: list[dict] = []
    for rnd in range(args.rounds):
        cells = [(t, m) for t in stacks for m in modes]
        rng.shuffle(cells)
        for target, mode in cells:
            quiet = wait_for_quiet(max_wait_s=args.max_wait)
            print(f"round {rnd + 1}/{args.rounds}: {target.name} sync={mode} "
                  f"(others {quiet:.2f} cores before)", file=sys.stderr, flush=True)
            env = {"HTTP_BENCH_SYNC": mode, "HTTP_BENCH_FILE": str(tmp / f"{target.name}-{mode}.log")}
            tag = {"stack": target.name, "sync": mode, "round": rnd}
            try:
                with RunningServer(target, tmp / f"{target.name}-{mode}-{rnd}.out", env) as server:
                    for row in measure_wrk(server, conns, args.duration, args.max_wait, args.retries):
                        wrk_runs.append({**tag, **row})
                    if args.fixed_rate and mode == "thread":
                        row = measure_fixed(server, args.fixed_rate, args.fixed_duration,
                                            args.fixed_connections, args.max_wait, args.retries)
                        fixed_runs.append({**tag, **row})
            except RuntimeError as exc:  # the server died or wrk could not reach it: keep the rest
                print(f"  {target.name} sync={mode} failed: {exc}", file=sys.stderr, flush=True)
                failures.append({**tag, "error": str(exc)})
            save(args, wrk_runs, fixed_runs, failures)
    print(markdown(summarize(wrk_runs, ("stack", "sync", "connections"), tuple(f for f, _ in WRK_FIELDS)),
                   ("stack", "sync", "connections"), WRK_FIELDS))
    if fixed_runs:
        print()
        print(markdown(summarize(fixed_runs, ("stack", "offered_per_s"), tuple(f for f, _ in FIXED_FIELDS)),
                       ("stack", "offered_per_s"), FIXED_FIELDS))
    print(f"\nraw runs: {args.out}; server logs: {tmp}", file=sys.stderr)


if __name__ == "__main__":
    main()
