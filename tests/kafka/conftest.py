"""Kafka consumers on the ledger with real parts: librdkafka's mock cluster (from the
confluent-kafka wheel, in this process, on loopback: one per session), a real `serve` process,
and consumers in processes of their own (tests/kafka/worker.py) where one must be killed or
paused for real.

A topic is filled as a producer that keeps the ledger's queues up to date would: each chunk of
messages of a partition shares one Kafka timestamp and is one `queue_append` with that store
time, so the ledger's time index answers `to_datetime` as Kafka's own timestamps do."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.kafka_mock import MockKafka
from server.client import LedgerClient
from tests.server.conftest import Server, module_server, wait_for

__all__ = ["module_server"]  # the serve process of a test module, a fixture shared from there

ROOT = Path(__file__).resolve().parents[2]
#: Consumer settings that keep the tests short: a session lost after 3 s; a small prefetch per
#: partition, refilled at once (librdkafka backs off 1 s by default), so that a reset's replay
#: is not queued behind thousands of the other partitions' fetched messages.
KAFKA_SETTINGS = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 300,
                  "queued.min.messages": 200, "fetch.queue.backoff.ms": 20,
                  "max.partition.fetch.bytes": 16384, "fetch.wait.max.ms": 50}


@pytest.fixture(scope="session")
def kafka() -> Iterator[MockKafka]:
    with MockKafka(3) as cluster:
        yield cluster


@dataclass(frozen=True)
class Filled:
    topic: str
    partitions: int
    per_partition: int
    chunk: int
    base_ms: int  # the Kafka timestamp (and ledger store time) of chunk 0; chunk k: + k s

    def store_time(self, chunk: int) -> int:
        return self.base_ms + chunk * 1000

    @property
    def messages(self) -> set[tuple[int, int]]:
        return {(p, o) for p in range(self.partitions) for o in range(self.per_partition)}


def fill(kafka: MockKafka, ledger: LedgerClient, topic: str, *, partitions: int = 8,
         per_partition: int = 2500, chunk: int = 100) -> Filled:
    """A topic of `partitions` x `per_partition` messages in the mock cluster, and its queues
    in the ledger (bounds and store times)."""
    from confluent_kafka import Producer

    kafka.create_topic(topic, partitions)
    filled = Filled(topic, partitions, per_partition, chunk,
                    base_ms=int(time.time() * 1000) - 3_600_000)
    # as traffic over time: chunk k of every partition, then chunk k + 1; one record batch
    # per chunk (a fetch then brings a few chunks of each partition, not a whole partition)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5,
                         "batch.num.messages": chunk})
    appends = []
    for k in range(per_partition // chunk):
        for p in range(partitions):
            for i in range(chunk):
                producer.produce(topic, value=b"%d:%d" % (p, k * chunk + i), partition=p,
                                 timestamp=filled.store_time(k))
            producer.poll(0)
            appends.append({"op": "queue_append", "topic": topic, "queue_id": p, "count": chunk,
                            "store_time": filled.store_time(k)})
    assert producer.flush(30) == 0
    assert all("error" not in r for r in ledger.commands(appends))
    return filled


@dataclass
class Worker:
    """A consumer process (tests/kafka/worker.py) and the events it wrote."""

    name: str
    proc: subprocess.Popen[bytes]
    out: Path
    log: Path

    def lines(self) -> list[str]:
        text = self.out.read_text() if self.out.exists() else ""
        return text.splitlines()

    def processed(self) -> list[tuple[int, int, int, float]]:
        """(partition, offset, message timestamp ms, time processed) of every message."""
        out = []
        for line in self.lines():
            if line.startswith("m "):
                _, p, o, ts, at = line.split()
                out.append((int(p), int(o), int(ts), float(at)))
        return out

    def commits(self, tag: str = "c") -> list[list[dict[str, Any]]]:
        return [json.loads(line[2:]) for line in self.lines() if line.startswith(tag + " ")]

    def wait(self, condition: Any, timeout_s: float, what: str) -> Any:
        def check() -> Any:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker {self.name} exited {self.proc.returncode}: "
                                     f"{self.log.read_text()[-3000:]}")
            return condition(self)
        return wait_for(check, timeout_s, f"{self.name}: {what}")

    def stop(self) -> None:
        """SIGTERM: the worker closes its consumer (a last commit, leaves the group)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0, self.log.read_text()[-3000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture
def workers(tmp_path: Path, kafka: MockKafka, module_server: Server) -> Iterator[Any]:
    """start(name, group, topic, **settings): a worker consuming `topic` for `group`."""
    started: list[Worker] = []

    def start(name: str, group: str, topic: str, **settings: Any) -> Worker:
        out, log = tmp_path / f"{name}.events", tmp_path / f"{name}.log"
        config = {"kafka": {"bootstrap.servers": kafka.bootstrap, "group.id": group,
                            "client.id": name, **KAFKA_SETTINGS},
                  "ledger": settings.pop("ledger", module_server.url), "topics": [topic],
                  "out": str(out), **settings}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(config))
        with open(log, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "tests.kafka.worker", str(path)],
                                    cwd=ROOT, stdout=err, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL,
                                    env={**os.environ, "PYTHONPATH": str(ROOT)})
        worker = Worker(name, proc, out, log)
        started.append(worker)
        return worker

    yield start
    for w in started:
        if w.proc.poll() is None:
            os.kill(w.proc.pid, signal.SIGCONT)  # a paused one is woken to be killed
            w.kill()
