"""The command feeds the bench measures every path on (issue: report every feed, not the best):

- `mixed`: the pinned workload (bench/workload.py): consumers pull 32 ahead and commit behind,
  producers append, a few resets and truncations; 200 groups x 10 topics x 8 queues.
- `commits`: commits only on the same 16,000 keys (a broker's, a mirror's or an importer's
  feed: consumers that fetch elsewhere and only commit here), each advancing its key by 1-32;
  the queues are never appended to here, so their bounds are unknown.
- `keys10x`: the pinned workload over 2,000 groups: 160,000 keys.

Each feed is written once under bench/data/ as NDJSON (what `offset-ledger apply` reads) and its
Parquet twin (what `Ledger.apply_arrow` takes), a pure function of its size and seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench import workload

FEEDS: tuple[str, ...] = ("mixed", "commits", "keys10x")
COMMITS_VERSION = 1
KEYS10X_GROUPS = 2000


def ensure_feed(feed: str, n_commands: int, seed: int = 7,
                data_dir: Path | None = None) -> Path:
    """The NDJSON file of `feed` (its Parquet twin beside it), written once and reused."""
    if feed == "mixed":
        return workload.ensure_file(n_commands, seed, data_dir=data_dir)
    if feed == "keys10x":
        return workload.ensure_file(n_commands, seed, groups=KEYS10X_GROUPS, data_dir=data_dir)
    if feed != "commits":
        raise ValueError(f"unknown feed {feed!r}: use one of {', '.join(FEEDS)}")
    d = Path(data_dir) if data_dir is not None else workload.DATA_DIR
    d.mkdir(parents=True, exist_ok=True)
    stem = f"commits-n{n_commands}-s{seed}-v{COMMITS_VERSION}"
    return workload.publish_twins(d, stem, lambda nd, pqt: _write_commits(n_commands, seed,
                                                                           nd, pqt))


def _write_commits(n_commands: int, seed: int, nd: Path, pqt: Path) -> None:
    table = commits_table(n_commands, seed)
    pq.write_table(table, pqt, compression="zstd")
    with open(nd, "wb") as f:
        for start in range(0, table.num_rows, 131_072):
            f.write(_ndjson(table.slice(start, 131_072)))


def commits_table(n_commands: int, seed: int = 7,
                  shape: workload.Shape | None = None) -> pa.Table:
    """`n_commands` commits on uniformly chosen keys, each advancing its key by 1-32, by one
    of the key's group's clients; ts about 10 commands per ms."""
    shape = shape or workload.Shape()
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, shape.n_keys, n_commands)
    step = rng.integers(1, workload.MAX_STEP + 1, n_commands)
    order = np.argsort(keys, kind="stable")
    running = np.empty(n_commands, np.int64)
    sorted_keys, sorted_steps = keys[order], step[order]
    csum = np.cumsum(sorted_steps)
    first = np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(n_commands), 0))
    running[order] = csum - (csum[start] - sorted_steps[start])
    group = keys // (shape.topics * shape.queues)
    topic = keys // shape.queues % shape.topics
    queue = keys % shape.queues
    client = group * workload.CLIENTS_PER_GROUP + rng.integers(0, workload.CLIENTS_PER_GROUP,
                                                                n_commands)
    ts = workload.T0_MS + np.cumsum(rng.random(n_commands) < workload.MS_TICK_P)
    return pa.table({
        "op": pa.array(["commit"] * n_commands, pa.string()).dictionary_encode(),
        "group": pa.array(shape.group_names(), pa.string()).take(pa.array(group)),
        "topic": pa.array(shape.topic_names(), pa.string()).take(pa.array(topic)),
        "queue_id": pa.array(queue, pa.int32()),
        "client": pa.array(shape.client_names(), pa.string()).take(pa.array(client)),
        "offset": pa.array(running, pa.int64()),
        "ts": pa.array(ts, pa.int64()),
    })


def _ndjson(table: pa.Table) -> bytes:
    """One JSON object per row, built with Arrow string kernels (the fields are plain)."""
    def text(name: str) -> pa.Array:
        return table.column(name).combine_chunks().cast(pa.string())

    pieces = ['{"op":"commit","group":"', text("group"), '","topic":"', text("topic"),
              '","queue_id":', text("queue_id"), ',"client":"', text("client"),
              '","offset":', text("offset"), ',"ts":', text("ts"), "}\n"]
    lines = pc.binary_join_element_wise(*(pa.scalar(p, pa.string()) if isinstance(p, str) else p
                                          for p in pieces), "")
    return workload.string_bytes(lines)
