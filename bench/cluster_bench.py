"""`python -m bench.cluster_bench`: shards against one ledger, in one run (issue 26).

- Writes: senders post batches of commits (`Cluster.commands`, the routing client of
  `server.client.open_cluster`) to 4 shards, each its own `offset-ledger serve` process, and the
  same senders through the same client to 1 shard; durability always. Commits/s of each, the
  ratio (target >= 1.6x on these 2 cores), per core, and the CPU a commit costs in the servers
  and in the router, from which a model for N machines follows.
- Reads of one group: the same commits written to 4 shards and to 1 unsharded ledger; a group's
  progress, lag and history through the router against `LedgerClient` on the unsharded server,
  and `offset-ledger --cluster` against `--data-dir` (target: within 1.2x).

Workload: the pinned shape's keys (200 groups x 10 topics x 8 queues; DESIGN.md) as a commits
feed (a broker's, a follower's: the keys' offsets only rise), each sender owning
the groups g with g % senders == sender, batches of 4,000 commits on keys drawn uniformly from
its groups (about 1,000 per shard's request with 4 shards). Rounds interleave 1 and 4 shards;
each records the cores it used and those other processes used meanwhile (`other_cores`: this
machine is shared). Writes bench/results/cluster-latest.json.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.http_stacks.measure import (
    RunningServer,
    Target,
    machine_busy_s,
    own_cpu_s,
    tree_cpu_s,
    wait_for_quiet,
)
from ledger.cluster import shard_of

RESULTS = Path(__file__).resolve().parent / "results"
GROUPS, TOPICS, QUEUES = 200, 10, 8
BATCH_COMMITS = 4_000
SENDERS = 4
EXE = str(Path(sys.executable).parent / "offset-ledger")


def group_name(g: int) -> str:
    return f"group-{g:03d}"


class Feed:
    """One sender's commits: keys of its groups drawn uniformly (a few dozen batches' draws,
    reused), each commit's offset above every earlier one of the sender (so every key's
    offsets rise). Cheap to make: its CPU is counted apart from the router's."""

    PATTERNS = 32

    def __init__(self, sender: int, senders: int, seed: int = 7) -> None:
        rng = random.Random(seed * 1000 + sender)
        keys = [(group_name(g), f"topic-{t}", q) for g in range(sender, GROUPS, senders)
                for t in range(TOPICS) for q in range(QUEUES)]
        self.patterns = [rng.choices(keys, k=BATCH_COMMITS) for _ in range(self.PATTERNS)]
        self.made = 0

    def batch(self) -> list[dict[str, Any]]:
        keys = self.patterns[self.made % self.PATTERNS]
        base = self.made * BATCH_COMMITS
        self.made += 1
        return [{"op": "commit", "group": g, "topic": t, "queue_id": q, "offset": base + i}
                for i, (g, t, q) in enumerate(keys)]


class Shards:
    """N `serve` processes over fresh roots and the cluster file naming them."""

    def __init__(self, work: Path, n: int, name: str) -> None:
        self.dir = work / name
        self.dir.mkdir(parents=True)
        self.roots = [self.dir / f"shard-{i}" for i in range(n)]
        self.servers: list[RunningServer] = []
        for i, root in enumerate(self.roots):
            target = Target(f"{name}-{i}", [EXE, "--data-dir", str(root), "serve", "--port",
                                            "{port}"])
            self.servers.append(RunningServer(target, self.dir / f"serve-{i}.log"))
        self.cluster = self.dir / "cluster.toml"
        self.cluster.write_text("".join(f'[[shard]]\nroot = "{r}"\nserver = "{s.base_url}"\n\n'
                                        for r, s in zip(self.roots, self.servers, strict=True)))
        self.local = self.dir / "roots.toml"  # the same shards read from their roots
        self.local.write_text("".join(f'[[shard]]\nroot = "{r}"\n\n' for r in self.roots))

    def server_cpu_s(self) -> float:
        return sum(tree_cpu_s(s.proc.pid) for s in self.servers)

    def stop(self) -> None:
        for s in self.servers:
            s.stop()


