"""`python -m bench.kafka_consumer_bench`: what keeping a Kafka consumer's offsets in the ledger
costs (issue 25).

One topic of 8 partitions in librdkafka's mock cluster (bench/kafka_mock.py, in this process),
consumed to its end by one consumer that commits every 100 messages, two ways, in alternating
rounds, each round a new consumer group:
- `kafka`: `confluent_kafka.Consumer`, `commit(asynchronous=False)` to the mock cluster (Kafka's
  own offset store; a synchronous commit, as the ledger's is);
- `ledger`: `LedgerConsumer` (server/kafka_consumer.py) with a real `offset-ledger serve`
  (durability `always`: an fsync per commit batch), `commit()` to the ledger, plus its periodic
  generation check every second.
Messages/s from the first message to the last, the ratio ledger/kafka per round, and where the
difference goes: the time of one commit each way (measured inside the same runs).

Prints a summary and writes bench/results/kafka-consumer-latest.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.kafka_mock import MockKafka
from bench.server_bench import ledger_target

RESULTS = Path(__file__).resolve().parent / "results"
PARTITIONS = 8
COMMIT_EVERY = 100
TOPIC = "bench-orders"
#: kafka and ledger as the module says; ledger_no_commits: the same LedgerConsumer never
#: committing (but at close), which isolates what its poll costs over the plain one.
WAYS = ("kafka", "ledger", "ledger_no_commits")
CONSUMER = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "fetch.queue.backoff.ms": 20}


def fill(kafka: MockKafka, messages: int) -> None:
    from confluent_kafka import Producer

    kafka.create_topic(TOPIC, PARTITIONS)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 20})
    value = b"x" * 100
    for i in range(messages):
        while True:
            try:
                producer.produce(TOPIC, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("the mock cluster did not take every message")


def consume(consumer: Any, commit: Any, messages: int) -> dict[str, float]:
    """Poll to the end, committing every COMMIT_EVERY messages: rate and commit time."""
    seen = 0
    commit_s: list[float] = []
    first = last = 0.0
    deadline = time.monotonic() + 600
    while seen < messages:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {seen} of {messages} messages in 600 s")
        msg = consumer.poll(1.0)
        if msg is None or msg.error() is not None:
            continue
        if not seen:
            first = time.perf_counter()
        seen += 1
        if commit is not None and seen % COMMIT_EVERY == 0:
            t = time.perf_counter()
            commit(msg)
            commit_s.append(time.perf_counter() - t)
    last = time.perf_counter()
    out = {"messages": seen, "seconds": last - first, "messages_per_s": seen / (last - first),
           "commits": len(commit_s), "commit_share": sum(commit_s) / (last - first)}
    if commit_s:
        out.update({"commit_ms_median": statistics.median(commit_s) * 1e3,
                    "commit_ms_mean": statistics.fmean(commit_s) * 1e3,
                    "commit_ms_p99": sorted(commit_s)[int(len(commit_s) * 0.99)] * 1e3})
    return out


def kafka_round(kafka: MockKafka, group: str, messages: int) -> dict[str, float]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         **CONSUMER})
    consumer.subscribe([TOPIC])
    try:
        return consume(consumer, lambda m: consumer.commit(asynchronous=False), messages)
    finally:
        consumer.close()


def ledger_round(kafka: MockKafka, url: str, group: str, messages: int, *, commits: bool = True
                 ) -> dict[str, float]:
    from server.client import LedgerClient
    from server.kafka_consumer import LedgerConsumer

    with LedgerClient(url) as c:
        c.request("PUT", f"/v1/groups/{group}", {"initial": "earliest"})
    consumer = LedgerConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                               "client.id": f"{group}-1", **CONSUMER}, url)
    consumer.subscribe([TOPIC])
    try:
        return consume(consumer, (lambda m: consumer.commit()) if commits else None, messages)
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from bench.http_stacks.measure import RunningServer

    work = Path(tempfile.mkdtemp(prefix="kafka-consumer-bench-"))
    rows: list[dict[str, Any]] = []
    try:
        with MockKafka(3) as kafka:
            fill(kafka, args.messages)
            server = RunningServer(ledger_target(work / "data"), work / "serve.log")
            try:
                for i in range(args.rounds):  # alternate, so drift hits every way alike
                    for way in WAYS:
                        group = f"bench-{way}-{i}"
                        if way == "kafka":
                            row = kafka_round(kafka, group, args.messages)
                        else:
                            row = ledger_round(kafka, server.base_url, group, args.messages,
                                               commits=way == "ledger")
                        rows.append({"way": way, "round": i, **row})
                        said = (f", commit {row['commit_ms_median']:.2f} ms median, "
                                f"{row['commit_ms_mean']:.2f} mean ({row['commit_share']:.0%} "
                                "of the time)") if row["commits"] else ""
                        print(f"round {i} {way:16}: {row['messages_per_s']:>9,.0f} "
                              f"messages/s{said}", file=sys.stderr)
            finally:
                server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = _summary(rows, args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kafka-consumer-latest.json").write_text(json.dumps(
        {"summary": summary, "rounds": rows}, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


def _summary(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    by = {way: [r for r in rows if r["way"] == way] for way in WAYS}

    def ratios(way: str) -> list[float]:
        return [r["messages_per_s"] / k["messages_per_s"]
                for k, r in zip(by["kafka"], by[way], strict=True)]

    def median(way: str, key: str) -> float:
        return statistics.median(r[key] for r in by[way])

    out: dict[str, Any] = {"messages": args.messages, "partitions": PARTITIONS,
                           "commit_every": COMMIT_EVERY, "rounds": args.rounds}
    for way in WAYS:
        out[f"{way}_messages_per_s"] = median(way, "messages_per_s")
    out["ratio_ledger_over_kafka_per_round"] = ratios("ledger")
    out["ratio_median"] = statistics.median(ratios("ledger"))
    out["ratio_ledger_no_commits_over_kafka_median"] = statistics.median(
        ratios("ledger_no_commits"))
    for way in ("kafka", "ledger"):
        for key in ("commit_ms_median", "commit_ms_mean", "commit_ms_p99", "commit_share"):
            out[f"{way}_{key}"] = median(way, key)
    return out


if __name__ == "__main__":
    sys.exit(main())
