"""Properties over random command streams, with the reference model of DESIGN.md's rules as the
oracle (tests/support/reference.py): every way into the ledger (`apply` of dicts, `apply` of an
Arrow table folded column-wise, the typed methods) answers each line as the model does and
leaves the log, the view, the snapshot and the state at past times the model has; so do a
rebuild of the view and a reopen."""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from ledger import Ledger, LedgerError, Scenario, Scope
from ledger.fold.events import EVENT_SCHEMA
from tests.support.clock import T0, FakeClock
from tests.support.faults import NoSyncFS
from tests.support.oracle import (
    assert_events,
    assert_ledger_agrees,
    assert_results,
    assert_view,
    model_run,
    rows,
    view_tables,
)
from tests.support.reference import duration_ms
from tests.support.strategies import (
    LINE_SCHEMA,
    OFFSETS_RETENTION_MS,
    property_settings,
    streams,
)


def typed_call(led: Ledger, line: dict[str, Any]) -> dict[str, Any]:
    """One apply line through the typed methods, its answer in the apply result's form."""
    op = line["op"]
    g, t, q = line.get("group"), line.get("topic"), line.get("queue_id")
    try:
        if op == "queue_append":
            out = led.queue_append(t, q, line.get("count", 1))
        elif op == "queue_truncate":
            out = led.queue_truncate(t, q, line["min_offset"])
        elif op == "pull":
            r = led.pull(g, t, q, client=line.get("client"), max_count=line.get("max", 32))
            out = {"next_offset": r.next_offset, "generation": r.generation, "count": r.count}
        elif op == "commit":
            c = led.commit(g, t, q, line["offset"], client=line.get("client"),
                           generation=line.get("generation"),
                           owner_only=line.get("owner_only", False))
            out = {"accepted": c.accepted, "reason": c.reason, "offset": c.offset}
            if not c.accepted:
                out["error"] = f"commit refused: {c.reason}"
        elif op == "group_set":
            timeout = line.get("client_timeout")
            out = led.group_set(g, mode=line.get("mode"), initial=line.get("initial"),
                                client_timeout_ms=None if timeout is None else duration_ms(timeout))
        elif op == "group_delete":
            out = led.group_delete(g)
        elif op == "reset":
            out = _typed_reset(led, line)
        else:
            return {"op": op, "error": f"no method for {op!r}"}
    except LedgerError as e:
        return {"op": op, "error": str(e)}
    return {"op": op, **out}


def _typed_reset(led: Ledger, line: dict[str, Any]) -> dict[str, Any]:
    (mode,) = [m for m in ("to_offset", "to_earliest", "to_latest", "to_current", "shift_by",
                           "to_datetime", "by_duration", "to_state_at") if m in line]
    value = line[mode]
    scenario = Scenario(mode, duration_ms(value) if mode == "by_duration" else
                        None if isinstance(value, bool) else value)
    scope = (Scope(all_topics=True) if line.get("all_topics") else
             Scope(topics=((line["topic"],
                            None if line.get("queue_id") is None else (line["queue_id"],)),)))
    plan = led.reset(line["group"], scenario, scope=scope,
                     backward_only=bool(line.get("backward_only")))
    if line["execute"]:
        plan.execute()
    # an empty plan executes nothing (as `apply` answers it: executed false)
    return {"executed": line["execute"] and bool(plan.items), "plan": plan.rows(),
            "messages_replayed": plan.messages_replayed,
            "messages_skipped": plan.messages_skipped}


def _without_seq(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "seq"} for r in results]


@property_settings()
# few keys (2 groups x 2 queues), so that lines meet on them: broadcast clients, resets and
# deletes racing commits, truncations behind offsets
@given(lines=streams(max_size=80, groups=("g1", "g2"), topics=("t",)),
       batch=st.sampled_from([3, 16, 4096]),
       data=st.data())
def test_every_path_agrees_with_the_reference_model(tmp_path_factory, lines, batch, data):
    model, want = model_run(lines, clock_ms=T0, offsets_retention_ms=OFFSETS_RETENTION_MS)
    stamps = sorted({line["ts"] for line in lines})
    times = sorted({T0 - 1, stamps[-1], stamps[-1] + 200_000,
                    *data.draw(st.lists(st.sampled_from(stamps), max_size=3), label="times")})
    root = tmp_path_factory.mktemp("prop")
    settings = {"offsets_retention_ms": OFFSETS_RETENTION_MS, "durability": "none", "fs": NoSyncFS()}

    # apply of dicts (the NDJSON path), in batches of `batch` lines
    # (small segments and checkpoint intervals: state-at and the rebuild read across them)
    with Ledger.open(root / "dicts", backfill=True, clock=FakeClock(), apply_batch_commands=batch,
                     segment_events_max=7, checkpoint_interval_events=11, **settings) as led:
        assert_results(list(led.apply(lines)), want, lines, "dicts")
        assert_ledger_agrees(led, model, times, "dicts")
        led.rebuild()  # from the newest checkpoint plus the log
        assert_view(view_tables(lambda sql: rows(led.sql(sql))), model, "rebuild")
    with Ledger.open(root / "dicts", backfill=True, clock=FakeClock(), fs=NoSyncFS()) as led:
        assert_ledger_agrees(led, model, times, "reopen")

    # apply of an Arrow table: the column-wise fold
    table = pa.Table.from_pylist(lines, schema=LINE_SCHEMA)
    with Ledger.open(root / "table", backfill=True, clock=FakeClock(), apply_column_batch_commands=batch,
                     **settings) as led:
        assert_results(list(led.apply(table)), want, lines, "table")
        assert_ledger_agrees(led, model, times, "table")

    # the typed methods, the clock set to each line's ts
    clock = FakeClock()
    with Ledger.open(root / "typed", backfill=True, clock=clock, **settings) as led:
        got = []
        for line in lines:
            clock.now = line["ts"]
            got.append(typed_call(led, line))
        assert_results(got, _without_seq(want), lines, "typed")
        assert_events(led.log.read(), model, "typed")
        assert rows(led.state_at(ts=times[-1])) == model.state_at(times[-1])


def test_schema_has_every_design_column():
    assert list(itertools.islice(EVENT_SCHEMA.names, 0, None)) == [
        "seq", "ts", "kind", "consumer_group", "topic", "queue_id", "offset", "prev_offset",
        "generation", "client_id", "actor", "store_ts", "detail"]
