"""What a Kafka consumer on the ledger needs of the rules: a pull of `max` 0 (where to start,
taking nothing), commits `owner_only` (fenced unless the client pulled the queue last: zombies),
and `generations` (the cheap periodic question), through the public API, per command and
column-wise alike."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ledger import InvalidInput, Ledger, Pull, Scenario, Scope
from ledger.executor.batch import COLUMN_MIN

G, T = "billing", "orders"


def test_a_pull_of_max_zero_takes_nothing_so_the_same_client_restarts_from_the_committed_offset(
        ledger: Ledger) -> None:
    ledger.queue_append(T, 0, 100)
    ledger.group_set(G, initial="earliest")
    first = ledger.pull(G, T, 0, client="k1", max_count=0)
    assert (first.next_offset, first.generation, first.count) == (0, 0, 0)
    assert ledger.commit(G, T, 0, 40, client="k1").accepted
    # a pull of 32 would let k1 continue from 32 past its commit; a pull of 0 leaves nothing
    # in flight, so k1 (a consumer re-assigned its partition) starts at what it committed
    assert ledger.pull(G, T, 0, client="k1", max_count=0).next_offset == 40
    row = ledger.progress(G)[0]
    assert (row["pulled_offset"], row["inflight"], row["last_client"]) == (40, 0, "k1")


def test_a_pull_of_max_zero_applies_a_pending_reset_and_names_the_new_generation(
        ledger: Ledger) -> None:
    ledger.queue_append(T, 0, 100)
    ledger.group_set(G, initial="earliest")
    ledger.pull(G, T, 0, client="k1", max_count=0)
    ledger.commit(G, T, 0, 80, client="k1")
    ledger.reset(G, Scenario("to_offset", 25), scope=Scope(topics=((T, None),))).execute()
    r = ledger.pull(G, T, 0, client="k1", max_count=0)
    assert (r.next_offset, r.generation, r.count) == (25, 1, 0)
    assert ledger.generations(G)[0].pending is False


def test_an_owner_only_commit_is_fenced_once_another_client_pulled_the_queue(
        ledger: Ledger) -> None:
    ledger.queue_append(T, 0, 100)
    ledger.group_set(G, initial="earliest")
    ledger.pull(G, T, 0, client="zombie", max_count=0)
    assert ledger.commit(G, T, 0, 10, client="zombie", generation=0, owner_only=True).accepted
    ledger.pull(G, T, 0, client="heir", max_count=0)  # a rebalance moved the partition
    late = ledger.commit(G, T, 0, 30, client="zombie", generation=0, owner_only=True)
    assert (late.accepted, late.reason, late.offset) == (False, "fenced", 10)
    assert ledger.commit(G, T, 0, 20, client="heir", generation=0, owner_only=True).accepted
    # without owner_only the same late commit would have gone through (generation 0 holds)
    assert ledger.commit(G, T, 0, 30, client="zombie", generation=0).accepted
    assert [e["client_id"] for e in ledger.history(group=G, kind="commit").to_pylist()] == [
        "zombie", "heir", "zombie"]


def test_an_owner_only_commit_needs_a_client_and_a_pull(ledger: Ledger) -> None:
    ledger.queue_append(T, 0, 100)
    with pytest.raises(InvalidInput, match="owner_only needs a client"):
        ledger.commit(G, T, 0, 5, owner_only=True)
    never_pulled = ledger.commit(G, T, 0, 5, client="k1", owner_only=True)
    assert (never_pulled.accepted, never_pulled.reason) == (False, "fenced")
    assert ledger.log.next_seq == 1  # the append only: refusals append nothing


def test_owner_only_commits_fold_column_wise_exactly_as_per_command(tmp_path, clock) -> None:
    """A batch large enough for the column-wise fold: the queues with owner_only commits are
    decided per command (who pulled last), the others column-wise, with the answers of the
    one-by-one path."""
    setup: list[dict] = [{"op": "queue_append", "topic": T, "queue_id": q, "count": 10_000}
                         for q in range(4)]
    setup += [{"op": "group_set", "group": G, "initial": "earliest"}]
    setup += [{"op": "pull", "group": G, "topic": T, "queue_id": q, "client": f"k{q % 2}",
               "max": 0} for q in range(4)]
    lines: list[dict] = []
    for i in range(COLUMN_MIN):
        q = i % 4  # queues 0 and 1: owner_only, from their owner and from the other client
        lines.append({"op": "commit", "group": G, "topic": T, "queue_id": q, "offset": i + 1,
                      "client": f"k{(i // 4) % 2}", **({"owner_only": True} if q < 2 else {})})
    schema = pa.schema([("op", pa.string()), ("group", pa.string()), ("topic", pa.string()),
                        ("queue_id", pa.int64()), ("count", pa.int64()), ("initial", pa.string()),
                        ("client", pa.string()), ("max", pa.int64()), ("offset", pa.int64()),
                        ("owner_only", pa.bool_())])
    with Ledger.open(tmp_path / "columns", clock=clock) as led:
        list(led.apply(setup))
        columns = list(led.apply(pa.Table.from_pylist(lines, schema=schema)))
        committed = [led.committed(G, T, q) for q in range(4)]
    with Ledger.open(tmp_path / "lines", clock=clock) as led:
        list(led.apply(setup))
        one_by_one = [r for line in lines for r in led.apply([line])]
        assert [led.committed(G, T, q) for q in range(4)] == committed
    keep = ("accepted", "reason", "offset", "next_offset", "error")
    assert [{k: r.get(k) for k in keep} for r in columns] == [
        {k: r.get(k) for k in keep} for r in one_by_one]
    fenced = {line["queue_id"] for r, line in zip(columns, lines, strict=True)
              if r.get("reason") == "fenced"}
    assert fenced == {0, 1}  # the other client's commits there; none on queues 2 and 3
    # the last commit of queue 0 from k0 is line 2040 (offset 2041), of queue 1 from k1 2045
    assert committed == [COLUMN_MIN - 7, COLUMN_MIN - 2, COLUMN_MIN - 1, COLUMN_MIN]


def test_generations_answer_from_memory_in_the_order_asked(ledger: Ledger) -> None:
    ledger.queue_append(T, 0, 100)
    ledger.queue_append(T, 1, 100)
    ledger.group_set(G, initial="earliest")
    ledger.submit([Pull(group=G, topic=T, queue_id=q, client="k1", max=0) for q in (0, 1)])
    ledger.commit(G, T, 1, 60, client="k1")
    ledger.reset(G, Scenario("to_offset", 5), scope=Scope(topics=((T, (1,)),))).execute()
    rows = ledger.generations(G, [(T, 1), (T, 0), ("other", 3)])
    assert [(r.topic, r.queue_id, r.generation, r.pending, r.committed_offset, r.last_client)
            for r in rows] == [(T, 1, 1, True, 5, "k1"), (T, 0, 0, False, 0, "k1"),
                               ("other", 3, 0, False, None, None)]
    assert [r.queue_id for r in ledger.generations(G)] == [0, 1]
    assert [r.queue_id for r in ledger.generations(G, topic=f"{T}:1")] == [1]
    with pytest.raises(InvalidInput, match="invalid topic 'a b'"):
        ledger.generations(G, [("a b", 0)])
    with pytest.raises(InvalidInput, match="invalid queue id -1"):
        ledger.generations(G, [(T, -1)])
