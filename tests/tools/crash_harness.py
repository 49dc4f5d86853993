#!/usr/bin/env python
"""Crash harness: SIGKILL `offset-ledger apply` at random moments; prove that nothing acknowledged
is lost, nothing is invented or reordered, and the DuckDB view equals a replay of the log.

    python tests/tools/crash_harness.py --kills 200 [--seed S] [--workdir DIR] [--json]

How (TigerBeetle's VOPR in miniature, with real processes and a real disk):
- A seeded command stream from `bench.workload.generate` (every line carries `ts`, so the ledger
  clock is deterministic), with executed resets (shift-by, to-datetime), retention truncations,
  dry runs and malformed lines mixed in, is run once through the reference model of DESIGN.md's
  rules (tests/support/reference.py, which shares no code with the ledger): the reference
  results, events (every column but `detail`) and events-per-command.
- A child runs `offset-ledger apply CHUNK --json` on the next chunk of the stream (durability
  `always`, small `--segment-events`, so rolls, seals and checkpoints happen every few hundred
  events) and is killed with SIGKILL: after a random delay from its first acknowledgement
  ("time"), during start-up and recovery ("startup"), or by itself right before or after the
  k-th write / fsync / rename / remove / truncate of the storage layer, or after writing half of
  a write ("targeted": a seal's rename, a manifest commit, a checkpoint, a torn frame).
  Now and then a compaction swap runs instead (pyarrow merges the oldest segments, rows ordered
  by key, and `SegmentedLog.replace` swaps them in: the path the Spark job commits through,
  without a JVM start per kill), killed at one of its storage steps ("swap").
- After every kill, before anything repairs a file: the DuckDB view file as the kill left it
  (opened read-only) may lag the log but never hold what the log does not: its position is at
  most the log end, on a command boundary, and its tables are the model's state there. Then a
  read-only snapshot must hold every acknowledged event; the log must be a prefix of the
  reference events ending on a command boundary, and no event a check saw before may have
  changed (`detail` included); every other kill the harness also opens it as the writer
  (recovery), compares the recovered view with the model's state at the log end and runs
  `verify`; otherwise the next child recovers by itself.
- The stream continues from the log's end (the first command whose events are not durable:
  acknowledged ones always are; durable ones whose acknowledgement died with the process are
  counted, never sent twice). At the end of a round the rest runs unkilled and the log must equal
  the reference exactly. Any failure stops the run, keeps the directory and prints the seed.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.oracle import agrees, comparable, rows, view_file, view_tables  # noqa: E402
from tests.support.reference import EVENT_COLUMNS, ReferenceLedger  # noqa: E402

SHAPE = {"groups": 12, "topics": 3, "queues": 4}
EXTRA_EVERY = 300  # on average one extra line (reset, truncate, dry run, bad line) per N commands
SEGMENT_EVENTS = 300
BATCH_SIZES = (32, 128, 512)
CHUNK_COMMANDS = (300, 3000)  # commands handed to one child (a run that is not killed ends there)
STARTUP_SHARE = 0.15
TARGETED_SHARE = 0.30
SWAP_SHARE = 0.10  # of the runs: a compaction swap (no Spark) killed at a storage step
SWAP_SEGMENTS = 3
SWAP_TARGETS = {"write": 12, "fsync": 6, "rename": 4, "fsync_dir": 3, "remove": 4,
                "fsync_file": 2}
# Storage operations a targeted child dies at, with the range of the k-th call it dies at.
TARGETS = {
    "write": 40, "torn_write": 40, "fsync": 20, "rename": 10, "fsync_dir": 10,
    "remove": 6, "open_write": 10, "fsync_file": 3, "truncate": 2,
}


class HarnessFailure(AssertionError):
    """A broken guarantee; the message says which, where, and how to reproduce it."""


# ====================================================================== the command stream
def _dump(cmd: dict[str, Any]) -> bytes:
    return json.dumps(cmd, separators=(",", ":")).encode() + b"\n"


def _extra(rng: random.Random, last: dict[str, Any]) -> bytes:
    """A line the workload does not write: resets that fence and clamp, truncations, bad input."""
    key = {"group": last["group"], "topic": last["topic"], "queue_id": last["queue_id"]}
    ts = last["ts"]
    roll = rng.random()
    if roll < 0.30:
        cmd = {"op": "reset", **key, "shift_by": -rng.randint(1, 300), "execute": True, "ts": ts}
    elif roll < 0.45:
        back = rng.randint(1, 600) * 1000
        cmd = {"op": "reset", **key, "to_datetime": ts - back, "execute": True, "ts": ts}
    elif roll < 0.55:
        cmd = {"op": "reset", "group": last["group"], "all_topics": True, "to_earliest": True,
               "ts": ts}  # a dry run: a plan, no events
    elif roll < 0.70:
        floor = max(0, int(last.get("offset") or 0) - rng.randint(0, 400))
        cmd = {"op": "queue_truncate", "topic": last["topic"], "queue_id": last["queue_id"],
               "min_offset": floor, "ts": ts}
    else:
        bad = rng.choice([
            b'{"op":"commit","group":',
            b"[1,2,3]",
            json.dumps({"op": "commit", **key, "group": "bad name!", "offset": 1, "ts": ts}).encode(),
            json.dumps({"op": "commit", **key, "offset": -5, "ts": ts}).encode(),
            json.dumps({"op": "teleport", **key, "ts": ts}).encode(),
            json.dumps({"op": "pull", **key, "client": "c", "max": -1, "ts": ts}).encode(),
        ])
        return bad + b"\n"
    return _dump(cmd)


def build_stream(n_commands: int, seed: int) -> list[bytes]:
    """NDJSON lines: the seeded workload plus about one extra line per `EXTRA_EVERY`."""
    from bench.workload import generate

    rng = random.Random(seed ^ 0x5EED)
    lines: list[bytes] = []
    last: dict[str, Any] | None = None
    for cmd in generate(n_commands, seed, **SHAPE):
        lines.append(_dump(cmd))
        if cmd.get("op") in ("commit", "pull"):
            last = cmd
        if last is not None and rng.random() < 1 / EXTRA_EVERY:
            lines.append(_extra(rng, last))
    return lines


def decoded_commands(lines: list[bytes]) -> Any:
    """The lines as `apply` decodes them (same function, same errors)."""
    from ledger.commands.command import iter_ndjson

    return list(iter_ndjson(lines))


# ====================================================================== the reference
@dataclass
class Reference:
    """What the rules say an uninterrupted run of the stream gives: results, events, events
    after each command, and the model for the state at any log position."""

    lines: list[bytes]
    commands: list[Any]
    results: list[dict[str, Any]]  # the model's (`comparable` form)
    cum: list[int]  # cum[i]: events of commands [0, i)
    events: Any  # pa.Table of the model's events (the columns it decides)
    model: ReferenceLedger | None = None
    durable: Any = None  # the longest log a check read: durable events never change

    def boundary(self, end_seq: int) -> int | None:
        """Commands wholly in a log ending at `end_seq` (the first such count), or None if the
        log ends inside a command's events."""
        i = bisect.bisect_left(self.cum, end_seq)
        return i if i < len(self.cum) and self.cum[i] == end_seq else None


