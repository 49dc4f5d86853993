"""Follow a RocketMQ broker's `consumerOffset.json` as the broker rewrites it.

A broker persists its offsets every few seconds (flushConsumerOffsetInterval, 5 s by default),
and how it writes decides what a reader can see:
- newer brokers write `consumerOffset.json.tmp` and rename it over the file: always whole;
- 4.x `MixAll.string2File` writes the .tmp, copies the current file to `consumerOffset.json.bak`,
  deletes the file and renames the .tmp: for a moment there is no file;
- older writers copy the file to the .bak and rewrite it in place: a reader may see it empty or
  cut (a prefix of a JSON document never parses, so a cut file is always caught).
So each interval the follower reads the file; when it is missing, empty or does not parse it
reads the .bak (the last whole content); when neither is usable it waits for the next interval.
It calls `on_snapshot` only when the offsets (rows and broadcast groups, not the dataVersion,
which changes on every flush) differ from the last snapshot it recorded.

A .bak is a copy of an earlier file: one equal to a snapshot recorded before the last one is a
stale copy (a broker that stopped writing .bak files long ago) and is never recorded again, so
the recorded sequence never steps back.

The loop sleeps with the injected `sleep` (by default `stop.wait`, so setting `stop` from a
signal handler ends it at once) and returns when `stop` is set: the CLI sets it on SIGINT/SIGTERM.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ledger.errors import InvalidInput
from ledger.importers.rocketmq_offsets import RocketMQSnapshot, parse_rocketmq_offsets

BAK_SUFFIX = ".bak"
SEEN_SNAPSHOTS_MAX = 4096

SnapshotKey = tuple[tuple[tuple[str, str, int, int], ...], tuple[str, ...]]


def snapshot_key(snapshot: RocketMQSnapshot) -> SnapshotKey:
    """What makes two snapshots the same: their offset rows and broadcast groups, in any order."""
    return tuple(sorted(snapshot.rows)), tuple(sorted(snapshot.broadcast_groups))


@dataclass(slots=True)
class WatchStats:
    """What the follower did, for the CLI to report when it stops."""

    reads: int = 0
    snapshots: int = 0
    from_bak: int = 0
    unreadable: int = 0
    stale_bak: int = 0


@dataclass(frozen=True, slots=True)
class _Read:
    snapshot: RocketMQSnapshot | None
    from_bak: bool
    problem: str | None


def _parse_file(path: Path) -> tuple[RocketMQSnapshot | None, str]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, f"{path} is missing"
    except OSError as e:
        return None, f"{path} cannot be read ({e.strerror})"
    if not data.strip():
        return None, f"{path} is empty"
    try:
        return parse_rocketmq_offsets(data), ""
    except InvalidInput as e:
        return None, f"{path} does not parse ({e})"


def read_consumer_offsets(path: Path) -> _Read:
    """The file's snapshot, else the .bak's, else nothing with the reason."""
    snapshot, problem = _parse_file(path)
    if snapshot is not None:
        return _Read(snapshot, False, None)
    bak = path.with_name(path.name + BAK_SUFFIX)
    bak_snapshot, bak_problem = _parse_file(bak)
    if bak_snapshot is not None:
        return _Read(bak_snapshot, True, f"{problem}: read {bak.name}")
    return _Read(None, False, f"{problem}, and {bak_problem}: waiting")


def follow_consumer_offsets(path: str | Path, *, interval_s: float,
                            on_snapshot: Callable[[RocketMQSnapshot], None],
                            stop: threading.Event,
                            sleep: Callable[[float], object] | None = None,
                            on_problem: Callable[[str], None] | None = None) -> WatchStats:
    """Read `path` every `interval_s` until `stop` is set; call `on_snapshot` with each snapshot
    whose offsets differ from the last one recorded. `on_problem` hears why a read was not used
    (or came from the .bak), each time it changes. A path that exists neither as the file nor as
    its .bak at the start is an error; later it may vanish for a moment."""
    if not interval_s > 0:
        raise InvalidInput(f"invalid interval {interval_s!r}: must be more than 0 seconds")
    path = Path(path)
    bak = path.with_name(path.name + BAK_SUFFIX)
    if not path.exists() and not bak.exists():
        raise InvalidInput(f"{path}: no such file (nor {bak.name})")
    pause = sleep if sleep is not None else stop.wait
    stats = WatchStats()
    last: SnapshotKey | None = None
    last_problem: str | None = None
    seen: OrderedDict[int, None] = OrderedDict()  # hashes of recorded snapshots, newest last
    while not stop.is_set():
        read = read_consumer_offsets(path)
        stats.reads += 1
        if read.problem != last_problem and read.problem is not None and on_problem is not None:
            on_problem(read.problem)
        last_problem = read.problem
        if read.snapshot is None:
            stats.unreadable += 1
        else:
            key = snapshot_key(read.snapshot)
            stats.from_bak += int(read.from_bak)
            if key != last:
                if read.from_bak and hash(key) in seen:
                    stats.stale_bak += 1
                    if on_problem is not None:
                        on_problem(f"{bak.name} holds an earlier snapshot: not recorded again")
                else:
                    on_snapshot(read.snapshot)
                    stats.snapshots += 1
                    last = key
                    seen[hash(key)] = None
                    seen.move_to_end(hash(key))
                    if len(seen) > SEEN_SNAPSHOTS_MAX:
                        seen.popitem(last=False)
        if stop.is_set():
            break
        pause(interval_s)
    return stats
