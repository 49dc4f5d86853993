"""Many clients at once against a real serve process: 16 committing threads and 4 pulling ones,
each over its own keep-alive connection, thousands of commits with known increasing offsets on
a few keys (two threads per key, so some commits lose the race and are refused as stale).
After the server stops, the log is read back: every acknowledged commit is in it exactly once,
at the seq its answer named, with its offset; nothing else is; and group commit happened (the
batch-size histogram has batches of more than one command)."""

from __future__ import annotations

import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from ledger import Ledger
from tests.server.conftest import Server

GROUPS, TOPIC, QUEUES = ("pay", "ship"), "orders", 4
COMMITTERS_PER_KEY = 2  # 8 keys: 16 committing threads
COMMITS_PER_THREAD = 250
PULLERS = 4
PULLS_PER_THREAD = 150
READERS = 2
MESSAGES = 10 * COMMITTERS_PER_KEY * COMMITS_PER_THREAD


def _committer(server: Server, key: tuple[str, int], lane: int, acks: list[Any],
               errors: list[BaseException]) -> None:
    """Commits offsets lane+1, lane+1+lanes, ... (increasing) on `key`; records each answer."""
    group, queue = key
    try:
        with server.client(connections=1) as c:
            for i in range(COMMITS_PER_THREAD):
                offset = 1 + lane + i * COMMITTERS_PER_KEY
                acks.append((key, offset, c.commit(group, TOPIC, queue, offset)))
    except BaseException as e:  # reported by the test, with the others'
        errors.append(e)


def _puller(server: Server, n: int, pulls: list[Any], errors: list[BaseException]) -> None:
    try:
        with server.client(connections=1) as c:
            for i in range(PULLS_PER_THREAD):
                group, queue = GROUPS[i % len(GROUPS)], (n + i) % QUEUES
                pulls.append(((group, queue), c.pull(group, TOPIC, queue, client=f"p{n}",
                                                    max=8)))
    except BaseException as e:
        errors.append(e)


def _reader(server: Server, stop: threading.Event, seen: list[Any],
            errors: list[BaseException]) -> None:
    """Reads while the others write: progress of each group, lag, history, metrics; records
    each committed offset seen, in order."""
    try:
        with server.client(connections=1) as c:
            while not stop.is_set():
                for g in GROUPS:
                    for row in c.progress(g, TOPIC):
                        seen.append(((g, row["queue_id"]), row["committed_offset"]))
                    assert c.lag(g)["consumer_group"] == g
                assert isinstance(c.history(kind="commit", limit=5), list)
                assert b"offset_ledger_lag_messages" in c.request("GET", "/metrics")
    except BaseException as e:
        errors.append(e)


def test_many_clients_every_acknowledged_commit_is_in_the_log_exactly_once(
        tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    try:
        with server.client() as c:
            for q in range(QUEUES):
                c.request("POST", "/v1/queues/append", {"topic": TOPIC, "queue": q,
                                                        "count": MESSAGES})
            for g in GROUPS:
                c.request("PUT", f"/v1/groups/{g}", {"initial": "earliest"})
        keys = [(g, q) for g in GROUPS for q in range(QUEUES)]
        acks: list[Any] = []
        pulls: list[Any] = []
        errors: list[BaseException] = []
        threads = [threading.Thread(target=_committer, args=(server, key, lane, acks, errors))
                   for key in keys for lane in range(COMMITTERS_PER_KEY)]
        threads += [threading.Thread(target=_puller, args=(server, n, pulls, errors))
                    for n in range(PULLERS)]
        assert len(threads) >= 16 + PULLERS
        stop, seen = threading.Event(), [[] for _ in range(READERS)]
        readers = [threading.Thread(target=_reader, args=(server, stop, mine, errors))
                   for mine in seen]
        for t in threads + readers:
            t.start()
        for t in threads:
            t.join(300)
        stop.set()
        for t in readers:
            t.join(300)
        assert not any(t.is_alive() for t in threads + readers), "clients still running"
        assert not errors, errors[:3]
        with server.client() as c:
            metrics = c.request("GET", "/metrics").decode()
        assert server.stop() == 0
    finally:
        server.kill()

    assert len(acks) == len(keys) * COMMITTERS_PER_KEY * COMMITS_PER_THREAD
    accepted = [(key, offset, r) for key, offset, r in acks if r.accepted]
    refused = [(key, offset, r) for key, offset, r in acks if not r.accepted]
    assert {r.reason for _, _, r in refused} <= {"stale"}, refused[:3]
    assert len(accepted) > len(acks) // 2  # the lanes interleave: most commits win

    with Ledger.open(tmp_path / "data", readonly=True) as led:
        log = led.log.read().to_pylist()
    assert [e["seq"] for e in log] == list(range(len(log)))
    commits = [e for e in log if e["kind"] == "commit"]
    # exactly the acknowledged commits, each once, at the seq its answer named
    logged = Counter(((e["consumer_group"], e["queue_id"]), e["offset"]) for e in commits)
    assert logged == Counter((key, offset) for key, offset, _ in accepted)
    for key, offset, r in accepted:
        e = log[r.seq]
        assert (e["kind"], e["consumer_group"], e["topic"], e["queue_id"], e["offset"]) == \
            ("commit", key[0], TOPIC, key[1], offset), (r, e)
    # a refusal appends nothing; the last committed offset of a key is its highest accepted
    for key in keys:
        mine = [o for k, o, _ in accepted if k == key]
        last = [e["offset"] for e in commits if (e["consumer_group"], e["queue_id"]) == key][-1]
        assert last == max(mine)
    # each pull that moved is its logged pull event
    moved = [(key, p) for key, p in pulls if p.seq is not None]
    assert len(pulls) == PULLERS * PULLS_PER_THREAD and moved
    for key, p in moved:
        e = log[p.seq]
        assert (e["kind"], e["consumer_group"], e["queue_id"], e["offset"]) == \
            ("pull", key[0], key[1], p.next_offset + p.count), (p, e)
    assert {e["kind"] for e in log} <= {"queue_append", "group_config", "initial", "pull",
                                        "commit"}
    assert sum(e["kind"] == "pull" for e in log) == len(moved)

    # each reader saw only accepted offsets (never a refused one), never going backwards
    sent = {(key, offset) for key, offset, _ in accepted}
    for mine in seen:
        assert mine
        last_seen: dict[tuple[str, int], int] = {}
        for key, offset in mine:
            if offset is not None:
                assert (key, offset) in sent and offset >= last_seen.get(key, 0), (key, offset)
                last_seen[key] = offset
    batches, single = _batch_histogram(metrics)
    assert batches > 0 and single < batches, (batches, single)  # some batch held 2+ commands
    assert batches < len(acks) + len(pulls)  # fewer fsyncs than requests


def _batch_histogram(metrics: str) -> tuple[int, int]:
    """(batches, batches of one command) from offset_ledger_batch_commands."""
    count = re.search(r"^offset_ledger_batch_commands_count (\S+)$", metrics, re.M)
    one = re.search(r'^offset_ledger_batch_commands_bucket\{le="1\.0"\} (\S+)$', metrics, re.M)
    assert count and one, metrics[:2000]
    return int(float(count.group(1))), int(float(one.group(1)))