def reference_run(lines: list[bytes]) -> Reference:
    """The stream through the reference model (clock 0: every line that writes carries `ts`)."""
    import pyarrow as pa

    from ledger.fold.events import EVENT_SCHEMA

    model = ReferenceLedger()
    commands = [_decode_or_none(raw) for raw in lines]
    results = [model.apply(cmd, 0) for cmd in commands]
    cum = [0]
    for r in results:
        cum.append(r["seq"] + 1 if "seq" in r else cum[-1])
    if cum[-1] != len(model.events):
        raise HarnessFailure("reference: the results' seqs do not account for the model's events")
    schema = pa.schema([EVENT_SCHEMA.field(c) for c in EVENT_COLUMNS])
    events = pa.Table.from_pylist([{c: e[c] for c in EVENT_COLUMNS} for e in model.events],
                                  schema=schema)
    return Reference(lines, commands, results, cum, events, model)


def _decode_or_none(raw: bytes) -> Any:
    """A line as `apply` reads it; None (not an object, as the model sees it) when it is not
    JSON."""
    try:
        return json.loads(raw)
    except ValueError:
        return None


KIND_OF_OP = {"commit": "commit", "pull": "pull", "queue_append": "queue_append",
              "queue_truncate": "queue_truncate", "group_set": "group_config", "reset": "reset",
              "group_delete": "delete"}


