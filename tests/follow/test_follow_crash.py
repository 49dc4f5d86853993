"""A follower killed with SIGKILL mid-stream and started again records exactly what one
uninterrupted run records: its positions are durable in the same append as the events."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

from tests.follow.conftest import Cluster, cli_json, follow
from tests.tools.crash_harness import _cli_command

FOLLOW_GROUP = "offset-ledger.follow.mock"
START_TS = int(time.time() * 1000) - 3_600_000


def _write_stream(cluster: Cluster, first: int, last: int) -> None:
    """Records first..last-1 of one stream: commits of 12 groups on 3 topics, offsets moving up
    and now and then back (a reset), tombstones now and then, in time order."""
    rng = random.Random(24)
    offsets: dict[tuple[str, str, int], int] = {}
    ts = START_TS
    for i in range(last):
        key = (f"g{rng.randrange(12)}", f"topic.{rng.randrange(3)}", rng.randrange(4))
        ts += rng.randrange(0, 3)
        if i % 97 == 96:
            offsets.pop(key, None)
            if i >= first:
                cluster.offset_tombstone(*key)
            continue
        step = rng.choice((0, 0, 1, 5, 17, -3)) if key in offsets else 1
        offsets[key] = max(offsets.get(key, 0) + step, 0)
        if i >= first:
            cluster.commit(*key, offsets[key], ts)
    cluster.flush()


def _per_key(data: Path) -> dict[tuple, list[tuple]]:
    out: dict[tuple, list[tuple]] = defaultdict(list)
    for e in cli_json(data, "history"):
        if e["consumer_group"] in (None, FOLLOW_GROUP):
            continue
        out[(e["consumer_group"], e["topic"], e["queue_id"])].append(
            (e["kind"], e["prev_offset"], e["offset"], e["client_id"]))
    return dict(out)


def _position(data: Path) -> int:
    done = subprocess.run([*_cli_command(), "--data-dir", str(data), "progress", "--group",
                           FOLLOW_GROUP, "--json"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        return 0
    return sum(r["committed_offset"] for r in json.loads(done.stdout))


def test_kill_9_mid_stream_then_restart_loses_and_doubles_nothing(cluster: Cluster,
                                                                  tmp_path: Path) -> None:
    records = 8000
    crashed, whole = tmp_path / "crashed", tmp_path / "whole"
    _write_stream(cluster, 0, 2000)
    proc = subprocess.Popen(
        [*_cli_command(), "--data-dir", str(crashed), "follow", "kafka", "--bootstrap-server",
         cluster.bootstrap, "--cluster", "mock", "--offsets-topic", cluster.offsets_topic],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while _position(crashed) == 0:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        for start in range(2000, 5000, 200):  # the follower reads while records come in
            _write_stream(cluster, start, start + 200)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    _write_stream(cluster, 5000, records)
    killed_at = _position(crashed)
    assert 0 < killed_at < records, killed_at  # mid-stream

    done = follow(whole, cluster)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["records"] == records
    again = follow(crashed, cluster)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["records"] == records - killed_at
    assert _per_key(crashed) == _per_key(whole)
    assert _position(crashed) == _position(whole) == records


def test_sigterm_finishes_the_batch_in_hand_and_exits_0(cluster: Cluster, tmp_path: Path) -> None:
    _write_stream(cluster, 0, 3000)
    proc = subprocess.Popen(
        [*_cli_command(), "--data-dir", str(tmp_path), "follow", "kafka", "--bootstrap-server",
         cluster.bootstrap, "--cluster", "mock", "--offsets-topic", cluster.offsets_topic,
         "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while _position(tmp_path) == 0:
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    summary = json.loads(out)
    assert summary["records"] == _position(tmp_path)  # every record read is recorded
    again = follow(tmp_path, cluster)
    assert json.loads(again.stdout)["records"] == 3000 - summary["records"]
