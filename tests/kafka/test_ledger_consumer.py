"""`LedgerConsumer` (server/kafka_consumer.py) with real parts: consumers in a real consumer
group of librdkafka's mock cluster, storing their offsets in a real `serve` process. The four
scenarios of issue 25: a consumer killed mid-batch, an operator's reset while the group runs, a
zombie fenced, and tokens; and a reset followed through one fenced commit."""

from __future__ import annotations

import re
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from bench.kafka_mock import MockKafka
from server.client import Forbidden
from server.kafka_consumer import LedgerConsumer
from server.tokens import add_token
from tests.kafka.conftest import KAFKA_SETTINGS, Filled, fill
from tests.server.conftest import Server, commits_refused, wait_for


def _committed(server: Server, group: str) -> dict[int, int | None]:
    with server.client() as c:
        return {r.queue_id: r.committed_offset for r in c.generations(group)}


def _uncommitted(server: Server, group: str, client: str, processed: list[tuple[Any, ...]]
                 ) -> set[tuple[int, int]]:
    """(partition, offset) of the `processed` messages past what the ledger took from `client`
    (its own log may lag behind the ledger)."""
    with server.client() as c:
        committed: dict[int, int] = {}
        for e in c.history(group=group, kind="commit"):
            if e["client_id"] == client:
                committed[e["queue_id"]] = max(committed.get(e["queue_id"], 0), e["offset"])
    return {(p, o) for p, o, _, _ in processed if o >= committed.get(p, 0)}


def _moves(worker: Any, topic: str, since: float) -> list[tuple[int, float]]:
    """(partition, time) of each move to generation 1 the consumer logged after `since`."""
    moves = []
    for line in worker.log.read_text().splitlines():
        m = re.fullmatch(rf"(\d+\.\d+) \S+: {re.escape(topic)}:(\d+) from \d+ \(generation 1\)",
                         line)
        if m and float(m.group(1)) >= since - 0.001:
            moves.append((int(m.group(2)), float(m.group(1))))
    return moves


def _owners(server: Server, group: str) -> dict[int, str | None]:
    with server.client() as c:
        return {r.queue_id: r.last_client for r in c.generations(group)}


def _filled(kafka: MockKafka, server: Server, group: str, topic: str, **kw: int) -> Filled:
    """A topic filled (and its queues in the ledger) for `group`, which starts from earliest."""
    with server.client() as c:
        filled = fill(kafka, c, topic, **kw)
        c.request("PUT", f"/v1/groups/{group}", {"initial": "earliest"})
    return filled


def test_a_consumer_killed_mid_batch_loses_nothing_its_partitions_are_replayed_by_the_other(
        kafka: MockKafka, module_server: Server, workers: Any) -> None:
    group = "kill-g"
    filled = _filled(kafka, module_server, group, "kill-t")
    a = workers("kill-a", group, filled.topic, delay_ms=0.2, commit_every=100)
    a.wait(lambda w: len(w.processed()) >= 200, 60, "consuming")
    b = workers("kill-b", group, filled.topic, delay_ms=0.2, commit_every=100)
    b.wait(lambda w: len(w.processed()) >= 200, 60, "consuming after the rebalance")
    # Killed mid-batch: a is frozen (SIGSTOP) at a count inside a batch and killed only if the
    # ledger then shows messages it processed and did not commit; else it goes on and is
    # frozen again later (under load it can reach its next commit, or an idle one, between
    # the count seen and the signal).
    for _ in range(20):
        a.wait(lambda w: len(w.processed()) % 100 not in (0, 99), 30, "a point mid-batch")
        a.proc.send_signal(signal.SIGSTOP)
        time.sleep(0.2)  # a commit sent before the stop lands
        if _uncommitted(module_server, group, "kill-a", a.processed()):
            break
        a.proc.send_signal(signal.SIGCONT)
    a.kill()  # SIGKILL: no revoke, no last commit
    processed_by_a = a.processed()
    uncommitted = _uncommitted(module_server, group, "kill-a", processed_by_a)
    assert uncommitted, "killed right after a commit: not mid-batch"

    wait_for(lambda: _committed(module_server, group) == {p: 2500 for p in range(8)}, 90,
             "the survivor to commit every partition to its end")
    b.stop()
    seen_b = {(p, o) for p, o, _, _ in b.processed()}
    seen = seen_b | {(p, o) for p, o, _, _ in processed_by_a}
    assert seen == filled.messages  # every message processed at least once, none skipped
    assert uncommitted <= seen_b  # what the killed one did not commit was delivered again
    assert set(_owners(module_server, group).values()) == {"kill-b"}
    with module_server.client() as c:
        assert c.lag(group)["total_lag"] == 0
        rows = c.progress(group)
    assert {(r["committed_offset"], r["lag"], r["last_client"]) for r in rows} == {
        (2500, 0, "kill-b")}