def expected_fields(cmd: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """What the last event of an acknowledged command must say, from the command and its result."""
    op = cmd["op"]
    fields: dict[str, Any] = {"kind": KIND_OF_OP[op]}
    if op in ("commit", "pull", "reset", "group_set", "group_delete"):
        fields["consumer_group"] = cmd["group"]
    if op in ("commit", "pull", "queue_append", "queue_truncate") or (
            op == "reset" and "queue_id" in cmd):
        fields["topic"], fields["queue_id"] = cmd["topic"], cmd["queue_id"]
    if op == "commit":
        fields["offset"] = cmd["offset"]
    elif op == "pull":
        fields["offset"] = result["next_offset"] + result["count"]
    elif op == "queue_append":
        fields["offset"] = result["max_offset"]
    elif op == "queue_truncate":
        fields["offset"] = result["min_offset"]
    elif op == "reset" and result.get("plan"):
        fields["offset"] = result["plan"][-1]["to_offset"]
    return fields


# ====================================================================== one child process
@dataclass
class RunResult:
    mode: str
    start: int
    count: int
    acks: list[dict[str, Any]]
    killed: bool
    returncode: int
    stderr: str
    spawn_to_first_ack_s: float | None
    first_ack_to_exit_s: float | None
    target: str | None = None


class _AckReader(threading.Thread):
    """Collects complete stdout lines (acknowledgements) and when the first one arrived."""

    def __init__(self, stream: Any) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.lines: list[bytes] = []
        self.first_at: float | None = None

    def run(self) -> None:
        for raw in iter(self.stream.readline, b""):
            if not raw.endswith(b"\n"):
                break  # a line cut by the kill is no acknowledgement
            if self.first_at is None:
                self.first_at = time.monotonic()
            self.lines.append(raw)


def _cli_command() -> list[str]:
    script = Path(sys.executable).parent / "offset-ledger"
    if script.exists():
        return [str(script)]
    found = shutil.which("offset-ledger")
    return [found] if found else [sys.executable, "-c", "import cli; cli.app()"]


def run_child(
    data: Path, chunk: Path, *, mode: str, start: int, count: int, rng: random.Random,
    timing: dict[str, float],
) -> RunResult:
    args = ["--data-dir", str(data), "apply", str(chunk), "--json"]
    target = None
    if mode == "swap":
        op = rng.choice(sorted(SWAP_TARGETS))
        target = f"{op}:{rng.randint(1, SWAP_TARGETS[op])}:{rng.choice(('before', 'after'))}"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-kill-at", target, "--",
               "--swap", str(data)]
    elif mode == "targeted":
        op = rng.choice(sorted(TARGETS))
        when = "torn" if op == "torn_write" else rng.choice(("before", "after"))
        target = f"{op.replace('torn_', '')}:{rng.randint(1, TARGETS[op])}:{when}"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-kill-at", target, "--",
               *args]
    else:
        cmd = [*_cli_command(), *args]
    env = {k: v for k, v in os.environ.items() if k != "OFFSET_LEDGER_DEBUG"}
    stderr_path = chunk.with_suffix(".stderr")
    with open(stderr_path, "wb") as err:
        spawned = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                env=env, cwd=str(ROOT))
        reader = _AckReader(proc.stdout)
        reader.start()
        kill_at: float | None = None
        if mode == "startup":
            kill_at = spawned + rng.uniform(0, timing["spawn_to_first_ack"])
        delay = rng.uniform(0, timing["first_ack_to_exit"] * 1.2)
        killed = False
        while proc.poll() is None:
            now = time.monotonic()
            if kill_at is None and mode == "time" and reader.first_at is not None:
                kill_at = reader.first_at + delay
            if kill_at is not None and now >= kill_at:
                with _suppress_lookup():
                    os.kill(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.001)
        proc.wait()
        reader.join()
        proc.stdout.close()  # type: ignore[union-attr]
    exited = time.monotonic()
    if proc.returncode == -signal.SIGKILL:
        killed = True  # also a targeted child that killed itself
    acks = [json.loads(raw) for raw in reader.lines]
    first = reader.first_at
    return RunResult(
        mode=mode, start=start, count=count, acks=acks, killed=killed,
        returncode=proc.returncode, stderr=stderr_path.read_text(errors="replace"),
        spawn_to_first_ack_s=None if first is None else first - spawned,
        first_ack_to_exit_s=None if first is None else exited - first, target=target,
    )


