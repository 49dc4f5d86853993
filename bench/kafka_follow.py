"""`python -m bench.kafka_follow --records 1000000`: `follow kafka` throughput against
`import kafka-offsets` of the same records.

Why: a follower that starts on a cluster with a long history reads the whole offsets topic
first; it must keep up with what an operator's one-off import of a dump does. The records are
bench/kafka_offsets_dump.py's stream (its seed, groups, tombstones), produced as the binary
records a coordinator writes (key v1, value v3) into a 50-partition offsets topic of
librdkafka's mock cluster (each group in its coordinator's partition), then followed by
`offset-ledger follow kafka --until-idle` (a process: start, consume, decode, fold, fsyncs, view)
into a fresh data directory; the same records as a text dump through `offset-ledger import
kafka-offsets`. Both timed in the same run (the machine is shared: only the ratio compares).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from bench.kafka_offsets_dump import generate_dump, generate_records, measure_import
from tests.follow.conftest import coordinator_partition
from tests.support import kafka_encode as enc
from tests.support.kafka_mock import MockCluster

OFFSETS_PARTITIONS = 50


def produce(mock: MockCluster, topic: str, records: int) -> float:
    """The stream into the offsets topic; returns the seconds it took."""
    started = time.perf_counter()
    p = Producer({"bootstrap.servers": mock.bootstrap, "linger.ms": 20,
                  "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000,
                  "log_level": 2})
    partition_of: dict[str, int] = {}
    for group, topic_name, partition, offset, commit_ts in generate_records(records):
        part = partition_of.get(group)
        if part is None:
            part = partition_of[group] = coordinator_partition(group, OFFSETS_PARTITIONS)
        value = None if offset is None else enc.offset_value(offset, commit_ts, 3,
                                                             leader_epoch=partition % 3)
        while True:
            try:
                p.produce(topic, key=enc.offset_key(group, topic_name, partition), value=value,
                          partition=part)
                break
            except BufferError:
                p.poll(0.1)
    p.flush()
    return time.perf_counter() - started


def measure_follow(mock: MockCluster, topic: str, records: int) -> dict[str, float]:
    cli = Path(sys.executable).with_name("offset-ledger")
    with tempfile.TemporaryDirectory(prefix="kafka-follow-bench-") as tmp:
        start = time.perf_counter()
        done = subprocess.run([str(cli), "--data-dir", str(Path(tmp) / "data"), "follow",
                               "kafka", "--bootstrap-server", mock.bootstrap, "--cluster",
                               "bench", "--offsets-topic", topic, "--until-idle",
                               "--poll-interval", "PT1H", "--json"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        wall = time.perf_counter() - start
    if done.returncode != 0:
        raise AssertionError(f"follow kafka failed: {done.stderr.strip()[-500:]}")
    summary = json.loads(done.stdout)
    if summary["records"] != records:
        raise AssertionError(f"followed {summary['records']} records, produced {records}")
    return {"follow_seconds": round(wall, 3), "follow_records_per_s": round(records / wall),
            "follow_batches": summary["batches"], "follow_changed": summary["changed"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    mock = MockCluster(brokers=3)
    try:
        topic = "__consumer_offsets"
        mock.create_topic(topic, OFFSETS_PARTITIONS)
        produced_s = produce(mock, topic, args.records)
        followed = measure_follow(mock, topic, args.records)
        imported = measure_import(generate_dump(args.records, "text"), "text", args.records)
    finally:
        mock.close()
    print(json.dumps({"records": args.records, "offsets_partitions": OFFSETS_PARTITIONS,
                      "produce_seconds": round(produced_s, 3), **followed, **imported,
                      "follow_vs_import": round(imported["import_seconds"]
                                                / followed["follow_seconds"], 2)}))


if __name__ == "__main__":
    main()