def write_round(shards: Shards, seconds: float, senders: int) -> dict[str, float]:
    """Senders through one routing client for `seconds`: commits/s and CPU per commit."""
    from server.client import open_cluster

    feeds = [Feed(i, senders) for i in range(senders)]
    done = [0] * senders
    refused = [0] * senders
    feed_cpu = [0.0] * senders
    with open_cluster(shards.cluster, threads=4 * senders, connections=senders) as cluster:
        for f in feeds:  # warm-up: connections, caches, the servers' first batches
            cluster.commands(f.batch())
        stop = time.monotonic() + seconds

        def sender(i: int) -> None:
            while time.monotonic() < stop:
                made = time.thread_time()
                batch = feeds[i].batch()
                feed_cpu[i] += time.thread_time() - made
                results = cluster.commands(batch)
                done[i] += len(results)
                refused[i] += sum(1 for r in results if r.get("error"))

        threads = [threading.Thread(target=sender, args=(i,)) for i in range(senders)]
        server0, client0, busy0 = shards.server_cpu_s(), own_cpu_s(), machine_busy_s()
        wall0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - wall0
        server_cpu = shards.server_cpu_s() - server0
        own = own_cpu_s() - client0
        client_cpu = own - sum(feed_cpu)
        others = max(0.0, machine_busy_s() - busy0 - server_cpu - own)
    commits = sum(done)
    if sum(refused):
        raise RuntimeError(f"{sum(refused)} of {commits} commits refused: the feed is wrong")
    return {"shards": len(shards.roots), "commits": commits, "seconds": wall,
            "commits_per_s": commits / wall,
            "server_cpu_us_per_commit": server_cpu / commits * 1e6,
            "router_cpu_us_per_commit": client_cpu / commits * 1e6,
            "feed_cpu_us_per_commit": sum(feed_cpu) / commits * 1e6,
            "cores_used": (server_cpu + own) / wall, "other_cores": others / wall}


def load_same(targets: list[Shards], batches: int) -> None:
    """The same commits (every sender's first `batches` batches) into every target."""
    from server.client import open_cluster

    for shards in targets:
        with open_cluster(shards.cluster, threads=8) as cluster:
            for i in range(SENDERS):
                feed = Feed(i, SENDERS, seed=11)
                for _ in range(batches):
                    cluster.commands(feed.batch())


def paired(routed: Any, direct: Any, groups: list[str], repeats: int) -> dict[str, float]:
    """Median milliseconds of `routed(g)` and `direct(g)` over the groups, each call of one
    taken right after the other's (the machine's load hits both alike); one untimed call
    each first."""
    times: tuple[list[float], list[float]] = ([], [])
    for g in groups:
        routed(g), direct(g)
        for _ in range(repeats):
            for fn, into in ((routed, times[0]), (direct, times[1])):
                t0 = time.perf_counter()
                fn(g)
                into.append(time.perf_counter() - t0)
    r, d = (statistics.median(t) * 1e3 for t in times)
    return {"routed_ms": r, "unsharded_ms": d, "ratio": r / d}