class _suppress_lookup:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, *_: object) -> bool:
        return kind is ProcessLookupError


# ====================================================================== the checks
@dataclass
class Stats:
    kills: int = 0
    kills_by_mode: Counter = field(default_factory=Counter)
    kill_moments: Counter = field(default_factory=Counter)
    targets: Counter = field(default_factory=Counter)
    clean_runs: int = 0
    swaps_completed: int = 0
    rounds: int = 0
    commands_acknowledged: int = 0
    events_acknowledged: int = 0
    events_lost: int = 0
    events_invented: int = 0
    durable_unacknowledged_commands: int = 0
    writer_checks: int = 0
    reader_checks: int = 0
    view_file_checks: int = 0
    view_file_lag_events: int = 0  # the most a view file lagged the log after a kill
    verify_runs: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        for k, v in out.items():
            if isinstance(v, Counter):
                out[k] = dict(sorted(v.items()))
        return out


def _first_difference(got: Any, want: Any) -> str:
    n = min(got.num_rows, want.num_rows)
    for start in range(0, n, 4096):
        a = got.slice(start, 4096).to_pylist()
        b = want.slice(start, 4096).to_pylist()
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return f"seq {start + i}: log {x} != reference {y}"
    return f"lengths differ: log {got.num_rows}, reference {want.num_rows}"


def check_log(events: Any, ref: Reference, acked_upto: int, where: str, stats: Stats) -> int:
    """The log is a prefix of the reference model's events (in the columns the model decides),
    holds every acknowledged command, ends on a command boundary, and no event an earlier check
    read has changed (in any column). Returns the number of commands wholly in it."""
    n = events.num_rows
    want_acked = ref.cum[acked_upto]
    if n < want_acked:
        stats.events_lost += want_acked - n
        raise HarnessFailure(
            f"{where}: acknowledged events lost: the log ends at seq {n}, commands [0, "
            f"{acked_upto}) were acknowledged and hold events up to seq {want_acked}")
    if n > ref.events.num_rows:
        stats.events_invented += n - ref.events.num_rows
        raise HarnessFailure(f"{where}: {n} events, the whole stream makes {ref.events.num_rows}")
    decided = events.select(ref.events.column_names)
    if rows(decided) != rows(ref.events.slice(0, n)):
        raise HarnessFailure(f"{where}: the log is not a prefix of the reference events: "
                             f"{_first_difference(decided, ref.events.slice(0, n))}")
    if ref.durable is not None:
        seen = min(n, ref.durable.num_rows)
        if not events.slice(0, seen).equals(ref.durable.slice(0, seen)):
            raise HarnessFailure(f"{where}: a durable event changed since an earlier check: "
                                 f"{_first_difference(events.slice(0, seen), ref.durable)}")
    boundary = ref.boundary(n)
    if boundary is None:
        i = bisect.bisect_left(ref.cum, n) - 1
        raise HarnessFailure(
            f"{where}: the log ends at seq {n}, inside the events of command {i} "
            f"({ref.lines[i][:120]!r}, events {ref.cum[i]}..{ref.cum[i + 1]}): a torn command")
    if ref.durable is None or n > ref.durable.num_rows:
        ref.durable = events
    return max(boundary, acked_upto)


