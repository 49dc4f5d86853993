"""A consumer process for the tests: `python -m tests.kafka.worker CONFIG.json`.

It runs a `LedgerConsumer` loop (poll, process, `commit()` every `commit_every` messages and
when idle) and appends what happened to `out`, one line per event, written straight to the file
(os.write, no buffer) so a SIGKILL loses nothing it did:
`m PARTITION OFFSET TIMESTAMP_MS TIME` per message processed, `c JSON` per commit (its results),
`a P,P,...` per assignment; `pause_after` N: after the Nth message it stops itself (SIGSTOP) as
a process paused past its session timeout would be, and on SIGCONT commits what it processed.
SIGTERM: close (commit what was polled, leave the group) and exit 0.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from server.kafka_consumer import LedgerConsumer, PartitionCommit


def main(config_path: str) -> int:
    with open(config_path) as f:
        cfg: dict[str, Any] = json.load(f)
    logging.basicConfig(level=logging.INFO, format="%(created).3f %(message)s")
    out = os.open(cfg["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(line: str) -> None:
        os.write(out, (line + "\n").encode())

    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)

    def assigned(kafka: Consumer, partitions: list[TopicPartition]) -> None:
        write("a " + ",".join(str(p.partition) for p in partitions))

    consumer = LedgerConsumer(cfg["kafka"], cfg["ledger"], token=cfg.get("token"),
                              reset_check_interval=cfg.get("reset_check_interval", 1.0))
    consumer.subscribe(cfg["topics"], on_assign=assigned)
    processed, delay_s = 0, cfg.get("delay_ms", 0) / 1000
    every, pause_after = cfg.get("commit_every", 100), cfg.get("pause_after")
    while not stopping:
        msg = consumer.poll(0.1)
        if msg is None:
            done = consumer.commit()  # idle: commit what was polled
            if done:
                write("c " + json.dumps([_result(r) for r in done]))
            continue
        if msg.error() is not None:
            write(f"e {msg.error()}")
            continue
        if delay_s:
            time.sleep(delay_s)
        write(f"m {msg.partition()} {msg.offset()} {msg.timestamp()[1]} {time.time():.6f}")
        processed += 1
        if processed == pause_after:
            write("stopped")
            os.kill(os.getpid(), signal.SIGSTOP)  # paused, mid-batch, past the session timeout
            write("continued")
            write("z " + json.dumps([_result(r) for r in consumer.commit()]))
        elif processed % every == 0:
            write("c " + json.dumps([_result(r) for r in consumer.commit()]))
    consumer.close()
    write("closed")
    return 0


def _result(r: PartitionCommit) -> dict[str, Any]:
    return {"partition": r.partition, "offset": r.offset, "generation": r.generation,
            "accepted": r.accepted, "reason": r.reason, "committed": r.result.offset}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
