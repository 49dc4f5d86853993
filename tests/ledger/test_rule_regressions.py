"""Rule bugs the reference model found (tests/support/reference.py), one test each, through the
public API: the same apply lines through the per-command path (dicts) and the column-wise one
(an Arrow table) answer the same, and the state each leaves is the state a fold of its log, a
checkpoint of it and a reopen give back (a refused command changes nothing, not even in
memory)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from ledger import Ledger, Scenario, Scope
from ledger.fold.state import State
from ledger.store.checkpoint import state_to_table, table_to_state
from tests.support.clock import T0, FakeClock
from tests.support.strategies import LINE_SCHEMA

T, G = "orders", "billing"


def _canonical(state: State) -> list[tuple]:
    """A state as the sorted rows of its checkpoint (client generations as sorted pairs)."""
    out = []
    for r in state_to_table(state).to_pylist():
        if r["row"] in ("position", "client") and r["detail"]:
            r["detail"] = sorted(json.loads(r["detail"]).items())
        out.append(tuple(sorted(r.items(), key=lambda kv: kv[0])))
    return sorted(out, key=repr)


def _assert_state_is_durable(led: Ledger, root: Path) -> list[tuple]:
    """The live state equals a fold of the log and a checkpoint's round trip, and a reopen
    (closing writes a checkpoint) gives it back; returns it."""
    live = _canonical(led.state)
    refold = State()
    refold.apply_columns(led.log.read().to_pydict())
    assert _canonical(refold) == live, "the state differs from a fold of its log"
    assert _canonical(table_to_state(state_to_table(led.state))) == live, "checkpoint"
    view = {t: sorted(led.sql(f"SELECT * FROM {t}").to_pylist(), key=repr)
            for t in ("offsets", "client_offsets", "queues", "groups")}
    led.close()
    with Ledger.open(root, backfill=True, clock=FakeClock(T0)) as again:
        assert _canonical(again.state) == live, "the state differs after a reopen"
        assert {t: sorted(again.sql(f"SELECT * FROM {t}").to_pylist(), key=repr)
                for t in view} == view, "the view differs after a reopen"
    return live


def _run(tmp_path: Path, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`lines` (each with its ts) through the per-command path and the column-wise one: the
    same results, events and state on both, each durable as it is; the results."""
    stamped = [{**line, "ts": T0 + 1_000 * i} for i, line in enumerate(lines)]
    outcomes = []
    for name, given in (("dicts", stamped),
                        ("table", pa.Table.from_pylist(stamped, schema=LINE_SCHEMA))):
        root = tmp_path / name
        led = Ledger.open(root, backfill=True, clock=FakeClock(T0))
        try:
            results = list(led.apply(given))
            events = led.log.read().drop_columns(["detail"]).to_pylist()
            state = _assert_state_is_durable(led, root)
        finally:
            led.close()
        outcomes.append((results, events, state))
    assert outcomes[0] == outcomes[1], "the per-command and column-wise paths differ"
    return outcomes[0][0]


def _queue(count: int, queue_id: int = 0) -> dict[str, Any]:
    return {"op": "queue_append", "topic": T, "queue_id": queue_id, "count": count}


def _pull(client: str, queue_id: int = 0) -> dict[str, Any]:
    return {"op": "pull", "group": G, "topic": T, "queue_id": queue_id, "client": client}


def _commit(offset: int, client: str | None = None, **more: Any) -> dict[str, Any]:
    line = {"op": "commit", "group": G, "topic": T, "queue_id": 0, "offset": offset, **more}
    return line if client is None else {**line, "client": client}


def _reset_to(offset: int) -> dict[str, Any]:
    return {"op": "reset", "group": G, "topic": T, "queue_id": 0, "to_offset": offset,
            "execute": True}


# ---------------------------------------------------------------- A: broadcast first pull
def test_a_broadcast_client_pulling_first_after_a_truncation_starts_at_min_offset(tmp_path):
    """Rule 3 (a pull below MinOffset is clamped up to it) holds for a broadcast client's
    first pull too, which starts from the group's offset (rule 5): not below MinOffset."""
    r = _run(tmp_path, [
        _queue(100),
        {"op": "group_set", "group": G, "mode": "broadcast", "initial": "earliest"},
        _pull("a"), _commit(10, "a"),
        {"op": "queue_truncate", "topic": T, "queue_id": 0, "min_offset": 50},
        _pull("b"),
    ])
    assert (r[-1]["next_offset"], r[-1]["count"]) == (50, 32)


# ---------------------------------------------------------------- B: delete and recreate
def test_a_client_from_before_a_group_delete_stays_fenced_after_the_group_is_recreated(tmp_path):
    """Rule 3: a commit naming no generation takes that of its client's last pull, so a
    client from before the delete (generation 0) is fenced once a new client's pull has
    cleared the delete's marker (generation 1): generations never go back."""
    r = _run(tmp_path, [
        _queue(300), {"op": "group_set", "group": G, "initial": "earliest"},
        _pull("c1"), _commit(100, "c1"),
        {"op": "group_delete", "group": G},
        _pull("c2"),  # the recreated group: initial at MaxOffset (latest), generation 1
        _commit(300, "c1"),
    ])
    assert r[-2]["generation"] == 1
    assert (r[-1]["accepted"], r[-1]["reason"]) == (False, "fenced")


