"""Cluster test fixtures: cluster files over data directories (and real servers), the CLI with
`--cluster`, and a seeded stream of apply lines that a cluster and one ledger both take."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cli import app
from tests.server.conftest import Server
from tests.support.clock import T0

#: Groups on every shard of 3 (0: my-group, g17; 1: billing, g0, a; 2: g1, orders-consumer,
#: %RETRY%billing, whose `%` a URL path must escape).
GROUPS = ("billing", "my-group", "g0", "g1", "g17", "a", "orders-consumer", "%RETRY%billing")
TOPICS = ("orders", "payments")
QUEUES = (0, 1, 2)
CLIENTS = ("c1", "c2", "c3")


def write_cluster(path: Path, roots: list[str], servers: list[str | None] | None = None) -> Path:
    """A cluster file naming `roots` (relative to it) and, where given, their servers."""
    blocks = []
    for i, root in enumerate(roots):
        server = servers[i] if servers else None
        blocks.append(f'[[shard]]\nroot = "{root}"\n' + (f'server = "{server}"\n' if server else ""))
    path.write_text("\n".join(blocks))
    return path


class ClusterCli:
    """`offset-ledger --cluster FILE ...` in-process; stdout and stderr kept apart."""

    def __init__(self, cluster: Path, *, partial: bool = False,
                 env: dict[str, str] | None = None) -> None:
        self.cluster = cluster
        self.partial = partial
        self.runner = CliRunner(env=env)

    def __call__(self, *args: Any, input: str | bytes | None = None) -> Result:
        head = ["--cluster", str(self.cluster)] + (["--partial"] if self.partial else [])
        return self.runner.invoke(app, [*head, *map(str, args)], input=input)

    def json(self, *args: Any, code: int = 0, input: str | None = None) -> Any:
        r = self(*args, "--json", input=input)
        assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
        return json.loads(r.stdout)


def command_stream(seed: int, n: int, start_ms: int = T0, prefix: str = ""
                   ) -> list[dict[str, Any]]:
    """`n` apply lines over GROUPS, TOPICS, QUEUES (names after `prefix`): appends, group
    settings (one broadcast group), pulls and commits by several clients, syncs, resets,
    truncations, a delete and a few bad lines; every line at its own time (10 ms apart), so
    that events of different shards have one order."""
    rng = random.Random(seed)
    lines: list[dict[str, Any]] = [
        {"op": "queue_append", "topic": t, "queue_id": q, "count": 100, "store_time": start_ms}
        for t in TOPICS for q in QUEUES]
    # group changes name their actor: a tokenless server records an unnamed one as `loopback`
    lines += [{"op": "group_set", "group": g, "initial": "earliest", "actor": "carol"}
              for g in GROUPS[:5]]
    lines.append({"op": "group_set", "group": "a", "mode": "broadcast", "actor": "carol"})
    for _ in range(n - len(lines)):
        g, t, q, c = (rng.choice(GROUPS), rng.choice(TOPICS), rng.choice(QUEUES),
                      rng.choice(CLIENTS))
        roll = rng.random()
        if roll < 0.08:
            lines.append({"op": "queue_append", "topic": t, "queue_id": q,
                          "count": rng.randint(1, 50)})
        elif roll < 0.45:
            lines.append({"op": "pull", "group": g, "topic": t, "queue_id": q, "client": c,
                          "max": rng.randint(1, 40)})
        elif roll < 0.85:
            lines.append({"op": "commit", "group": g, "topic": t, "queue_id": q, "client": c,
                          "offset": rng.randint(0, 160)})
        elif roll < 0.9:
            lines.append({"op": "sync", "group": g, "topic": t, "queue_id": q,
                          "offset": rng.randint(0, 100), "source": "dc2"})
        elif roll < 0.94:
            lines.append({"op": "reset", "group": g, "topic": t, "shift_by": -rng.randint(1, 20),
                          "execute": True, "actor": "alice", "reason": "replay"})
        elif roll < 0.96:
            lines.append({"op": "queue_truncate", "topic": t, "queue_id": q,
                          "min_offset": rng.randint(0, 20)})
        elif roll < 0.97:
            lines.append({"op": "group_delete", "group": g, "actor": "bob"})
        elif roll < 0.985:
            lines.append({"op": "commit", "group": g, "topic": t, "queue_id": -1, "offset": 1})
        else:
            lines.append({"op": "no_such_op", "group": g})
    for i, line in enumerate(lines):
        line["ts"] = start_ms + 10 * i
        for name in ("group", "topic"):
            if name in line:
                line[name] = prefix + line[name]
    return lines


def without(doc: Any, *names: str) -> Any:
    """`doc` with the keys `names` left out at every depth (what differs between a cluster's
    answer and one ledger's: seq, shard)."""
    if isinstance(doc, list):
        return [without(d, *names) for d in doc]
    if isinstance(doc, dict):
        return {k: without(v, *names) for k, v in doc.items() if k not in names}
    return doc


def ndjson(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


class Servers:
    """`serve` processes, one per shard root, and the cluster file naming them."""

    def __init__(self, base: Path, n: int) -> None:
        self.base = base
        self.roots = [base / f"shard-{i}" for i in range(n)]
        self.servers: list[Server] = []
        try:
            for root in self.roots:
                self.servers.append(Server(root))
        except BaseException:
            self.stop()
            raise
        self.cluster = write_cluster(base / "cluster.toml", [r.name for r in self.roots],
                                     [s.url for s in self.servers])

    def stop(self) -> None:
        for s in self.servers:
            s.kill()


@pytest.fixture(scope="session")
def served_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """Three shards, each served by its own `serve` process, for the whole session (tests use
    groups and topics of their own)."""
    servers = Servers(tmp_path_factory.mktemp("served-cluster"), 3)
    try:
        yield servers
    finally:
        servers.stop()
