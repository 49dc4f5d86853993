"""One contract, every entrance: the same commands through `Ledger.submit`, the typed methods,
NDJSON `apply`, the Arrow apply (column-wise) and per-command batches write the same events and
give the same results. And a reviewed reset plan executes as it is or not at all."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pytest

import ledger.executor.batch as executor
from ledger import (
    Commit,
    GroupDelete,
    GroupSet,
    Ledger,
    PlanRow,
    Pull,
    QueueAppend,
    QueueBounds,
    QueueTruncate,
    RefusedError,
    Reset,
    Scenario,
    Scope,
    Sync,
)
from tests.support.clock import T0, FakeClock

T, G = "orders", "billing"

#: Every op, the refusals and an error; each line carries its ledger time.
SCENARIO: list[dict[str, Any]] = [
    {"op": "queue_append", "topic": T, "queue_id": 0, "count": 100, "store_time": T0 - 5000},
    {"op": "queue_append", "topic": T, "queue_id": 1, "count": 50},
    {"op": "group_set", "group": G, "initial": "earliest", "client_timeout": "PT1M"},
    {"op": "pull", "group": G, "topic": T, "queue_id": 0, "client": "c1", "max": 10},
    {"op": "commit", "group": G, "topic": T, "queue_id": 0, "client": "c1", "offset": 10},
    {"op": "commit", "group": G, "topic": T, "queue_id": 0, "client": "c1", "offset": 5},
    {"op": "commit", "group": G, "topic": T, "queue_id": 0, "client": "c1", "offset": 500},
    {"op": "pull", "group": G, "topic": T, "queue_id": 1, "client": "c2"},
    {"op": "commit", "group": G, "topic": T, "queue_id": 1, "offset": 20},
    {"op": "queue_truncate", "topic": T, "queue_id": 0, "min_offset": 3},
    {"op": "queue_bounds", "topic": T, "queue_id": 2, "max_offset": 70, "source": "mirror"},
    {"op": "sync", "group": "mirror-g", "topic": T, "queue_id": 2, "offset": 33,
     "source": "mirror"},
    {"op": "reset", "group": G, "topic": T, "queue_id": 0, "to_offset": 0, "execute": True,
     "actor": "ops", "reason": "replay"},
    {"op": "commit", "group": G, "topic": T, "queue_id": 0, "client": "c1", "offset": 12,
     "generation": 0},
    {"op": "pull", "group": G, "topic": T, "queue_id": 0, "client": "c1", "max": 4},
    {"op": "commit", "group": G, "topic": T, "queue_id": 0, "client": "c1", "offset": 4},
    {"op": "commit", "group": "bad name", "topic": T, "queue_id": 0, "offset": 1},
    {"op": "group_delete", "group": "mirror-g", "actor": "ops"},
]
for i, line in enumerate(SCENARIO):
    line["ts"] = T0 + 1000 * i


def _typed(line: dict[str, Any]) -> Any:
    """The typed-method call a Python user would make for the line."""
    return {k: v for k, v in line.items() if k not in ("op", "ts")}


def _via_methods(led: Ledger, clock: FakeClock) -> list[Any]:
    out: list[Any] = []
    for line in SCENARIO:
        clock.now = line["ts"]
        a = _typed(line)
        op = line["op"]
        try:
            if op == "queue_append":
                store = a.get("store_time")
                out.append(led.queue_append(T, a["queue_id"], a["count"], store))
            elif op == "queue_truncate":
                out.append(led.queue_truncate(T, a["queue_id"], a["min_offset"]))
            elif op == "queue_bounds":
                out.append(led.queue_bounds(T, a["queue_id"], max_offset=a["max_offset"],
                                            source=a["source"]))
            elif op == "group_set":
                out.append(led.group_set(G, initial="earliest", client_timeout_ms=60_000))
            elif op == "pull":
                out.append(led.pull(a["group"], T, a["queue_id"], client=a["client"],
                                    max_count=a.get("max", 32)))
            elif op == "commit":
                out.append(led.commit(a["group"], T, a["queue_id"], a["offset"],
                                      client=a.get("client"), generation=a.get("generation")))
            elif op == "sync":
                out.append(led.sync([(a["group"], T, a["queue_id"], a["offset"])],
                                    source=a["source"]))
            elif op == "reset":
                plan = led.reset(G, Scenario("to_offset", 0), scope=Scope(topics=((T, (0,)),)),
                                 actor="ops", reason="replay")
                out.append(plan.execute())
            elif op == "group_delete":
                out.append(led.group_delete(a["group"], actor="ops"))
        except Exception as e:  # the typed methods raise what apply reports per line
            out.append(e)
    return out


def _log(root: Path, run: Any) -> tuple[pa.Table, list[Any]]:
    clock = FakeClock(T0)
    with Ledger.open(root, backfill=True, clock=clock, segment_events_max=7) as led:
        results = run(led, clock)
        events = led.log.read()
    return events, results


def _scenario_table() -> pa.Table:
    fields = sorted({k for line in SCENARIO for k in line})
    columns = {f: [line.get(f) for line in SCENARIO] for f in fields}
    columns["store_time"] = [v for v in columns["store_time"]]
    return pa.table({f: pa.array(v) for f, v in columns.items()})


ENTRANCES = {
    "submit": lambda led, clock: [msgspec.to_builtins(r) for r in led.submit(SCENARIO)],
    "ndjson": lambda led, clock: [json.loads(x) for chunk, _, _ in led.apply_ndjson(
        io.BytesIO(b"".join(json.dumps(line).encode() + b"\n" for line in SCENARIO)))
        for x in chunk.splitlines()],
    "apply": lambda led, clock: list(led.apply(SCENARIO)),
    "arrow": lambda led, clock: list(led.apply(_scenario_table())),
}


@pytest.fixture(params=["per_command", "column_wise"])
def fold(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Batches folded per command, or column-wise from the first command on."""
    monkeypatch.setattr(executor, "COLUMN_MIN", 10**9 if request.param == "per_command" else 1)
    return request.param


