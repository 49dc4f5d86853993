"""The one SparkSession of the Spark tests, and ledgers to run the jobs on.

Ledgers are built through `Ledger.apply` with an injected clock and small segments, so there are
several sealed segments and checkpoints; `random_ledger` is a seeded random command stream, and
`sharded_ledgers` one stream spread over N shard roots as a cluster places it. `spark_cluster`
is a real standalone cluster (Master and two Workers), started once per session when a test
asks for it and stopped at its end.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import crc32c
import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ledger import Ledger
from ledger.cluster.placement import shard_of
from ledger.fold.events import EVENT_SCHEMA, Event, to_record_batch
from ledger.store.settings import load as load_settings
from ledger.store.writer import log_settings
from storage import OsFileSystem, SegmentedLog
from storage import manifest as manifest_io
from storage.names import log_dir
from tests.support.clock import T0, FakeClock
from tests.support.spark_cluster import StandaloneCluster, start_cluster

GROUPS = ("g1", "g2", "gb")  # gb is a broadcast group
TOPICS = ("t1", "t2")
QUEUES = (0, 1)
CLIENTS = ("c1", "c2", "c3")
STEPS_MS = (0, 1, 10, 1_000, 20_000, 60_000)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """local[2], 4 shuffle partitions, UI off: built once for the whole test session."""
    from spark_compaction.session import spark_session

    session = spark_session("local[2]", shuffle_partitions=4, driver_memory="1g")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone Spark cluster on loopback: a Master and two Workers of one core and 1 GB."""
    cluster = start_cluster(tmp_path_factory.mktemp("spark-standalone"), workers=2, cores=1,
                            memory="1g")
    try:
        yield cluster
    finally:
        cluster.stop()


def sharded_ledgers(
    base: Path, shards: int, commands: int = 600, seed: int = 3, groups: int = 24,
    segment_events_max: int = 50,
) -> tuple[list[Path], list[int]]:
    """One seeded command stream over `shards` roots as a cluster writes it: a group's commands
    on its shard (`shard_of`), queue appends on every shard; groups of both modes, pulls,
    commits (some regressing, refused), resets of several modes, syncs, one clock for all. No
    truncation, so that the audit finds nothing (a commit below MinOffset is a finding).
    Returns the roots and the ledger time after each command."""
    rng = random.Random(seed)
    clock = FakeClock()
    roots = [base / f"shard-{i}" for i in range(shards)]
    names = [f"GID_app-{g:02d}" for g in range(groups)]
    topics = ("orders", "payments")
    times: list[int] = []
    ledgers = [Ledger.open(r, clock=clock, durability="none",
                           segment_events_max=segment_events_max) for r in roots]
    try:
        def send(cmd: dict, on: Sequence[Ledger]) -> None:
            for led in on:
                list(led.apply([cmd]))
                # the seal in the background lists its segment when done: waiting for it
                # makes the segments a function of the seed, not of the machine's speed
                led.log.settle()

        for i, name in enumerate(names):
            mode = {"mode": "broadcast", "client_timeout": "PT30S"} if i % 6 == 0 else {}
            send({"op": "group_set", "group": name, "initial": "earliest", **mode},
                 [ledgers[shard_of(name, shards)]])
        for topic in topics:
            for q in (0, 1):
                send({"op": "queue_append", "topic": topic, "queue_id": q, "count": 500},
                     ledgers)
        for i in range(commands):
            clock.advance(rng.choice(STEPS_MS))
            group, topic, queue = rng.choice(names), rng.choice(topics), rng.choice((0, 1))
            led = ledgers[shard_of(group, shards)]
            r = rng.random()
            if r < 0.08:
                n = rng.randint(1, 80)
                send({"op": "queue_append", "topic": topic, "queue_id": queue, "count": n},
                     ledgers)
            elif r < 0.45:
                send({"op": "pull", "group": group, "topic": topic, "queue_id": queue,
                      "client": rng.choice(CLIENTS), "max": rng.randint(1, 40)}, [led])
            elif r < 0.90:
                current = led.committed(group, topic, queue) or 0
                send({"op": "commit", "group": group, "topic": topic, "queue_id": queue,
                      "client": rng.choice((*CLIENTS, None)),
                      "offset": max(0, current + rng.randint(-3, 30))}, [led])
            elif r < 0.96:
                scenario = rng.choice([{"to_offset": rng.randint(0, 100)}, {"to_earliest": True},
                                       {"shift_by": -10}, {"to_latest": True}])
                send({"op": "reset", "group": group, "topic": topic, "execute": True,
                      "actor": "ops", "reason": f"ticket-{i}", **scenario}, [led])
            else:
                led.sync([(group, topic, queue, rng.randint(0, 400))], source="broker-a")
            times.append(clock.now)
    finally:
        for led in ledgers:
            led.close()
    return roots, times