def check_acks(run: RunResult, ref: Reference, where: str) -> int:
    """Acknowledgements are one per line, in order, equal to the reference results, and their
    last event matches the command. Returns how many commands were acknowledged."""
    for i, ack in enumerate(run.acks):
        index = run.start + i
        if ack.get("line") != i + 1:
            raise HarnessFailure(f"{where}: acknowledgement {i + 1} names line {ack.get('line')}")
        got, want = comparable(ack), ref.results[index]
        if not agrees(ack, want):
            raise HarnessFailure(f"{where}: command {index} ({ref.lines[index][:120]!r}) "
                                 f"acknowledged as {got}, the reference says {want}")
        if "seq" in got:
            row = ref.events.slice(got["seq"], 1).to_pylist()[0]
            for name, value in expected_fields(ref.commands[index], got).items():
                if row[name] != value:
                    raise HarnessFailure(f"{where}: command {index} acknowledged at seq "
                                         f"{got['seq']} whose {name} is {row[name]!r}, not "
                                         f"{value!r}")
    return run.start + len(run.acks)


def compare_views(got: dict[str, list[tuple]], want: dict[str, list[tuple]], where: str) -> None:
    for table, expected in want.items():
        if got[table] != expected:
            extra = [r for r in got[table] if r not in expected][:3]
            missing = [r for r in expected if r not in got[table]][:3]
            raise HarnessFailure(f"{where}: view table {table} differs from the reference "
                                 f"model's state: only in the view {extra}, only in the model "
                                 f"{missing}")


def check_view_file(data: Path, ref: Reference, log_end: int, stats: Stats, where: str) -> None:
    """The view file as a kill left it, before anything opens it as a writer (which would
    rebuild it): it may lag the log (it is flushed every few batches) but never hold what the
    log does not. Its position is at most the log end and on a command boundary, and its
    tables are the reference model's state at that position."""
    found = view_file(data / "view.duckdb")
    if found is None:
        return
    position, tables = found
    if position is None:
        position = 0  # never flushed: it must hold nothing
    if position > log_end:
        raise HarnessFailure(f"{where}: the view file is at seq {position}, past the log end "
                             f"{log_end}: it holds what the log does not")
    if ref.boundary(position) is None:
        raise HarnessFailure(f"{where}: the view file is at seq {position}, inside a command")
    assert ref.model is not None
    compare_views(tables, ref.model.at_seq(position).view_rows(), f"{where} (view file at "
                  f"seq {position} of {log_end})")
    stats.view_file_checks += 1
    stats.view_file_lag_events = max(stats.view_file_lag_events, log_end - position)


def kill_moment(data: Path) -> list[str]:
    """What a kill interrupted, judged from the files it left (before anything repairs them)."""
    from storage import names
    from storage.fs import OsFileSystem
    from storage.manifest import load

    log_dir, cp_dir = data / names.LOG_DIR, data / names.CHECKPOINT_DIR
    manifest = load(OsFileSystem(), log_dir)
    if manifest is None:
        return ["before the first manifest"]
    live = {e.file for e in manifest.segments} | {names.MANIFEST_FILE,
                                                  names.wal_name(manifest.active_base_seq)}
    live_cp = {c.file for c in manifest.checkpoints}
    found = []
    log_files = os.listdir(log_dir)
    if any(n.endswith(".parquet.tmp") for n in log_files):
        found.append("seal or swap: parquet being written")
    if any(n.endswith(".parquet") and n not in live for n in log_files):
        found.append("seal or swap: parquet renamed in, manifest not committed")
    if any(n.endswith(".wal") and n not in live for n in log_files):
        found.append("seal: committed, old wal not yet deleted")
    if names.tmp_name(names.MANIFEST_FILE) in log_files:
        found.append("manifest commit")
    cp_files = os.listdir(cp_dir) if cp_dir.exists() else []
    if any(n.endswith(".tmp") for n in cp_files):
        found.append("checkpoint: being written")
    if any(not n.endswith(".tmp") and n not in live_cp for n in cp_files):
        found.append("checkpoint: renamed, manifest not committed")
    return found