def test_an_operators_reset_to_a_time_is_followed_by_the_running_group_within_2_s(
        kafka: MockKafka, module_server: Server, workers: Any) -> None:
    group = "reset-g"
    filled = _filled(kafka, module_server, group, "reset-t")
    a = workers("reset-a", group, filled.topic, delay_ms=0.3)
    b = workers("reset-b", group, filled.topic, delay_ms=0.3)

    def past_1200() -> bool:  # one answer judged whole: two asks could see an empty group
        committed = _committed(module_server, group)  # and then its 8 queues at offset 0
        return len(committed) == 8 and all((v or 0) >= 1200 for v in committed.values())

    wait_for(past_1200, 90, "the group past offset 1200")
    assignments = {w.name: [x for x in w.lines() if x.startswith("a ")] for w in (a, b)}
    reset_to = filled.store_time(10)  # chunk 10: offsets 1000..1099 of every partition
    sent = time.time()
    with module_server.client() as c:
        plan = c.reset(group, topic=filled.topic, to_datetime=reset_to, execute=True,
                       reason="replay INC-25")
    answered = time.time()
    assert plan.executed and {r["to_offset"] for r in plan.plan} == {1000}
    assert len(plan.plan) == 8 and all(r["from_offset"] >= 1200 for r in plan.plan)

    wait_for(lambda: _committed(module_server, group) == {p: 2500 for p in range(8)}, 90,
             "the group to finish its replay")
    for w in (a, b):  # the group never stopped: same processes, no rebalance
        assert w.proc.poll() is None
        assert [x for x in w.lines() if x.startswith("a ")] == assignments[w.name]
    after: dict[int, list[tuple[int, int, float]]] = defaultdict(list)
    for w in (a, b):
        for p, o, ts, at in w.processed():
            if at >= sent:
                after[p].append((o, ts, at))
    assert sorted(after) == list(range(8))
    # within 2 s every partition is sought back to the reset offset (the consumer logs each
    # move: "reset-t:P from 1000 (generation 1)") and both consumers replay from there
    moved = {p: at for w in (a, b) for p, at in _moves(w, filled.topic, sent)}
    assert sorted(moved) == list(range(8)), moved
    for p, at in moved.items():
        assert at - answered < 2.0, f"partition {p} sought {at - answered:.2f} s after"
    for w in (a, b):
        replayed = min(at for p, o, _, at in w.processed() if at >= sent and o == 1000)
        assert replayed - answered < 2.0, f"{w.name} replayed {replayed - answered:.2f} s after"
    for p, seq in after.items():
        seq.sort(key=lambda x: x[2])
        first = next(i for i, (o, _, _) in enumerate(seq) if o == 1000)
        offset, ts, at = seq[first]
        # (when each partition's first message comes is librdkafka's order of its fetched
        # batches: under load one broker's partitions can run ahead of another's)
        assert ts == reset_to  # the first message stored at or after the reset's time
        # from exactly the reset offset, every message again, in order, to the end
        assert [o for o, _, _ in seq[first:]] == list(range(1000, 2500)), p
    for w in (a, b):
        w.stop()
    with module_server.client() as c:
        assert {(r.generation, r.pending) for r in c.generations(group)} == {(1, False)}
        resets = c.history(group=group, kind="reset")
    assert len(resets) == 8 and all("replay INC-25" in e["detail"] for e in resets)