def read_rounds(sharded: Shards, single: Shards, repeats: int) -> dict[str, Any]:
    """A group's reads through the router (4 shards) against the unsharded server, and the
    CLI's `--cluster` (roots) against `--data-dir`."""
    from server.client import LedgerClient, open_cluster

    groups = [group_name(g) for g in (0, 57, 123, 199)]
    rows: dict[str, Any] = {}
    with open_cluster(sharded.cluster) as cluster, \
            LedgerClient(single.servers[0].base_url) as one:
        calls = {
            "progress": (lambda g: cluster.progress(g), lambda g: one.progress(g)),
            "lag": (lambda g: cluster.lag(group=g), lambda g: one.lag(g)),
            "history --limit 100": (lambda g: cluster.history(group=g, limit=100),
                                    lambda g: one.history(group=g, limit=100)),
        }
        for name, (routed, direct) in calls.items():
            rows[f"client {name}"] = paired(routed, direct, groups, repeats)
    for name in ("progress", "lag"):
        def cli(where: list[str], name: str = name) -> Any:
            return lambda g: subprocess.run([EXE, *where, name, "--group", g, "--json"],
                                            check=True, capture_output=True)

        rows[f"cli {name}"] = paired(cli(["--cluster", str(sharded.local)]),
                                     cli(["--data-dir", str(single.roots[0])]), groups[:2],
                                     max(3, repeats // 4))
    return rows


def quiet_ratio(single: dict[str, float], sharded: dict[str, float], cores: int) -> float:
    """4 shards over 1 on an idle machine of `cores`, from what a commit cost in CPU: one
    shard's server is one process (one interpreter lock: at most a core), the router and the
    feed take the rest; 4 servers and the router share every core."""
    def cost(w: dict[str, float]) -> float:
        return (w["server_cpu_us_per_commit"] + w["router_cpu_us_per_commit"]
                + w["feed_cpu_us_per_commit"])

    one = min(1e6 / single["server_cpu_us_per_commit"], cores * 1e6 / cost(single))
    return (cores * 1e6 / cost(sharded)) / one


def balance(shards: int) -> float:
    """Mean over max of the groups per shard, for the pinned 200 groups (1.0: even)."""
    counts = Counter(shard_of(group_name(g), shards) for g in range(GROUPS))
    return (GROUPS / shards) / max(counts.values())


def model(sharded: dict[str, float], cores: int) -> list[dict]:
    """Commits/s on N machines of `cores` cores, one shard server per core: each server does
    1e6 / server_cpu_us_per_commit on its core, the slowest shard (most groups) sets the pace,
    and routers need router_cpu_us_per_commit of CPU per commit somewhere."""
    per_core = 1e6 / sharded["server_cpu_us_per_commit"]
    rows = []
    for machines in (1, 2, 4, 8, 16):
        n = machines * cores
        rate = n * per_core * balance(n)
        rows.append({"machines": machines, "shards": n, "balance": balance(n),
                     "commits_per_s": rate,
                     "router_cores": rate * sharded["router_cpu_us_per_commit"] / 1e6})
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--senders", type=int, default=SENDERS)
    ap.add_argument("--read-batches", type=int, default=25,
                    help="batches per sender loaded before the read measurements")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--max-wait", type=float, default=120.0)
    ap.add_argument("--out", type=Path, default=RESULTS / "cluster-latest.json")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    out: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "args": vars(args)
                           | {"out": str(args.out)}, "writes": []}
    try:
        for rnd in range(args.rounds):
            for n in ((1, 4) if rnd % 2 == 0 else (4, 1)):
                out["quiet_cores"] = wait_for_quiet(max_wait_s=args.max_wait)
                shards = Shards(work, n, f"w{rnd}-{n}")
                try:
                    out["writes"].append({"round": rnd, **write_round(shards, args.duration,
                                                                      args.senders)})
                finally:
                    shards.stop()
                print(f"  {n} shard(s): {out['writes'][-1]['commits_per_s']:.0f} commits/s",
                      file=sys.stderr, flush=True)
        wait_for_quiet(max_wait_s=args.max_wait)
        sharded, single = Shards(work, 4, "r4"), Shards(work, 1, "r1")
        try:
            load_same([sharded, single], args.read_batches)
            out["reads"] = read_rounds(sharded, single, args.repeats)
        finally:
            sharded.stop()
            single.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    one = [w for w in out["writes"] if w["shards"] == 1]
    four = [w for w in out["writes"] if w["shards"] == 4]
    rate1 = statistics.median(w["commits_per_s"] for w in one)
    rate4 = statistics.median(w["commits_per_s"] for w in four)
    pick = {k: statistics.median(w[k] for w in four) for k in four[0] if k != "round"}
    lone = {k: statistics.median(w[k] for w in one) for k in one[0] if k != "round"}
    out["summary"] = {
        "other_cores": statistics.median(w["other_cores"] for w in out["writes"]),
        "quiet_ratio_from_cpu": quiet_ratio(lone, pick, 2),
        "one_shard_commits_per_s": rate1, "four_shards_commits_per_s": rate4,
        "ratio": rate4 / rate1, "cores": 2, "four_shards_per_core": rate4 / 2,
        "one_shard_per_core": rate1 / 2, "server_cpu_us_per_commit": pick[
            "server_cpu_us_per_commit"], "router_cpu_us_per_commit": pick[
            "router_cpu_us_per_commit"]}
    out["model"] = model(pick, 2)
    out["targets"] = {
        "write_4_over_1": {"value": rate4 / rate1, "target": 1.6},
        **{f"read {k}": {"value": v["ratio"], "target": 1.2, "lower": True}
           for k, v in out["reads"].items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    print(summary(out))
    return out


def summary(out: dict[str, Any]) -> str:
    s = out["summary"]
    lines = [f"writes: 1 shard {s['one_shard_commits_per_s']:.0f} commits/s, 4 shards "
             f"{s['four_shards_commits_per_s']:.0f} ({s['ratio']:.2f}x; per core "
             f"{s['four_shards_per_core']:.0f} against {s['one_shard_per_core']:.0f}); a commit "
             f"costs {s['server_cpu_us_per_commit']:.1f} us in the servers and "
             f"{s['router_cpu_us_per_commit']:.1f} us in the router; other processes used "
             f"{s['other_cores']:.2f} of the 2 cores meanwhile; on an idle machine these CPU "
             f"costs give {s['quiet_ratio_from_cpu']:.2f}x"]
    for name, r in out["reads"].items():
        lines.append(f"read {name}: routed {r['routed_ms']:.2f} ms, unsharded "
                     f"{r['unsharded_ms']:.2f} ms ({r['ratio']:.2f}x)")
    lines.append("model (machines of 2 cores, a shard server per core): " + "; ".join(
        f"{m['machines']}: {m['commits_per_s'] / 1e3:.0f}k/s (balance {m['balance']:.2f}, "
        f"router {m['router_cores']:.1f} cores)" for m in out["model"]))
    for name, v in out["targets"].items():
        ok = v["value"] <= v["target"] if v.get("lower") else v["value"] >= v["target"]
        lines.append(f"  {name}: {v['value']:.2f} (target {'<=' if v.get('lower') else '>='} "
                     f"{v['target']}) {'pass' if ok else 'MISSED'}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
