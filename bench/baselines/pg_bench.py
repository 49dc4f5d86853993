"""`python -m bench.baselines.pg_bench`: the PostgreSQL reference server under wrk.

Why: the ledger server's target is ">= 3x the PostgreSQL reference" for single-commit requests
with durability on; this gives the reference's figures on this machine: a throwaway cluster
(pg_cluster.py), the reference server (pg_server.py) with each pool size and SQL shape asked
for, wrk at each connection count, rounds interleaved, min / median / max. CPU is given for the
server process and for PostgreSQL's processes apart.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

from bench import http_load
from bench.http_stacks.measure import PYTHON, CpuMeter, RunningServer, Target, wait_for_quiet
from bench.http_stacks.run import RETRIES, markdown, summarize
from bench.pg_cluster import pg_cluster

FIELDS = (("requests_per_s", 0), ("p50_ms", 2), ("p99_ms", 2), ("server_cpu_us_per_req", 0),
          ("pg_cpu_us_per_req", 0), ("other_cores", 2), ("non_2xx", 0), ("errors", 0))
MAX_OTHER_CORES = 0.35


def postmaster_pid(data_dir: Path) -> int:
    """The postmaster's pid, first line of postmaster.pid."""
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def measure(server: RunningServer, pg_pid: int, connections: list[int], duration_s: float,
            max_wait_s: float = 900.0, retries: int = RETRIES) -> list[dict]:
    """wrk at each connection count (after a warm-up), with server and PostgreSQL CPU."""
    http_load.run_wrk(server.commit_url, 2, 16)
    rows = []
    for conns in connections:
        for attempt in range(retries + 1):
            pg_meter, meter = CpuMeter(pg_pid), CpuMeter(server.proc.pid)
            res = http_load.run_wrk(server.commit_url, duration_s, conns)
            cpu, pg = meter.stop(), pg_meter.stop()
            # the meter counts PostgreSQL as "other": take it out
            other = max(0.0, cpu["other_cores"] - pg["server_cpu_s"] / cpu["wall_s"])
            if other <= MAX_OTHER_CORES or attempt == retries:
                break
            print(f"  {conns} connections: others used {other:.2f} cores; again", file=sys.stderr, flush=True)
            wait_for_quiet(max_wait_s=max_wait_s)
        n = res.requests or 1
        rows.append({"connections": conns, **res.as_dict(), **cpu, "other_cores": other,
                     "pg_cpu_s": pg["server_cpu_s"], "attempts": attempt + 1,
                     "server_cpu_us_per_req": cpu["server_cpu_s"] / n * 1e6,
                     "pg_cpu_us_per_req": pg["server_cpu_s"] / n * 1e6})
    return rows


def reference_target(front: str, dsn: str, pool: int, sql: str) -> Target:
    """The reference server (pg_server.py) on the `aiohttp` or `granian-rsgi` front end."""
    name = f"pg-{front}-{sql}-pool{pool}"
    if front == "aiohttp":
        return Target(name, [PYTHON, "-m", "bench.baselines.pg_server", "--dsn", dsn, "--port", "{port}",
                             "--pool", str(pool), "--sql", sql])
    if front == "granian-rsgi":
        return Target(name, [PYTHON, "-m", "granian", "--interface", "rsgi", "--loop", "uvloop", "--host",
                             "127.0.0.1", "--port", "{port}", "--workers", "1", "--runtime-threads", "1",
                             "--log-level", "warning", "bench.baselines.pg_server:rsgi_app"],
                      {"PG_REF_DSN": dsn, "PG_REF_POOL": str(pool), "PG_REF_SQL": sql})
    raise ValueError(f"front end {front!r}: expected aiohttp or granian-rsgi")


def main(argv: list[str] | None = None) -> None:
    """Start the cluster, measure each (pool, sql) variant over the rounds, print the summary."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--connections", default="1,64")
    ap.add_argument("--pools", default="16,64", help="pool sizes to measure")
    ap.add_argument("--sql", default="cte,tx", help="SQL shapes to measure (pg_server.py)")
    ap.add_argument("--fronts", default="aiohttp", help="HTTP front ends: aiohttp, granian-rsgi")
    ap.add_argument("--duration", type=float, default=12.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("bench/results/pg_reference-latest.json"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-wait", type=float, default=900.0,
                    help="seconds to wait for other jobs to quiet down before a run goes anyway")
    ap.add_argument("--retries", type=int, default=RETRIES)
    args = ap.parse_args(argv)
    http_load.wrk_path()
    conns = [int(c) for c in args.connections.split(",")]
    variants = [(f, int(p), s) for f in args.fronts.split(",") for p in args.pools.split(",")
                for s in args.sql.split(",")]
    rng = random.Random(args.seed)
    logs = Path(tempfile.mkdtemp(prefix="pg-bench-logs-"))
    runs: list[dict] = []
    with pg_cluster() as pg:
        print(f"{pg.version}, port {pg.port}, running as {pg.os_user}", file=sys.stderr, flush=True)
        settings = {k: pg.psql(f"SHOW {k}") for k in ("fsync", "synchronous_commit", "wal_sync_method",
                                                      "full_page_writes", "shared_buffers", "commit_delay")}
        pg_pid = postmaster_pid(pg.data_dir)
        for rnd in range(args.rounds):
            order = list(variants)
            rng.shuffle(order)
            for front, pool, sql in order:
                wait_for_quiet(max_wait_s=args.max_wait)
                print(f"round {rnd + 1}/{args.rounds}: {front} pool={pool} sql={sql}", file=sys.stderr,
                      flush=True)
                target = reference_target(front, pg.dsn, pool, sql)
                with RunningServer(target, logs / f"{target.name}.out") as server:
                    for row in measure(server, pg_pid, conns, args.duration, args.max_wait, args.retries):
                        runs.append({"variant": target.name, "round": rnd, **row})
        rows = int(pg.psql("SELECT count(*) FROM history"))
        keys = int(pg.psql("SELECT count(*) FROM offsets"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "postgres": pg.version,
                                    "settings": settings, "history_rows": rows, "offset_keys": keys,
                                    "args": vars(args) | {"out": str(args.out)}, "wrk": runs}, indent=1))
    print(f"{pg.version}; {settings}")
    print(markdown(summarize(runs, ("variant", "connections"), tuple(f for f, _ in FIELDS)),
                   ("variant", "connections"), FIELDS))
    print(f"\nraw runs: {args.out}; server logs: {logs}", file=sys.stderr)


if __name__ == "__main__":
    main()