def test_one_fenced_commit_brings_every_partition_the_reset_moved_back_without_the_check(
        kafka: MockKafka, module_server: Server) -> None:
    # A consumer at the end of its 8 partitions, with the periodic generation check out of the
    # way (an hour). After a reset of all 8, a new message on one partition is processed and
    # its commit fenced: that one answer must bring all 8 back to the reset offset, the 7 idle
    # ones included (they have nothing to commit, so nothing else would tell them).
    from confluent_kafka import Producer

    group = "follow-g"
    filled = _filled(kafka, module_server, group, "follow-t", per_partition=200, chunk=100)
    config = {"bootstrap.servers": kafka.bootstrap, "group.id": group, "client.id": "follow-a",
              **KAFKA_SETTINGS}

    def consume(consumer: LedgerConsumer, until: Any, what: str) -> list[tuple[int, int]]:
        seen: list[tuple[int, int]] = []  # in the order delivered
        deadline = time.monotonic() + 30
        while not until(seen):
            assert time.monotonic() < deadline, f"{what}: {len(seen)} messages"
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen.append((msg.partition(), msg.offset()))
                consumer.commit(msg)
        return seen

    with LedgerConsumer(config, module_server.url, reset_check_interval=3600) as consumer:
        consumer.subscribe([filled.topic])
        first = consume(consumer, lambda s: set(s) == filled.messages, "the topic")
        assert sorted(first) == sorted(filled.messages)
        assert _committed(module_server, group) == {p: 200 for p in range(8)}
        with module_server.client() as c:
            plan = c.reset(group, topic=filled.topic, to_datetime=filled.store_time(1),
                           execute=True, reason="replay")
            assert {r["to_offset"] for r in plan.plan} == {100}
            producer = Producer({"bootstrap.servers": kafka.bootstrap})
            producer.produce(filled.topic, value=b"late", partition=0)
            assert producer.flush(30) == 0
            c.commands([{"op": "queue_append", "topic": filled.topic, "queue_id": 0,
                         "count": 1}])
        # the new message (its commit fenced), then every partition from 100 again, 0 to 201
        replay = {(p, o) for p in range(8) for o in range(100, 200)} | {(0, 200)}
        seen = consume(consumer, lambda s: replay <= set(s) and s.count((0, 200)) == 2,
                       "the replay of every partition")
        assert seen[0] == (0, 200) and sorted(seen[1:]) == sorted(replay)
    assert _committed(module_server, group) == {0: 201, **{p: 200 for p in range(1, 8)}}


