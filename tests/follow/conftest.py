"""One librdkafka mock cluster per session (tests/support/kafka_mock.py), on loopback; each
test takes offsets and data topics of its own, so tests share the cluster but not its data.
`Cluster` writes what a broker's group coordinator writes into the offsets topic (real-format
records by a real producer) and runs real consumer groups on real topics."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support import kafka_encode as enc
from tests.support.kafka_mock import MockCluster
from tests.tools.crash_harness import _cli_command

_names = itertools.count(1)


def coordinator_partition(group: str, partitions: int) -> int:
    """Kafka's placement of a group in the offsets topic: abs(String.hashCode) % partitions."""
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % partitions


class Cluster:
    """One test's view of the shared mock cluster: its offsets topic and data topics."""

    def __init__(self, mock: MockCluster, offsets_partitions: int = 4) -> None:
        self.mock = mock
        self.bootstrap = mock.bootstrap
        n = next(_names)
        self.offsets_topic = f"offsets.t{n}"
        self.prefix = f"t{n}."
        self.partitions = offsets_partitions
        mock.create_topic(self.offsets_topic, offsets_partitions)
        self.producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})

    def topic(self, name: str, partitions: int) -> str:
        full = self.prefix + name
        self.mock.create_topic(full, partitions)
        return full

    def produce(self, topic: str, partition: int, count: int) -> None:
        for i in range(count):
            self.producer.produce(topic, value=b"m%d" % i, partition=partition)
        self.producer.flush()

    def _record(self, group: str, key: bytes, value: bytes | None) -> None:
        self.producer.produce(self.offsets_topic, key=key, value=value,
                              partition=coordinator_partition(group, self.partitions))

    def commit(self, group: str, topic: str, partition: int, offset: int, commit_ts: int,
               version: int = 3) -> None:
        self._record(group, enc.offset_key(group, topic, partition),
                     enc.offset_value(offset, commit_ts, version))

    def offset_tombstone(self, group: str, topic: str, partition: int) -> None:
        self._record(group, enc.offset_key(group, topic, partition), None)

    def group_metadata(self, group: str, members: Sequence[enc.MemberSpec],
                       generation: int = 1) -> None:
        self._record(group, enc.group_key(group), enc.group_value(members, generation=generation))

    def group_tombstone(self, group: str) -> None:
        self._record(group, enc.group_key(group), None)

    def raw(self, partition: int, key: bytes | None, value: bytes | None) -> None:
        self.producer.produce(self.offsets_topic, key=key, value=value, partition=partition)

    def flush(self) -> None:
        self.producer.flush()

    def high(self, topic: str, partition: int) -> int:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "probe"})
        try:
            return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        finally:
            c.close()

    def consume_and_commit(self, group: str, topic: str, client_id: str, count: int
                           ) -> tuple[dict[int, int], list[tuple[str, int]], str]:
        """A real consumer of `group` reads `count` messages of `topic` and commits them;
        returns its committed offsets by partition, its assignment and its member id."""
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group,
                      "client.id": client_id, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "session.timeout.ms": 6000})
        try:
            c.subscribe([topic])
            read, deadline = 0, time.monotonic() + 60
            while read < count and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is None or m.error():
                    continue
                read += 1
                c.commit(m, asynchronous=False)
            assert read == count, f"read {read} of {count}"
            assignment = [(tp.topic, tp.partition) for tp in c.assignment()]
            committed = c.committed([TopicPartition(topic, p) for _, p in assignment],
                                    timeout=10)
            return ({tp.partition: tp.offset for tp in committed if tp.offset >= 0},
                    assignment, c.memberid())
        finally:
            c.close()


@pytest.fixture(scope="session")
def mock_kafka() -> Iterator[MockCluster]:
    mock = MockCluster(brokers=3)
    yield mock
    mock.close()


@pytest.fixture
def cluster(mock_kafka: MockCluster) -> Cluster:
    return Cluster(mock_kafka)


def follow(data: Path, cluster: Cluster, *args: str, timeout: float = 120,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`offset-ledger follow kafka ... --until-idle --json` on `cluster`, to the end."""
    return subprocess.run(
        [*_cli_command(), "--data-dir", str(data), "follow", "kafka", "--bootstrap-server",
         cluster.bootstrap, "--cluster", "mock", "--offsets-topic", cluster.offsets_topic,
         "--until-idle", "--json", *args], capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def cli_json(data: Path, *args: str) -> Any:
    done = subprocess.run([*_cli_command(), "--data-dir", str(data), *args, "--json"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