KEY = ("consumer_group", "topic", "queue_id")


def duckdb_state(roots: Sequence[Path], ts: int) -> list[dict]:
    """What DuckDB answers over the same roots: the union of each shard's state at `ts`."""
    rows: list[dict] = []
    for root in roots:
        with Ledger.open(root, readonly=True) as led:
            rows += led.state_at(ts=ts).to_pylist()
    return sorted(rows, key=lambda r: tuple(r[c] for c in KEY))


def duckdb_counts(roots: Sequence[Path]) -> tuple[int, int]:
    """Keys in the views and resets (applied or refused) in the logs of `roots`, by DuckDB."""
    keys = resets = 0
    for root in roots:
        with Ledger.open(root, readonly=True) as led:
            keys += led.sql("SELECT count(*) AS n FROM progress").to_pylist()[0]["n"]
            resets += led.sql("SELECT count(*) AS n FROM events "
                              "WHERE kind IN ('reset', 'reset_refused')").to_pylist()[0]["n"]
    return keys, resets


def random_ledger(
    root: Path, seed: int, commands: int = 250, segment_events_max: int = 40
) -> tuple[FakeClock, list[int]]:
    """A seeded random ledger: appends, truncations, pulls, commits (some refused), resets of
    every mode, syncs, deletes, offset expiry, a broadcast group and groups switching mode.
    Returns the clock and the ledger time after each command."""
    rng = random.Random(seed)
    clock = FakeClock()
    times: list[int] = []
    with Ledger.open(root, clock=clock, segment_events_max=segment_events_max) as led:
        list(led.apply([
            {"op": "group_set", "group": "gb", "mode": "broadcast", "client_timeout": "PT30S"},
            {"op": "group_set", "group": "g2", "initial": "earliest"},
        ]))
        for i in range(commands):
            clock.advance(rng.choice(STEPS_MS))
            group, topic = rng.choice(GROUPS), rng.choice(TOPICS)
            queue, client = rng.choice(QUEUES), rng.choice(CLIENTS)
            r = rng.random()
            if r < 0.15:
                cmd = {"op": "queue_append", "topic": topic, "queue_id": queue,
                       "count": rng.randint(1, 60)}
            elif r < 0.18:
                q = led.state.queues.get((topic, queue))
                if q is None:
                    continue
                cmd = {"op": "queue_truncate", "topic": topic, "queue_id": queue,
                       "min_offset": rng.randint(0, q.max_offset)}
            elif r < 0.55:
                cmd = {"op": "pull", "group": group, "topic": topic, "queue_id": queue,
                       "client": client, "max": rng.randint(1, 40)}
            elif r < 0.88:
                current = led.committed(group, topic, queue) or 0
                cmd = {"op": "commit", "group": group, "topic": topic, "queue_id": queue,
                       "client": rng.choice((*CLIENTS, None)),
                       "offset": max(0, current + rng.randint(-3, 30))}
            elif r < 0.94:
                scenario = rng.choice([
                    {"to_offset": rng.randint(0, 100)}, {"to_earliest": True},
                    {"shift_by": -10}, {"to_latest": True},
                    {"to_datetime": clock.now - rng.randint(0, 300_000)},
                ])
                cmd = {"op": "reset", "group": group, "topic": topic, "execute": True,
                       "actor": "ops", "reason": f"ticket-{i}", **scenario}
            elif r < 0.96:
                led.sync([(group, topic, queue, rng.randint(0, 80))], source="broker-a")
                times.append(clock.now)
                continue
            elif r < 0.97:
                cmd = {"op": "group_delete", "group": rng.choice(("g1", "g2"))}
            elif r < 0.98:
                led.retention(offsets_retention_ms=120_000)
                times.append(clock.now)
                continue
            else:  # a group changes its initial policy or its mode mid-history
                cmd = {"op": "group_set", "group": rng.choice(("g1", "g2")),
                       **rng.choice([{"initial": rng.choice(["latest", "earliest"])},
                                     {"mode": rng.choice(["broadcast", "clustering"])}])}
            list(led.apply([cmd]))
            times.append(clock.now)
    return clock, times