def check_after_kill(data: Path, ref: Reference, acked_upto: int, *, writer: bool,
                     segment_events: int, stats: Stats, where: str) -> int:
    """Reader snapshot first (what a reader sees before any repair), then optionally the writer's
    recovery, the view and `verify`. Returns the index to continue the stream from."""
    from ledger import Ledger

    for moment in kill_moment(data):
        stats.kill_moments[moment] += 1
    with Ledger.open(data, readonly=True) as reader:  # a reader opens no view file
        check_view_file(data, ref, reader.log.next_seq, stats, where)
        if reader.log.recovery.bytes_cut:
            stats.kill_moments["torn wal tail"] += 1
        if reader.log.tail().num_rows >= segment_events:
            stats.kill_moments["seal due (wal full)"] += 1
        resume = check_log(reader.log.read(), ref, acked_upto, f"{where} (reader)", stats)
        stats.reader_checks += 1
    if writer:
        resume = check_writer(data, ref, acked_upto, stats, where)
    if resume > acked_upto:
        stats.durable_unacknowledged_commands += resume - acked_upto
    return resume


def check_writer(data: Path, ref: Reference, acked_upto: int, stats: Stats, where: str) -> int:
    from ledger import Ledger

    with Ledger.open(data) as led:
        events = led.log.read()
        resume = check_log(events, ref, acked_upto, f"{where} (writer)", stats)
        assert ref.model is not None
        compare_views(view_tables(lambda sql: rows(led.sql(sql))),
                      ref.model.at_seq(events.num_rows).view_rows(), f"{where} (writer)")
        stats.writer_checks += 1
    problems = run_verify(data)
    stats.verify_runs += problems is not None
    if problems:
        raise HarnessFailure(f"{where}: verify found problems: {problems}")
    return resume


def run_verify(data: Path) -> list[str] | None:
    """`offset-ledger verify` in-process, if this version of the CLI has it."""
    try:
        from ledger.store.verify import verify_ledger
    except ImportError:
        return None
    report = verify_ledger(data)
    return [str(p) for p in report.problems]


# ====================================================================== the loop
@dataclass
class Config:
    kills: int = 25
    seed: int = 1
    commands_per_round: int = 40_000
    workdir: Path | None = None
    keep: bool = False
    verbose: bool = False


def _init(data: Path, batch: int) -> None:
    subprocess.run([*_cli_command(), "--data-dir", str(data), "init", "--segment-events",
                    str(SEGMENT_EVENTS), "--durability", "always", "--json"],
                   check=True, capture_output=True, cwd=str(ROOT))
    from ledger import Ledger

    Ledger.open(data, apply_batch_commands=batch).close()