def test_a_consumer_paused_past_its_session_timeout_comes_back_a_zombie_and_is_fenced(
        kafka: MockKafka, module_server: Server, workers: Any) -> None:
    group = "zombie-g"
    filled = _filled(kafka, module_server, group, "zombie-t", per_partition=1000)
    fenced_before = commits_refused(module_server, group, "fenced")
    # a stops itself (SIGSTOP) after its 450th message: 50 processed since its last commit
    a = workers("zombie-a", group, filled.topic, delay_ms=2, commit_every=100, pause_after=450)
    a.wait(lambda w: any(x.startswith("a ") for x in w.lines()), 60, "an assignment")
    b = workers("zombie-b", group, filled.topic, delay_ms=2, commit_every=100)
    a.wait(lambda w: "stopped" in w.lines(), 60, "the pause")
    paused = time.time()
    wait_for(lambda: set(_owners(module_server, group).values()) == {"zombie-b"}, 60,
             "the other member to own every partition (a's session expired)")
    a.proc.send_signal(signal.SIGCONT)
    [late] = a.wait(lambda w: w.commits("z"), 30, "the commit after the pause")
    assert late and all((r["accepted"], r["reason"]) == (False, "fenced") for r in late), late
    wait_for(lambda: _committed(module_server, group) == {p: 1000 for p in range(8)}, 90,
             "the group to finish")
    a.stop()
    b.stop()
    # the ledger counted them
    assert commits_refused(module_server, group, "fenced") - fenced_before >= len(late)
    with module_server.client() as c:
        events = c.history(group=group)
    # no commit of a was taken from its pause until a pulled the partition again itself
    owner: dict[int, str] = {}
    for e in events:
        if e["ts_ms"] / 1000 < paused - 1:
            continue
        if e["kind"] == "pull":
            owner[e["queue_id"]] = e["client_id"]
        elif e["kind"] == "commit" and e["client_id"] == "zombie-a":
            assert owner.get(e["queue_id"], "zombie-a") == "zombie-a", e
    seen = {(p, o) for w in (a, b) for p, o, _, _ in w.processed()}
    assert seen == filled.messages


def test_a_consumer_token_for_its_group_works_and_another_groups_token_is_refused_403(
        kafka: MockKafka, tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.toml"
    tokens = {name: add_token(tokens_file, name, roles, groups) for name, roles, groups
              in (("orders-worker", ["consume"], ["orders-*"]), ("ads-worker", ["consume"], ["ads"]),
                  ("producer", ["produce"], []), ("ops", ["operate"], []))}
    server = Server(tmp_path / "data", "--tokens", str(tokens_file))
    try:
        with server.client(tokens["producer"]) as c:
            filled = fill(kafka, c, "tokens-t", per_partition=50, chunk=50)
        with server.client(tokens["ops"]) as c:
            c.request("PUT", "/v1/groups/orders-kafka", {"initial": "earliest"})
        config = {"bootstrap.servers": kafka.bootstrap, "group.id": "orders-kafka",
                  **KAFKA_SETTINGS}
        seen = set()
        with LedgerConsumer({**config, "client.id": "orders-1"}, server.url,
                            token=tokens["orders-worker"], kafka_commit=True) as consumer:
            consumer.subscribe([filled.topic])
            deadline = time.monotonic() + 60
            while len(seen) < 400 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    seen.add((msg.partition(), msg.offset()))
            done = consumer.commit()
            assert done and all(r.accepted for r in done), done
            # kafka_commit: Kafka's own store got the same offsets (for Kafka's tools)
            partitions = [TopicPartition(filled.topic, p) for p in range(8)]
            wait_for(lambda: [p.offset for p in consumer.kafka.committed(partitions, 10)]
                     == [50] * 8, 30, "the copy of the offsets in Kafka")
        assert seen == filled.messages
        with server.client(tokens["orders-worker"]) as c:
            rows = c.progress("orders-kafka")
        assert {(r["committed_offset"], r["last_client"]) for r in rows} == {(50, "orders-1")}

        with LedgerConsumer({**config, "client.id": "intruder"}, server.url,
                            token=tokens["ads-worker"]) as intruder:
            intruder.subscribe([filled.topic])
            with pytest.raises(Forbidden) as refused:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    intruder.poll(0.5)  # the assignment's pull is refused: raised here
            assert refused.value.status == 403 and "ads-worker" in refused.value.message
            # its partitions stay unpositioned: asked again at each check, refused again, and
            # none of their messages is delivered
            delivered, refusals, until = [], 0, time.monotonic() + 2.5
            while time.monotonic() < until:
                try:
                    msg = intruder.poll(0.2)
                except Forbidden:
                    refusals += 1
                    continue
                if msg is not None:
                    delivered.append(msg)
            assert (delivered, refusals >= 2) == ([], True)
    finally:
        server.kill()