def workload_ledger(
    root: Path, commands: int, seed: int = 7, groups: int = 20, topics: int = 4, queues: int = 4,
    segment_events_max: int = 5_000,
) -> int:
    """A seeded stream shaped like the bench workload (DESIGN.md, performance notes): keys
    (group, topic, queue) chosen uniformly, pulls of 32 and commits advancing their key by 1-32
    in about equal numbers, 4 clients per group, a queue append in ~1% of commands, ~10 commands
    per ms of ledger time; applied in batches, durability none. Returns the events written."""
    rng = random.Random(seed)
    queue_keys = [(f"topic-{t:02d}", q) for t in range(topics) for q in range(queues)]
    group_names = [f"GID_app-{g:03d}" for g in range(groups)]
    committed: dict[tuple[str, str, int], int] = {}
    cmds: list[dict] = [{"op": "group_set", "group": g, "initial": "earliest", "ts": T0}
                        for g in group_names]
    cmds += [{"op": "queue_append", "topic": t, "queue_id": q, "count": 10**6, "ts": T0}
             for t, q in queue_keys]
    for i in range(commands):
        ts = T0 + i // 10
        topic, queue = rng.choice(queue_keys)
        if rng.random() < 0.01:
            cmds.append({"op": "queue_append", "topic": topic, "queue_id": queue,
                         "count": rng.randint(1_000, 5_000), "ts": ts})
            continue
        g = rng.randrange(groups)
        group, client = group_names[g], f"10.0.{g}.{rng.randrange(4)}|2000{g % 10}"
        key = (group, topic, queue)
        if rng.random() < 0.5:
            cmds.append({"op": "pull", "group": group, "topic": topic, "queue_id": queue,
                         "client": client, "max": 32, "ts": ts})
        else:
            committed[key] = committed.get(key, 0) + rng.randint(1, 32)
            cmds.append({"op": "commit", "group": group, "topic": topic, "queue_id": queue,
                         "client": client, "offset": committed[key], "ts": ts})
    with Ledger.open(root, clock=FakeClock(), durability="none",
                     segment_events_max=segment_events_max) as led:
        for lo in range(0, len(cmds), 8_192):
            list(led.apply(cmds[lo:lo + 8_192]))
        return led.log.next_seq


def append_raw(root: Path, events: list[Event]) -> None:
    """Append events below the ledger's rules (storage assigns their seqs), as a faulty or
    malicious writer could: how the audit tests plant anomalies."""
    settings = log_settings(load_settings(root))
    with SegmentedLog.open(root, EVENT_SCHEMA, settings, writer=True) as log:
        log.append(to_record_batch(events, first_seq=log.next_seq))


def rewrite_segment(root: Path, index: int, change) -> pa.Table:
    """Rewrite sealed segment `index` in place with `change(table)` and fix its size and crc in
    the manifest (rows and seqs are left as `change` makes them: gaps and duplicates are possible,
    which storage itself would never write). Returns the original table."""
    directory = log_dir(root)
    fs = OsFileSystem()
    current = manifest_io.load(fs, directory)
    entry = current.segments[index]
    path = directory / entry.file
    original = pq.read_table(path)
    pq.write_table(change(original), path)
    content = path.read_bytes()
    fixed = msgspec.structs.replace(entry, bytes=len(content), crc32c=crc32c.crc32c(content))
    segments = list(current.segments)
    segments[index] = fixed
    manifest_io.commit(fs, directory, msgspec.structs.replace(
        current, revision=current.revision + 1, segments=tuple(segments)))
    return original


__all__ = ["KEY", "append_raw", "duckdb_counts", "duckdb_state", "random_ledger",
           "rewrite_segment", "shard_of", "sharded_ledgers", "workload_ledger"]
