"""The consumerOffset.json follower records each distinct snapshot once, in order, never a torn
one, whichever way the broker rewrites the file."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from ledger.errors import InvalidInput
from ledger.importers.rocketmq_offsets import (
    RocketMQSnapshot,
    parse_rocketmq_offsets,
    rocketmq_snapshot_commands,
)
from ledger.importers.rocketmq_watch import follow_consumer_offsets, snapshot_key


def content(offsets: tuple[int, int], counter: int) -> bytes:
    """A consumerOffset.json as fastjson writes it (bare integer keys), dataVersion last."""
    return (b'{\n\t"offsetTable":{\n\t\t"OrderTopic@g1":{0:%d,1:%d},\n\t\t"%%RETRY%%g1@g1":{0:0}'
            b'\n\t},\n\t"dataVersion":{"counter":%d,"timestamp":%d}\n}'
            % (offsets[0], offsets[1], counter, 1700000000000 + counter))


def rows_of(offsets: tuple[int, int]) -> tuple:
    return tuple(sorted([("g1", "OrderTopic", 0, offsets[0]), ("g1", "OrderTopic", 1, offsets[1]),
                         ("g1", "%RETRY%g1", 0, 0)]))


def test_snapshot_commands_set_broadcast_groups_first_then_sync_every_row():
    snap = parse_rocketmq_offsets(b'{"offsetTable":{"T@g@broadcast":{0:5},"T@h":{1:7}}}')
    assert rocketmq_snapshot_commands(snap, "rocketmq:consumerOffset.json") == [
        {"op": "group_set", "group": "g", "mode": "broadcast"},
        {"op": "sync", "group": "g", "topic": "T", "queue_id": 0, "offset": 5,
         "source": "rocketmq:consumerOffset.json"},
        {"op": "sync", "group": "h", "topic": "T", "queue_id": 1, "offset": 7,
         "source": "rocketmq:consumerOffset.json"}]


def test_stepped_rewrites_of_every_style_record_each_distinct_snapshot_once(tmp_path: Path):
    """The injected sleep performs the broker's next step between two reads, so every state a
    reader can meet (whole, cut, empty, missing, .bak only, stale .bak) is met once."""
    main = tmp_path / "consumerOffset.json"
    bak = tmp_path / "consumerOffset.json.bak"
    s1, s2, s3, s4 = content((1, 1), 1), content((5, 2), 2), content((9, 4), 3), content((12, 4), 4)
    steps = [
        lambda: main.write_bytes(content((1, 1), 9)),  # same offsets, new dataVersion: nothing
        lambda: bak.write_bytes(s1),                   # old style: .bak first ...
        lambda: main.write_bytes(s2[:40]),             # ... then the file rewritten in place, cut
        lambda: main.write_bytes(b""),                 # ... or empty
        lambda: main.write_bytes(s2),
        lambda: (bak.write_bytes(s2), main.unlink()),  # 4.x string2File: the file is gone
        lambda: main.write_bytes(s3),
        lambda: main.write_bytes(s3[:-1]),             # cut, .bak holds s2 (recorded, older): skip
        lambda: main.write_bytes(s4),
    ]
    main.write_bytes(s1)
    recorded: list[RocketMQSnapshot] = []
    problems: list[str] = []
    stop = threading.Event()

    def sleep(_seconds: float) -> None:
        if steps:
            steps.pop(0)()
        else:
            stop.set()

    stats = follow_consumer_offsets(main, interval_s=5, on_snapshot=recorded.append, stop=stop,
                                    sleep=sleep, on_problem=problems.append)
    assert [snapshot_key(s)[0] for s in recorded] == [
        rows_of((1, 1)), rows_of((5, 2)), rows_of((9, 4)), rows_of((12, 4))]
    assert stats.snapshots == 4 and stats.stale_bak == 1 and stats.from_bak == 4
    assert any("is missing: read consumerOffset.json.bak" in p for p in problems)
    assert any("holds an earlier snapshot" in p for p in problems)


def test_nothing_usable_waits_and_records_the_next_whole_file(tmp_path: Path):
    main = tmp_path / "consumerOffset.json"
    main.write_bytes(content((3, 3), 1)[:20])
    steps = [lambda: None, lambda: main.write_bytes(content((3, 3), 1))]
    recorded: list[RocketMQSnapshot] = []
    problems: list[str] = []
    stop = threading.Event()

    def sleep(_seconds: float) -> None:
        steps.pop(0)() if steps else stop.set()

    stats = follow_consumer_offsets(main, interval_s=1, on_snapshot=recorded.append, stop=stop,
                                    sleep=sleep, on_problem=problems.append)
    assert [snapshot_key(s)[0] for s in recorded] == [rows_of((3, 3))]
    assert stats.unreadable == 2
    assert len(problems) == 1 and problems[0].endswith("is missing: waiting")


def test_a_path_that_does_not_exist_at_the_start_is_refused(tmp_path: Path):
    with pytest.raises(InvalidInput, match="no such file"):
        follow_consumer_offsets(tmp_path / "nope.json", interval_s=1, on_snapshot=print,
                                stop=threading.Event())


class Reads:
    """The follower's sleep, counting its reads: the broker waits for the follower to have read
    each whole snapshot instead of holding it for a wall-clock time that a loaded machine may
    not give the follower's thread (no flake on shared cores; a stuck follower fails loudly)."""

    def __init__(self, stop: threading.Event) -> None:
        self.count = 0
        self.cond = threading.Condition()
        self.stop = stop

    def sleep(self, seconds: float) -> None:
        with self.cond:
            self.count += 1
            self.cond.notify_all()
        self.stop.wait(seconds)

    def wait(self, reads: int, timeout: float = 30) -> None:
        with self.cond:
            target = self.count + reads
            if not self.cond.wait_for(lambda: self.count >= target, timeout):
                raise AssertionError(f"the follower did not read for {timeout} s")