@pytest.mark.parametrize("entrance", sorted(ENTRANCES))
def test_every_entrance_writes_the_same_events_and_results(tmp_path: Path, fold: str,
                                                           entrance: str) -> None:
    reference_events, reference = _log(tmp_path / "ref", ENTRANCES["submit"])
    events, results = _log(tmp_path / entrance, ENTRANCES[entrance])
    assert events.equals(reference_events)
    assert results == reference
    by_line = {r["line"]: r for r in results}
    assert by_line[6]["reason"] == "stale" and by_line[7]["reason"] == "invalid"
    assert by_line[14]["reason"] == "fenced" and by_line[17]["error"].startswith("invalid group")
    assert by_line[15]["next_offset"] == 3 and by_line[16]["accepted"]  # clamped to MinOffset 3


def test_the_typed_methods_write_the_same_events(tmp_path: Path, fold: str) -> None:
    reference_events, reference = _log(tmp_path / "ref", ENTRANCES["submit"])
    events, results = _log(tmp_path / "methods", _via_methods)
    assert events.equals(reference_events)
    assert [type(r).__name__ for r in results].count("InvalidInput") == 1
    assert results[14].next_offset == 3 and results[13].reason == "fenced"


def test_a_reviewed_plan_is_refused_when_a_queue_moved_and_appends_nothing(
        ledger: Ledger, clock: FakeClock) -> None:
    ledger.queue_append(T, 0, 100)
    ledger.group_set(G, initial="earliest")
    ledger.pull(G, T, 0, client="c1")
    ledger.commit(G, T, 0, 40, client="c1")
    plan = ledger.reset(G, Scenario("to_offset", 10), scope=Scope(all_topics=True), actor="ops")
    assert plan.rows()[0]["from_offset"] == 40
    ledger.commit(G, T, 0, 60, client="c1")  # the queue moves after the plan was made
    before = ledger.log.next_seq
    with pytest.raises(RefusedError, match=r"stale plan: queue orders:0 .* from offset 40 and is "
                                           r"now at 60") as refused:
        plan.execute()
    assert refused.value.reason == "stale_plan"
    assert ledger.log.next_seq == before and ledger.committed(G, T, 0) == 60
    # the same plan, reviewed again, executes
    ledger.reset(G, Scenario("to_offset", 10), scope=Scope(all_topics=True)).execute()
    assert ledger.committed(G, T, 0) == 10


