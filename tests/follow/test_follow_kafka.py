"""`offset-ledger follow kafka` against librdkafka's mock cluster: real consumer groups on real
topics, their commits written into the offsets topic as a coordinator writes them, the follower
a real process; then `history`, `at`, `lag` and `progress` agree with what was written and
with the mock's watermarks."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.follow.conftest import Cluster, cli_json, follow
from tests.support import kafka_encode as enc


def _syncs(data: Path, group: str) -> list[dict]:
    return [e for e in cli_json(data, "history", "--group", group) if e["kind"] != "queue_append"]


def test_follow_until_idle_then_history_at_lag_and_progress_agree(cluster: Cluster,
                                                                   tmp_path: Path) -> None:
    orders = cluster.topic("orders", 2)
    cluster.produce(orders, 0, 30)
    cluster.produce(orders, 1, 20)
    committed, assignment, member = cluster.consume_and_commit("billing", orders, "billing-c1", 35)
    assert sum(committed.values()) == 35
    t0 = int(time.time() * 1000) - 600_000
    cluster.group_metadata("billing", [enc.MemberSpec(member, "billing-c1",
                                                      partitions=tuple(assignment))])
    # round 1: the first offsets; round 2 (a minute later): the consumer's real commits; the
    # same commit again 5 s later (a consumer commits on a timer): nothing to record
    for p in sorted(committed):
        cluster.commit("billing", orders, p, 0, t0 + p)
    for later in (60_000, 65_000):  # a coordinator writes in time order
        for p, offset in sorted(committed.items()):
            cluster.commit("billing", orders, p, offset, t0 + later + p)
    cluster.flush()

    done = follow(tmp_path, cluster)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["commits"] == 3 * len(committed) and summary["undecodable"] == 0
    assert summary["groups"] == 1 and summary["group_metadata"] == 1

    history = _syncs(tmp_path, "billing")
    assert [(e["kind"], e["queue_id"], e["prev_offset"], e["offset"], e["ts_ms"], e["client_id"])
            for e in history] == (
        [("sync", p, None, 0, t0 + p, "billing-c1") for p in sorted(committed)]
        + [("sync", p, 0, o, t0 + 60_000 + p, "billing-c1") for p, o in sorted(committed.items())])
    assert {e["actor"] for e in history} == {"sync:kafka:mock"}

    at = cli_json(tmp_path, "at", str(t0 + 30_000), "--group", "billing")
    assert {r["queue_id"]: r["committed_offset"] for r in at} == dict.fromkeys(committed, 0)

    highs = {p: cluster.high(orders, p) for p in (0, 1)}
    progress = {r["queue_id"]: r for r in cli_json(tmp_path, "progress", "--group", "billing")}
    for p, offset in committed.items():
        assert progress[p]["committed_offset"] == offset
        assert progress[p]["max_offset"] == highs[p]
        assert progress[p]["lag"] == highs[p] - offset
    [lag] = cli_json(tmp_path, "lag", "--group", "billing")
    assert lag["total_lag"] == sum(highs[p] - o for p, o in committed.items())
    for q in lag["queues"]:
        assert q["lag"] == highs[q["queue_id"]] - committed[q["queue_id"]]
        assert q["lag_ms"] is None or q["lag_ms"] >= 0

    # the follower is a consumer of the offsets topic: its positions, its lag 0
    own = cli_json(tmp_path, "progress", "--group", "offset-ledger.follow.mock")
    assert {r["topic"] for r in own} == {cluster.offsets_topic}
    assert sum(r["committed_offset"] for r in own) == 1 + 3 * len(committed)
    assert all(r["lag"] == 0 for r in own)

    again = follow(tmp_path, cluster)  # nothing new: nothing read, nothing recorded
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["records"] == 0
    assert _syncs(tmp_path, "billing") == history


def test_tombstones_expire_an_offset_and_delete_a_group(cluster: Cluster, tmp_path: Path) -> None:
    t0 = int(time.time() * 1000) - 120_000
    cluster.commit("audit", "t.a", 0, 10, t0)
    cluster.commit("audit", "t.a", 1, 20, t0 + 1)
    cluster.commit("audit", "t.b", 0, 30, t0 + 2)
    cluster.offset_tombstone("audit", "t.a", 0)   # retention removed one offset
    cluster.group_tombstone("audit")              # then the group went
    cluster.flush()
    done = follow(tmp_path, cluster)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["offset_tombstones"], summary["group_tombstones"]) == (1, 1)
    events = [(e["kind"], e["topic"], e["queue_id"], e["prev_offset"], e["offset"])
              for e in _syncs(tmp_path, "audit")]
    assert events[:4] == [("sync", "t.a", 0, None, 10), ("sync", "t.a", 1, None, 20),
                          ("sync", "t.b", 0, None, 30), ("expire", "t.a", 0, 10, None)]
    assert sorted(events[4:]) == [("delete", "t.a", 0, None, None),
                                  ("delete", "t.a", 1, 20, None),
                                  ("delete", "t.b", 0, 30, None)]
    assert cli_json(tmp_path, "progress", "--group", "audit") == []


def test_an_undecodable_record_is_skipped_counted_and_logged(cluster: Cluster,
                                                             tmp_path: Path) -> None:
    t0 = int(time.time() * 1000) - 60_000
    cluster.raw(0, b"\x00\x01\x00\x05bro", b"\x00\x03")         # a key cut short
    cluster.raw(0, enc.offset_key("ok", "t", 0), b"\x00\x07xx")  # an unknown value version
    cluster.raw(0, enc.offset_key("ok", "t", 0), enc.offset_value(7, t0 + 3_600_000_000))
    cluster.raw(0, b"\x00\x05\x00\x02ok", b"\x00\x00")          # a KIP-848 record
    cluster.raw(0, enc.offset_key("ok", "t", 0), enc.offset_value(3, t0))
    cluster.flush()
    done = follow(tmp_path, cluster)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["undecodable"], summary["future"], summary["commits"]) == (2, 1, 1)
    assert summary["skipped"] == {"kip848_record": 1}
    assert f"{cluster.offsets_topic}:0 offset 0: undecodable record skipped" in done.stderr
    assert f"{cluster.offsets_topic}:0 offset 1: undecodable record skipped: offset commit " \
           "value version 7 is unknown" in done.stderr
    assert f"{cluster.offsets_topic}:0 offset 2: time" in done.stderr
    assert [(e["kind"], e["offset"]) for e in _syncs(tmp_path, "ok")] == [("sync", 3)]