# ---------------------------------------------------------------- C: formerly broadcast
def test_a_reset_of_a_group_that_was_broadcast_is_one_group_reset_with_the_next_generation(
        tmp_path):
    """Rule 5 resets every client's offset of a broadcast group only: a clustering group
    that kept client offsets from its broadcast days gets one reset of its own offset, and
    its generation only goes up (1, then 2), never back to a client's."""
    r = _run(tmp_path, [
        _queue(200),
        {"op": "group_set", "group": G, "mode": "broadcast", "initial": "earliest"},
        _pull("a"), _commit(50, "a"),
        {"op": "group_set", "group": G, "mode": "clustering"},
        _pull("c"), _commit(20, "c"),
        _reset_to(10), _pull("c"),
        _reset_to(5), _pull("c"),
        _commit(6, generation=1),
    ])
    assert [x["seq"] - y["seq"] for x, y in ((r[7], r[6]), (r[9], r[8]))] == [1, 1]
    assert (r[8]["generation"], r[10]["generation"]) == (1, 2)
    assert (r[10]["next_offset"], r[-1]["reason"]) == (5, "fenced")


# ---------------------------------------------------------------- D: refusals change nothing
def test_a_refused_commit_of_a_new_broadcast_client_changes_nothing(tmp_path):
    """Rule 2: a refusal appends nothing, so it changes no state either (no empty position
    of the refused client, which a later reset would write an event for)."""
    root = tmp_path / "data"
    with Ledger.open(root, backfill=True, clock=FakeClock(T0)) as led:
        led.queue_append(T, 0, 100)
        led.group_set(G, mode="broadcast", initial="earliest")
        led.pull(G, T, 0, client="a")
        led.commit(G, T, 0, 10, client="a")
        before = _canonical(led.state)
        refused = led.commit(G, T, 0, 500, client="b")
        assert (refused.accepted, refused.reason) == (False, "invalid")
        assert _canonical(led.state) == before
    r = _run(tmp_path, [
        _queue(100),
        {"op": "group_set", "group": G, "mode": "broadcast", "initial": "earliest"},
        _pull("a"), _commit(10, "a"), _commit(500, "b"), _reset_to(5),
    ])
    assert r[4]["reason"] == "invalid"
    assert r[5]["seq"] - r[3]["seq"] == 2  # the group's reset and client a's, none for b


# ---------------------------------------------------------------- F: broadcast pending marker
def test_a_pull_clears_a_broadcast_groups_own_pending_reset_so_an_operator_may_commit(tmp_path):
    """Rule 4: the next pull from any client clears the reset's pending marker; on a
    broadcast group that is the group's own marker too, so an operator's commit is fenced
    only until then, not forever."""
    r = _run(tmp_path, [
        _queue(100),
        {"op": "group_set", "group": G, "mode": "broadcast", "initial": "earliest"},
        _pull("a"), _commit(50, "a"), _reset_to(10),
        _commit(20),  # pending: fenced
        _pull("a"), _commit(20),  # picked up: accepted
    ])
    assert r[5]["reason"] == "fenced"
    assert r[6]["next_offset"] == 10
    assert r[7]["accepted"] is True


# ---------------------------------------------------------------- ts null: one rule
def test_a_null_ts_is_the_clock_on_every_path(tmp_path):
    """`"ts": null` is a line without ts (ledger time = the clock), whether the line comes as
    a dict, an NDJSON line or a row of a command table (where null is an absent field)."""
    line = {"op": "queue_append", "topic": T, "queue_id": 0, "count": 3, "ts": None}
    clock = FakeClock(T0 + 5_000)
    for i, given in enumerate((
            [line], pa.Table.from_pylist([line], schema=LINE_SCHEMA),
            json.dumps(line).encode() + b"\n")):
        with Ledger.open(tmp_path / str(i), backfill=True, clock=clock) as led:
            if isinstance(given, bytes):
                ((text, _, _),) = led.apply_ndjson(io.BytesIO(given))
                results = [json.loads(text)]
            else:
                results = list(led.apply(given))
            assert "error" not in results[0], results
            assert led.log.read().column("ts").to_pylist() == [T0 + 5_000]


# ---------------------------------------------------------------- a reviewed plan runs as planned
def test_a_reviewed_backward_only_plan_executes_the_targets_it_shows(tmp_path):
    """CLI contract: with backward-only, a queue the reset would move forward stays in the
    plan with to_offset = from_offset. Planned, then executed (`ResetPlan.execute`), it does
    what the same reset planned and executed in one call does: it leaves a committed offset
    below MinOffset where it is (the next pull clamps it), not clamped forward."""
    lines = [_queue(3), {"op": "queue_truncate", "topic": T, "queue_id": 0, "min_offset": 1},
             _commit(0)]
    r = _run(tmp_path / "one-call", [*lines, {**_reset_to(0), "backward_only": True}])
    assert r[-1]["plan"][0]["to_offset"] == 0 and r[-1]["executed"] is True
    root = tmp_path / "reviewed"
    with Ledger.open(root, backfill=True, clock=FakeClock(T0)) as led:
        list(led.apply(lines))
        plan = led.reset(G, Scenario("to_offset", 0), scope=Scope(topics=((T, (0,)),)),
                         backward_only=True)
        assert [(i.from_offset, i.to_offset) for i in plan.items] == [(0, 0)]
        plan.execute()
        assert led.committed(G, T, 0) == 0
        assert led.pull(G, T, 0, client="c1").next_offset == 1  # clamped by the pull
        _assert_state_is_durable(led, root)