def test_a_plan_executed_as_a_command_applies_its_own_targets(ledger: Ledger) -> None:
    """The console's flow: plan (dry run), review, execute exactly that plan, even if a new
    message arrived meanwhile (the targets do not move; only moved offsets refuse it)."""
    ledger.queue_append(T, 0, 100)
    ledger.group_set(G, initial="earliest")
    ledger.pull(G, T, 0, client="c1")
    ledger.commit(G, T, 0, 40, client="c1")
    dry = ledger.run_reset({"op": "reset", "group": G, "topic": T, "to_latest": True})
    assert dry.plan[0]["to_offset"] == 100 and not dry.executed
    ledger.queue_append(T, 0, 5)
    done = ledger.run_reset(Reset(group=G, to_latest=True, execute=True, reason="review",
                                  plan=[PlanRow(**{k: r[k] for k in ("topic", "queue_id",
                                                                     "from_offset",
                                                                     "to_offset")})
                                        for r in dry.plan]))
    assert done.executed and ledger.committed(G, T, 0) == 100


def test_python_commands_are_validated_like_json_ones(ledger: Ledger) -> None:
    results = ledger.submit([Commit(group=G, topic=T, queue_id=-1, offset=1),
                             Pull(group=G, topic=T, queue_id=0, max=-1),
                             QueueAppend(topic="a b", queue_id=0),
                             QueueTruncate(topic=T, queue_id=0, min_offset="x"),  # type: ignore[arg-type]
                             GroupSet(group=G, mode="fan-out"),  # type: ignore[arg-type]
                             GroupDelete(group=""),
                             Sync(group=G, topic=T, queue_id=0, offset=1, source="a b"),
                             QueueBounds(topic=T, queue_id=0, max_offset=1, min_offset=2)])
    errors = [r.error for r in results]
    assert all(errors), errors
    assert errors[0].startswith("invalid queue id -1") and "'a b'" in errors[2]
    assert ledger.log.next_seq == 0


@pytest.mark.parametrize("fold_min", [10**9, 1])
def test_each_command_of_a_batch_carries_its_senders_name(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          fold_min: int) -> None:
    """The server's group commit: one batch, commands from several tokens; every event's actor
    is its sender's name, whatever the command claims."""
    monkeypatch.setattr(executor, "COLUMN_MIN", fold_min)
    with Ledger.open(tmp_path / "d", backfill=True, clock=FakeClock()) as led:
        led.queue_append(T, 0, 100)
        led.group_set(G, initial="earliest")
        batch = [Pull(group=G, topic=T, queue_id=0, client="c1"),
                 Commit(group=G, topic=T, queue_id=0, offset=10, client="c1"),
                 Commit(group=G, topic=T, queue_id=0, offset=20),
                 GroupSet(group="other", actor="mallory"),
                 Sync(group="m", topic=T, queue_id=0, offset=5, source="x")]
        senders = ["fleet-a", "fleet-b", None, "ops", "mirror"]
        results = led.submit(batch, actor=senders)
        assert all(r.error is None for r in results)
        rows = led.history(since_ms=0).to_pylist()[-len(batch) - 1:]
    actors = [(r["kind"], r["actor"]) for r in rows if r["kind"] != "initial"]
    assert actors == [("pull", "fleet-a"), ("commit", "fleet-b"), ("commit", "operator"),
                      ("group_config", "ops"), ("sync", "mirror")]


@pytest.mark.parametrize("fold_min", [10**9, 1])
def test_a_denied_command_runs_not_and_a_denied_reset_is_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fold_min: int) -> None:
    monkeypatch.setattr(executor, "COLUMN_MIN", fold_min)
    with Ledger.open(tmp_path / "d", backfill=True, clock=FakeClock()) as led:
        led.queue_append(T, 0, 100)
        led.group_set(G, initial="earliest")
        led.pull(G, T, 0, client="c1")
        batch = [Commit(group=G, topic=T, queue_id=0, offset=10, client="c1"),
                 Reset(group=G, topic=T, to_offset=0, execute=True, reason="why not"),
                 Commit(group=G, topic=T, queue_id=0, offset=12, client="c1")]
        before = led.log.next_seq
        results = led.submit(batch, actor="fleet", denied=[None, "role", "group"])
        assert results[0].accepted and results[1].refused == "role" \
            and results[2].refused == "group"
        assert results[1].error == "forbidden: fleet may not reset group 'billing' (role)"
        assert led.committed(G, T, 0) == 10 and led.log.next_seq == before + 2
        [refused] = led.history(kind="reset_refused").to_pylist()
        assert refused["actor"] == "fleet" and json.loads(refused["detail"])["refused_by"] == "role"
