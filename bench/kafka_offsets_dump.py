"""`python -m bench.kafka_offsets_dump --records 1000000`: parse speed of `__consumer_offsets` dumps.

Why: an operator imports a whole `__consumer_offsets` dump (millions of commits) in one go, and
the parser must not be the slow part of `import kafka-offsets` (the ledger folds ~2M events/s).
The generator writes what kafka-console-consumer prints with the offsets formatter: the 2.1+ text
form one record per line, or the 4.x JSON form run together on one line; groups, topics and
partitions drawn with a fixed seed, commit times rising with jitter (records of the
`__consumer_offsets` partitions interleave), tombstones and group-metadata records mixed in.
Prints records/s per form (best of `--repeats`) for the parser alone, and for the whole command
an operator runs (`offset-ledger import kafka-offsets FILE` into a fresh data directory: parse,
decode, fold, fsync, view); timings never live in tests.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ledger.importers.kafka_offsets import parse_kafka_offsets

GROUPS = 200
TOPICS = 10
PARTITIONS = 8
TOMBSTONE_EVERY = 1000
GROUP_METADATA_EVERY = 500


def generate_records(records: int, seed: int = 7
                     ) -> Iterator[tuple[str, str, int, int | None, int]]:
    """(group, topic, partition, offset or None for a tombstone, commitTimestamp) of
    `records` offset-commit records: the stream both the dump and the follow bench carry."""
    rng = random.Random(seed)
    offsets: dict[tuple[int, int, int], int] = {}
    ts = 1_700_000_000_000
    for i in range(records):
        g, t, p = rng.randrange(GROUPS), rng.randrange(TOPICS), rng.randrange(PARTITIONS)
        ts += rng.randrange(0, 4)
        commit_ts = ts - rng.randrange(0, 50)  # other partitions of __consumer_offsets lag behind
        if i % TOMBSTONE_EVERY == TOMBSTONE_EVERY - 1:
            offsets.pop((g, t, p), None)
            offset = None
        else:
            offset = offsets[(g, t, p)] = offsets.get((g, t, p), 0) + rng.randrange(1, 33)
        yield f"group-{g}", f"topic.{t}", p, offset, commit_ts


def generate_dump(records: int, form: str = "text", seed: int = 7) -> str:
    """A dump of `records` offset-commit records (tombstones included) in `form` text or json."""
    if form not in ("text", "json"):
        raise ValueError(f"form must be text or json, not {form!r}")
    parts: list[str] = []
    for i, (group, topic, p, offset, commit_ts) in enumerate(generate_records(records, seed)):
        if form == "text":
            value = "NULL" if offset is None else (
                f"OffsetAndMetadata(offset={offset}, leaderEpoch=Optional[{p % 3}], metadata=, "
                f"commitTimestamp={commit_ts}, expireTimestamp=None)")
            parts.append(f"[{group},{topic},{p}]::{value}\n")
        else:
            key = {"type": 1, "data": {"group": group, "topic": topic, "partition": p}}
            data = None if offset is None else {"version": 3, "data": {
                "offset": offset, "leaderEpoch": p % 3, "metadata": "",
                "commitTimestamp": commit_ts}}
            parts.append(json.dumps({"key": key, "value": data}, separators=(",", ":")))
            if i % GROUP_METADATA_EVERY == 0:
                parts.append(json.dumps({"key": {"type": 2, "data": {"group": group}},
                                         "value": None}, separators=(",", ":")))
    return "".join(parts)


def measure(records: int, form: str, repeats: int) -> dict[str, float]:
    text = generate_dump(records, form)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = parse_kafka_offsets(text, "kafka-offsets:bench")
        best = min(best, time.perf_counter() - start)
    if result.records != records:
        raise AssertionError(f"parsed {result.records} records, generated {records}")
    return {"records": records, "bytes": len(text), "seconds": round(best, 3),
            "records_per_s": round(records / best), **measure_import(text, form, records)}


def measure_import(text: str, form: str, records: int) -> dict[str, float]:
    """`offset-ledger import kafka-offsets FILE --json` of the dump into a fresh data directory,
    once: wall time, and the records/s an operator sees."""
    cli = Path(sys.executable).with_name("offset-ledger")
    with tempfile.TemporaryDirectory(prefix="kafka-offsets-bench-") as tmp:
        dump = Path(tmp) / f"dump.{form}"
        dump.write_text(text)
        start = time.perf_counter()
        done = subprocess.run([str(cli), "--data-dir", str(Path(tmp) / "data"), "import",
                               "kafka-offsets", str(dump), "--json"], capture_output=True,
                              text=True, stdin=subprocess.DEVNULL)
        wall = time.perf_counter() - start
    if done.returncode != 0:
        raise AssertionError(f"import kafka-offsets failed: {done.stderr.strip()[-500:]}")
    summary = json.loads(done.stdout)
    return {"import_seconds": round(wall, 3), "import_records_per_s": round(records / wall),
            "import_commands": summary.get("commands"), "import_changed": summary.get("changed")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--form", choices=("text", "json", "both"), default="both")
    args = parser.parse_args()
    for form in ("text", "json") if args.form == "both" else (args.form,):
        print(json.dumps({"form": form, **measure(args.records, form, args.repeats)}))


if __name__ == "__main__":
    main()