def run(config: Config) -> Stats:
    """Kill children until `config.kills` kills happened; raise HarnessFailure on a broken rule."""
    started = time.monotonic()
    stats = Stats()
    base = config.workdir or Path(tempfile.mkdtemp(prefix="crash-harness-"))
    base.mkdir(parents=True, exist_ok=True)
    rng = random.Random(config.seed)
    timing = {"spawn_to_first_ack": 1.0, "first_ack_to_exit": 0.25}
    failed = False
    try:
        while stats.kills < config.kills:
            _round(config, stats, base, rng, timing)
    except BaseException:
        failed = True
        raise
    finally:
        stats.seconds = round(time.monotonic() - started, 1)
        if failed or config.keep:
            print(f"crash harness: data kept in {base} (seed {config.seed})", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    return stats


def _round(config: Config, stats: Stats, base: Path, rng: random.Random,
           timing: dict[str, float]) -> None:
    number = stats.rounds
    stats.rounds += 1
    seed = config.seed * 1000 + number
    work = base / f"round-{number}"
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    lines = build_stream(config.commands_per_round, seed)
    ref = reference_run(lines)
    data = work / "data"
    batch = rng.choice(BATCH_SIZES)
    _init(data, batch)
    chunk = work / "chunk.ndjson"
    position = 0  # the first command not yet durable
    acked_upto = 0
    runs = 0
    while position < len(lines):
        killing = stats.kills < config.kills
        count = rng.randint(*CHUNK_COMMANDS) if killing else len(lines) - position
        count = min(count, len(lines) - position)
        chunk.write_bytes(b"".join(lines[position:position + count]))
        roll = rng.random()
        mode = ("none" if not killing else "startup" if roll < STARTUP_SHARE
                else "targeted" if roll < STARTUP_SHARE + TARGETED_SHARE else "time")
        if killing and rng.random() < SWAP_SHARE and _sealed_segments(data) > SWAP_SEGMENTS:
            _swap_run(config, stats, data, ref, acked_upto, rng, timing, chunk, position,
                      f"seed {config.seed} round {number} run {runs} (swap)")
            runs += 1
            continue
        where = (f"seed {config.seed} round {number} (stream seed {seed}, batch {batch}) run "
                 f"{runs} ({mode}, commands {position}..{position + count})")
        result = run_child(data, chunk, mode=mode, start=position, count=count, rng=rng,
                           timing=timing)
        runs += 1
        if result.target:
            where += f" target {result.target}"
        acked = check_acks(result, ref, where)
        stats.commands_acknowledged += len(result.acks)
        acked_upto = max(acked_upto, acked)
        if result.killed:
            stats.kills += 1
            stats.kills_by_mode[mode] += 1
            if result.target:
                stats.targets[result.target.split(":")[0] + ":" + result.target.split(":")[2]] += 1
            writer = stats.kills % 2 == 0
            position = check_after_kill(data, ref, acked_upto, writer=writer,
                                        segment_events=SEGMENT_EVENTS, stats=stats, where=where)
            if config.verbose:
                print(f"kill {stats.kills}: {where}: {len(result.acks)} acks, continue at "
                      f"{position}", file=sys.stderr)
        else:
            if result.returncode != 0 or "Traceback" in result.stderr:
                raise HarnessFailure(f"{where}: exit {result.returncode}: {result.stderr[-2000:]}")
            if len(result.acks) != count:
                raise HarnessFailure(f"{where}: {len(result.acks)} results for {count} lines")
            stats.clean_runs += 1
            position += count
            _learn(timing, result)
    final = check_writer(data, ref, len(lines), stats, f"seed {config.seed} round {number} end")
    if final != len(lines) or ref.cum[-1] != ref.events.num_rows:
        raise HarnessFailure(f"round {number}: the stream did not complete")
    stats.events_acknowledged += ref.events.num_rows
    if not config.keep:
        shutil.rmtree(work, ignore_errors=True)


def _sealed_segments(data: Path) -> int:
    return len(json.loads((data / "log" / "MANIFEST").read_bytes())["segments"])


def _swap_run(config: Config, stats: Stats, data: Path, ref: Reference, acked_upto: int,
              rng: random.Random, timing: dict[str, float], chunk: Path, position: int,
              where: str) -> None:
    """A compaction swap killed at a storage step (or completed): the log must read exactly
    as before, whatever the step."""
    result = run_child(data, chunk, mode="swap", start=position, count=0, rng=rng,
                       timing=timing)
    where += f" target {result.target}"
    if not result.killed:
        if result.returncode != 0 or "Traceback" in result.stderr:
            raise HarnessFailure(f"{where}: exit {result.returncode}: {result.stderr[-2000:]}")
        stats.swaps_completed += 1
        check_writer(data, ref, acked_upto, stats, where)
        return
    stats.kills += 1
    stats.kills_by_mode["swap"] += 1
    op, _, when = result.target.split(":")  # type: ignore[union-attr]
    stats.targets[f"swap {op}:{when}"] += 1
    resume = check_after_kill(data, ref, acked_upto, writer=True, segment_events=SEGMENT_EVENTS,
                              stats=stats, where=where)
    if resume != position:
        raise HarnessFailure(f"{where}: the swap changed the log end from {position} to {resume}")


def _learn(timing: dict[str, float], result: RunResult) -> None:
    """Kill delays follow how long a child takes to start and to run a chunk on this machine."""
    if result.spawn_to_first_ack_s is not None:
        timing["spawn_to_first_ack"] = 0.7 * timing["spawn_to_first_ack"] + \
            0.3 * result.spawn_to_first_ack_s
    if result.first_ack_to_exit_s is not None:
        timing["first_ack_to_exit"] = 0.7 * timing["first_ack_to_exit"] + \
            0.3 * result.first_ack_to_exit_s


# ====================================================================== the targeted child
def child_main(spec: str, args: list[str]) -> None:
    """Run the CLI with the storage file layer patched to SIGKILL this process at one operation:
    `OP:K:before|after|torn` (torn: a write that wrote half its bytes)."""
    op, k_text, when = spec.split(":")
    k = int(k_text)
    from storage import fs as fs_mod

    calls = Counter()

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def hooked(name: str, original: Any) -> Any:
        def wrapper(self: Any, *a: Any) -> Any:
            if name != op:
                return original(self, *a)
            calls[name] += 1
            if calls[name] != k:
                return original(self, *a)
            if when == "torn":
                data = memoryview(a[0]).cast("B")
                original(self, data[: max(1, len(data) // 2)])
                die()
            if when == "before":
                die()
            out = original(self, *a)
            die()
            return out
        return wrapper

    handle_ops = {"write": "write", "fsync": "fsync", "truncate": "truncate"}
    for name, attr in handle_ops.items():
        setattr(fs_mod.OsFileHandle, attr, hooked(name, getattr(fs_mod.OsFileHandle, attr)))
    for name in ("rename", "remove", "fsync_dir", "fsync_file", "open_write"):
        setattr(fs_mod.FileSystem, name, hooked(name, getattr(fs_mod.FileSystem, name)))
    if args[:1] == ["--swap"]:
        swap_child(Path(args[1]))
        return
    from cli import app

    app(args=args, prog_name="offset-ledger")


def swap_child(data: Path) -> None:
    """A compaction swap without Spark: merge the oldest sealed segments into one file, rows
    ordered by key as `spark_compaction` orders them, and swap it in with
    `SegmentedLog.replace` (the same storage path the Spark job commits through)."""
    from ledger.fold.events import EVENT_SCHEMA
    from storage import SegmentedLog
    from storage.fs import OsFileSystem
    from storage.sealed import write_parquet

    with SegmentedLog.open(data, EVENT_SCHEMA) as log:
        run = log.segments()[:SWAP_SEGMENTS]
        if len(run) < 2:
            return
        table = log.read(seq_gte=run[0].base_seq, seq_lt=run[-1].end_seq)
        table = table.sort_by([("consumer_group", "ascending"), ("topic", "ascending"),
                               ("queue_id", "ascending"), ("seq", "ascending")])
        staging = data.parent / "staging"
        staging.mkdir(exist_ok=True)
        staged = staging / f"{run[0].base_seq:020d}.parquet"
        write_parquet(OsFileSystem(), staged, table, log.settings, 256)
        log.replace(run, [staged])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child-kill-at"]:
        child_main(argv[1], argv[3:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=200, help="SIGKILLs to survive (200)")
    parser.add_argument("--seed", type=int, default=None, help="reproduce a run (random)")
    parser.add_argument("--commands", type=int, default=40_000,
                        help="workload commands per round (40000)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the data goes (tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the data directories")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per kill")
    ns = parser.parse_args(argv)
    seed = ns.seed if ns.seed is not None else random.SystemRandom().randrange(1, 10**6)
    config = Config(kills=ns.kills, seed=seed, commands_per_round=ns.commands,
                    workdir=ns.workdir, keep=ns.keep, verbose=ns.verbose)
    print(f"crash harness: seed {seed}, {ns.kills} kills", file=sys.stderr)
    try:
        stats = run(config)
    except HarnessFailure as e:
        print(f"crash harness FAILED (seed {seed}): {e}", file=sys.stderr)
        return 1
    figures = {"seed": seed, **stats.as_dict()}
    if ns.json:
        print(json.dumps(figures, indent=1))
    else:
        for key, value in figures.items():
            print(f"{key:34} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