class Broker(threading.Thread):
    """Rewrites consumerOffset.json like the brokers do: each whole snapshot stays until the
    follower has read it twice, each torn or missing state lasts `gap` seconds."""

    def __init__(self, path: Path, snapshots: list[bytes], reads: Reads, gap: float) -> None:
        super().__init__(daemon=True)
        self.path, self.snapshots, self.reads, self.gap = path, snapshots, reads, gap
        self.bak = path.with_name(path.name + ".bak")
        self.tmp = path.with_name(path.name + ".tmp")

    def rename_style(self, data: bytes) -> None:
        self.tmp.write_bytes(data)
        os.replace(self.tmp, self.path)

    def string2file_style(self, data: bytes) -> None:
        self.tmp.write_bytes(data)
        self.bak.write_bytes(self.path.read_bytes())
        self.path.unlink()
        time.sleep(self.gap)
        os.replace(self.tmp, self.path)

    def in_place_style(self, data: bytes, with_bak: bool) -> None:
        if with_bak:
            self.bak.write_bytes(self.path.read_bytes())
        with open(self.path, "wb") as f:  # truncates: empty, then a prefix, then all
            f.flush()
            time.sleep(self.gap / 2)
            f.write(data[: len(data) // 2])
            f.flush()
            time.sleep(self.gap / 2)
            f.write(data[len(data) // 2:])

    def run(self) -> None:
        styles = [self.rename_style, self.string2file_style,
                  lambda d: self.in_place_style(d, with_bak=True),
                  lambda d: self.in_place_style(d, with_bak=False)]
        for i, data in enumerate(self.snapshots):
            styles[i % len(styles)](data)
            self.reads.wait(2)  # at least one whole read began after the write


@pytest.mark.timeout(60)
def test_a_broker_rewriting_the_file_concurrently_is_followed_without_torn_or_repeated_snapshots(
        tmp_path: Path):
    main = tmp_path / "consumerOffset.json"
    offsets = [(i * 3, i * 2) for i in range(1, 17)]
    snapshots: list[bytes] = []
    for i, pair in enumerate(offsets):
        snapshots.append(content(pair, 2 * i))
        snapshots.append(content(pair, 2 * i + 1))  # a flush that changed nothing but the version
    main.write_bytes(content((0, 0), 0))
    recorded: list[RocketMQSnapshot] = []
    stop = threading.Event()
    reads = Reads(stop)
    broker = Broker(main, snapshots, reads, gap=0.03)
    stats = []
    reader = threading.Thread(target=lambda: stats.append(follow_consumer_offsets(
        main, interval_s=0.004, on_snapshot=recorded.append, stop=stop, sleep=reads.sleep)),
        daemon=True)
    reader.start()
    reads.wait(1)  # the first content is read before the broker rewrites it
    broker.start()
    broker.join()
    time.sleep(0.1)
    stop.set()
    reader.join(5)
    assert not reader.is_alive() and stats[0].reads > len(snapshots)
    assert [snapshot_key(s)[0] for s in recorded] == [rows_of((0, 0))] + [
        rows_of(pair) for pair in offsets]
