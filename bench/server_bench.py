"""`python -m bench.server_bench`: `offset-ledger serve` against its targets (issue 14), in one run.

- Single-commit requests, durability always, wrk at 1 and 64 connections: the ledger server's
  64/1 ratio (group commit: >= 5x), and its rate against the PostgreSQL reference server
  (bench/baselines/pg_server.py on the same HTTP stack, history insert + increase-only upsert
  per request, synchronous_commit=on) at 64 connections (>= 3x). Rounds interleave the two.
- Batched requests (`POST /v1/commands`, 1,000 commits each, 4 senders): commits/s against the
  in-process `Ledger.submit` of the same batches (>= 0.8x).
- Where the cores are the limit (issue 23): the requests/s the cores would give at 64
  connections if none ever idled (cores over the server's and the load generator's CPU per
  request), and two servers on the same cores at once (32 connections each) against one at 64:
  whether a second HTTP worker process could raise the figure.
- p50 / p99 of single commits at a fixed offered load (2,000 requests/s over 64 connections,
  latency counted from when each request was due: p99 < 10 ms), and the server's CPU per commit;
  once after the batched run (a ledger holding a million events) and once on a fresh server
  pinned to one core with this driver on the other (taskset), each beside the server's own
  histograms (request, batch, fsync, garbage-collector pauses, from /metrics) and what the
  writer published in that window (seals, checkpoints: each holds the writer thread tens of
  ms, so a window that holds the publication of the batched run's 1M-event seal measures it).

Prints a summary and writes bench/results/server-latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import http_load, server_histograms
from bench.baselines.pg_bench import reference_target
from bench.http_stacks.measure import CpuMeter, RunningServer, Target, wait_for_quiet
from bench.pg_cluster import pg_cluster
from storage import OsFileSystem
from storage import manifest as manifest_io

RESULTS = Path(__file__).resolve().parent / "results"
BATCH_COMMITS = 1_000
BATCH_SENDERS = 4
FIXED_RATE = 2_000.0


def ledger_target(data: Path) -> Target:
    exe = Path(sys.executable).parent / "offset-ledger"
    return Target("ledger", [str(exe), "--data-dir", str(data), "serve", "--port", "{port}"])


def fixed_rate(server: RunningServer, duration_s: float, data: Path) -> dict[str, Any]:
    """FIXED_RATE commits/s for `duration_s`: the client's latencies, the server's histograms
    over the same span, its CPU per commit, and the seals and checkpoints its writer published
    in the span (`data`: the server's data directory)."""
    before = server_histograms.scrape(server.base_url)
    listed = published(data)
    meter = CpuMeter(server.proc.pid)
    res = http_load.run_fixed_rate(server.commit_url, FIXED_RATE, duration_s, 64)
    cpu = meter.stop()
    return {**res.as_dict(), **cpu,
            "server_cpu_us_per_req": cpu["server_cpu_s"] / max(res.requests, 1) * 1e6,
            "server": server_histograms.delta(before, server_histograms.scrape(server.base_url)),
            "published": {kind: len(now - listed[kind])
                          for kind, now in published(data).items()}}


def published(data: Path) -> dict[str, set[int]]:
    """The first seqs of the sealed segments and the seqs of the checkpoints a data
    directory's manifest lists (read as any reader reads it)."""
    found = manifest_io.load(OsFileSystem(), data / "log")
    if found is None:
        return {"seals": set(), "checkpoints": set()}
    return {"seals": {e.base_seq for e in found.segments},
            "checkpoints": {c.seq for c in found.checkpoints}}


def fixed_rate_pinned(work: Path, duration_s: float) -> dict[str, Any]:
    """`fixed_rate` on a fresh server pinned to one core, this driver pinned to another: the
    server's tail on the core it has, without the driver's share in it."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return {"not_run": f"{len(cores)} core(s): nothing to pin the driver away to"}
    target = ledger_target(work / "ledger-pinned")
    target = Target(target.name, ["taskset", "-c", str(cores[0]), *target.argv], target.env)
    with RunningServer(target, work / "ledger-pinned.log") as server:
        http_load.run_fixed_rate(server.commit_url, FIXED_RATE / 4, 2, 64)  # warm-up
        os.sched_setaffinity(0, set(cores[1:]))
        try:
            return {"server_cores": [cores[0]], "driver_cores": cores[1:],
                    **fixed_rate(server, duration_s, work / "ledger-pinned")}
        finally:
            os.sched_setaffinity(0, set(cores))


def wrk_rows(server: RunningServer, connections: list[int], duration_s: float) -> list[dict]:
    http_load.run_wrk(server.commit_url, 2, 16)  # warm-up
    rows = []
    for conns in connections:
        meter = CpuMeter(server.proc.pid)
        res = http_load.run_wrk(server.commit_url, duration_s, conns)
        cpu = meter.stop()
        rows.append({"connections": conns, **res.as_dict(), **cpu,
                     "server_cpu_us_per_req": cpu["server_cpu_s"] / max(res.requests, 1) * 1e6})
    return rows


def two_servers(work: Path, duration_s: float) -> dict[str, Any]:
    """Two ledger servers on these cores at once (each its own data directory and writer),
    32 connections each, against one server at 64 in the same call: whether a second HTTP
    worker process could raise the 64-connection figure, or the cores are the limit."""
    one_target = ledger_target(work / "ledger-one")
    with RunningServer(one_target, work / "ledger-one.log") as server:
        one = wrk_rows(server, [64], duration_s)[0]
    servers = [RunningServer(ledger_target(work / f"ledger-two-{i}"), work / f"ledger-two-{i}.log")
               for i in range(2)]
    try:
        results: list[http_load.LoadResult | None] = [None, None]

        def drive(i: int, seconds: float) -> None:
            results[i] = http_load.run_wrk(servers[i].commit_url, seconds, 32)

        for seconds in (2.0, duration_s):  # a warm-up, then the counted run
            threads = [threading.Thread(target=drive, args=(i, seconds)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        for server in servers:
            server.stop()
    both = sum(r.requests_per_s for r in results if r is not None)
    return {"one_at_64": one["requests_per_s"], "two_at_32_each": both,
            "two_over_one": both / one["requests_per_s"]}


def core_ceiling(rows: list[dict], pg_many: float) -> dict[str, float]:
    """The requests/s these cores would give at 64 connections if no core ever idled: the
    cores over the server's and the load generator's CPU per request (medians), what the
    server reached of it, and the ceiling over the PostgreSQL reference."""
    at_64 = [r for r in rows if r["connections"] == 64]
    server_us = statistics.median(r["server_cpu_us_per_req"] for r in at_64)
    driver_us = statistics.median(r["driver_cpu_s"] / max(r["requests"], 1) * 1e6 for r in at_64)
    cores = len(os.sched_getaffinity(0))
    ceiling = cores * 1e6 / (server_us + driver_us)
    reached = median_of(rows, 64)
    return {"cores": cores, "server_cpu_us_per_req": server_us,
            "driver_cpu_us_per_req": driver_us, "ceiling_req_per_s": ceiling,
            "reached_share": reached / ceiling, "ceiling_over_postgres": ceiling / pg_many}


def batched(url: str, seconds: float) -> dict[str, float]:
    """Senders posting arrays of BATCH_COMMITS commits (each its own keys): commits/s."""
    import urllib3

    pool = urllib3.PoolManager(maxsize=BATCH_SENDERS)
    done = [0] * BATCH_SENDERS
    stop = time.monotonic() + seconds

    def sender(i: int) -> None:
        offset = 0
        while time.monotonic() < stop:
            offset += 1
            body = json.dumps([{"op": "commit", "group": f"b{i}", "topic": "t",
                                "queue_id": k, "offset": offset} for k in range(BATCH_COMMITS)])
            r = pool.request("POST", url + "/v1/commands", body=body,
                             headers={"Content-Type": "application/json"})
            if r.status != 200:
                raise RuntimeError(f"batched commits: {r.status} {r.data[:200]!r}")
            done[i] += BATCH_COMMITS

    started = time.monotonic()
    threads = [threading.Thread(target=sender, args=(i,)) for i in range(BATCH_SENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    return {"commits": sum(done), "seconds": elapsed, "commits_per_s": sum(done) / elapsed}


def in_process(seconds: float) -> dict[str, float]:
    """The same batches through `Ledger.submit` in this process (durability always)."""
    from ledger import Ledger

    root = Path(tempfile.mkdtemp(prefix="server-bench-submit-"))
    try:
        with Ledger.open(root) as led:
            done, offset = 0, 0
            started = time.monotonic()
            while time.monotonic() - started < seconds:
                offset += 1
                for i in range(BATCH_SENDERS):
                    led.submit([{"op": "commit", "group": f"b{i}", "topic": "t", "queue_id": k,
                                 "offset": offset} for k in range(BATCH_COMMITS)])
                    done += BATCH_COMMITS
            elapsed = time.monotonic() - started
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"commits": done, "seconds": elapsed, "commits_per_s": done / elapsed}


def median_of(rows: list[dict], conns: int, field: str = "requests_per_s") -> float:
    return statistics.median(r[field] for r in rows if r["connections"] == conns)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-wait", type=float, default=120.0,
                    help="seconds to wait for other jobs to quiet down before a run goes anyway")
    ap.add_argument("--out", type=Path, default=RESULTS / "server-latest.json")
    args = ap.parse_args(argv)
    http_load.wrk_path()
    work = Path(tempfile.mkdtemp(prefix="server-bench-"))
    ledger_rows: list[dict] = []
    pg_rows: list[dict] = []
    out: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "args": {
        "duration": args.duration, "rounds": args.rounds}}
    try:
        with pg_cluster() as pg:
            for rnd in range(args.rounds):
                for name in (("ledger", "pg") if rnd % 2 == 0 else ("pg", "ledger")):
                    wait_for_quiet(max_wait_s=args.max_wait)
                    if name == "ledger":
                        target = ledger_target(work / f"ledger-{rnd}")
                    else:
                        target = reference_target("granian-rsgi", pg.dsn, 16, "cte")
                    with RunningServer(target, work / f"{name}-{rnd}.log") as server:
                        rows = wrk_rows(server, [1, 64], args.duration)
                        (ledger_rows if name == "ledger" else pg_rows).extend(
                            {"round": rnd, **r} for r in rows)
        wait_for_quiet(max_wait_s=args.max_wait)
        with RunningServer(ledger_target(work / "ledger-batched"),
                           work / "ledger-batched.log") as server:
            out["batched"] = batched(server.base_url, args.duration)
            wait_for_quiet(max_wait_s=args.max_wait)
            out["fixed_rate"] = fixed_rate(server, args.duration, work / "ledger-batched")
        wait_for_quiet(max_wait_s=args.max_wait)
        out["fixed_rate_pinned"] = fixed_rate_pinned(work, args.duration)
        out["in_process"] = in_process(args.duration)
        wait_for_quiet(max_wait_s=args.max_wait)
        out["two_servers"] = two_servers(work, args.duration)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["ledger_wrk"], out["pg_wrk"] = ledger_rows, pg_rows
    one, many = median_of(ledger_rows, 1), median_of(ledger_rows, 64)
    pg_many = median_of(pg_rows, 64)
    out["targets"] = {
        "group_commit_64_over_1": {"value": many / one, "target": 5.0},
        "over_postgres_at_64": {"value": many / pg_many, "target": 3.0},
        "batched_over_in_process": {"value": out["batched"]["commits_per_s"]
                                    / out["in_process"]["commits_per_s"], "target": 0.8},
        "p99_ms_at_2k": {"value": out["fixed_rate"]["p99_ms"], "target": 10.0, "lower": True},
    }
    if "p99_ms" in out["fixed_rate_pinned"]:
        out["targets"]["p99_ms_at_2k_pinned"] = {
            "value": out["fixed_rate_pinned"]["p99_ms"], "target": 10.0, "lower": True}
    out["cpu_us_per_commit_at_64"] = median_of(ledger_rows, 64, "server_cpu_us_per_req")
    out["core_ceiling"] = core_ceiling(ledger_rows, pg_many)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    print(summary(out))
    return out


def fixed_line(name: str, run: dict[str, Any]) -> str:
    if "p99_ms" not in run:
        return f"fixed {FIXED_RATE:.0f} req/s, {name}: not run ({run.get('not_run')})"
    server = run.get("server", {})

    def le(key: str, q: str) -> str:
        v = server.get(key, {}).get(q)
        return "-" if v is None else f"<={v:g}"

    return (f"fixed {FIXED_RATE:.0f} req/s, {name}: client p50 {run['p50_ms']:.2f} ms, p99 "
            f"{run['p99_ms']:.2f} ms, max {run['max_ms']:.0f} ms; server request p99 "
            f"{le('request_seconds[/v1/commit]', 'p99_le_ms')} ms, batch p99 "
            f"{le('batch_seconds', 'p99_le_ms')} ms, max {le('batch_seconds', 'max_le_ms')} ms, "
            f"gc gen2 max {le('gc_pause_seconds[2]', 'max_le_ms')} ms; "
            f"{run['server_cpu_us_per_req']:.0f} us server CPU per commit; published in the "
            f"window: {_count(run, 'seals', 'seal')}, {_count(run, 'checkpoints', 'checkpoint')}")


def _count(run: dict[str, Any], key: str, noun: str) -> str:
    n = run.get("published", {}).get(key)
    return f"? {noun}s" if n is None else f"{n} {noun}{'' if n == 1 else 's'}"


def summary(out: dict[str, Any]) -> str:
    t = out["targets"]
    lines = [f"ledger server: {median_of(out['ledger_wrk'], 1):.0f} req/s at 1 connection, "
             f"{median_of(out['ledger_wrk'], 64):.0f} at 64 "
             f"({out['cpu_us_per_commit_at_64']:.0f} us CPU per commit at 64)",
             f"PostgreSQL reference: {median_of(out['pg_wrk'], 1):.0f} at 1, "
             f"{median_of(out['pg_wrk'], 64):.0f} at 64",
             f"batched: {out['batched']['commits_per_s']:.0f} commits/s; in process: "
             f"{out['in_process']['commits_per_s']:.0f}",
             *(fixed_line(name, out[key]) for name, key in (
                 ("after the batched run", "fixed_rate"), ("pinned", "fixed_rate_pinned")))]
    c, two = out["core_ceiling"], out["two_servers"]
    lines.append(f"the cores' ceiling at 64: {c['cores']} cores / ({c['server_cpu_us_per_req']:.0f} "
                 f"us server + {c['driver_cpu_us_per_req']:.0f} us load generator per request) = "
                 f"{c['ceiling_req_per_s']:.0f} req/s, {c['ceiling_over_postgres']:.2f}x the "
                 f"PostgreSQL reference; reached {c['reached_share']:.0%} of it")
    lines.append(f"two servers on these cores, 32 connections each: {two['two_at_32_each']:.0f} "
                 f"req/s against one at 64: {two['one_at_64']:.0f} ({two['two_over_one']:.2f}x)")
    for name, v in t.items():
        ok = v["value"] <= v["target"] if v.get("lower") else v["value"] >= v["target"]
        lines.append(f"  {name}: {v['value']:.2f} (target {'<=' if v.get('lower') else '>='} "
                     f"{v['target']}) {'pass' if ok else 'MISSED'}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
