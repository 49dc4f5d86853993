"""Lag health cases the ledger adds to Burrow's, and exact time lag, on ledgers built through
`apply` lines with `ts`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from ledger import InvalidInput, Ledger
from tests.support.clock import FakeClock

T = "orders"
S = 1000  # one second of ledger time


def apply(led: Ledger, lines: Iterable[dict[str, Any]], batch: bool = True) -> None:
    """Apply lines in ts order (ledger time never goes back), as one batch or one by one."""
    ordered = sorted(lines, key=lambda line: line["ts"])
    for part in [ordered] if batch else [[line] for line in ordered]:
        results = list(led.apply(part))
        assert all("error" not in r for r in results), results


def append(q: int, count: int, ts: int, store: int | None = None, topic: str = T) -> dict:
    line = {"op": "queue_append", "topic": topic, "queue_id": q, "count": count, "ts": ts}
    return line if store is None else {**line, "store_time": store}


def commit(group: str, q: int, offset: int, ts: int, client: str | None = None) -> dict:
    line = {"op": "commit", "group": group, "topic": T, "queue_id": q, "offset": offset, "ts": ts}
    return line if client is None else {**line, "client": client}


def queues(doc: list[dict], group: str) -> dict[int, dict]:
    (g,) = [d for d in doc if d["consumer_group"] == group]
    return {q["queue_id"]: q for q in g["queues"]}


@pytest.fixture
def led(tmp_path: Path) -> Iterable[Ledger]:
    with Ledger.open(tmp_path / "data", backfill=True, clock=FakeClock(0)) as ledger:
        yield ledger


def slow_consumer(group: str, q: int, t0: int) -> list[dict]:
    """Commits every second, 100 messages each, while producers append 110 a second (half a
    second after each commit): the lag grows 10 a second and never shrinks (WARN)."""
    lines = [append(q, 110, t0)]
    for i in range(1, 6):
        lines += [commit(group, q, 100 * i, t0 + i * S), append(q, 110, t0 + i * S + S // 2)]
    return lines


def test_a_consumer_falling_behind_slowly_is_warn(led: Ledger) -> None:
    apply(led, slow_consumer("slow", 0, 10 * S))
    (g,) = led.lag(at_ms=16 * S, window=5)
    q = g["queues"][0]
    assert [e["lag"] for e in q["window"]] == [10, 20, 30, 40, 50]
    assert (q["status"], g["status"], q["lag"]) == ("WARN", "WARN", 160)
    assert led.lag(at_ms=16 * S, window=5, allowed_lag=160)[0]["status"] == "OK"


def test_a_recorded_reset_starts_a_new_window_but_a_sync_back_is_a_rewind(led: Ledger) -> None:
    """Both groups move back from 500 to 200. The operator's reset is deliberate: the window
    starts after it and the group is OK. The sync (a broker snapshot going back) stays in the
    window: REWIND."""
    lines = [append(0, 1000, 1 * S)]
    for i in range(1, 6):
        lines += [commit("reset", 0, 100 * i, i * S), commit("synced", 0, 100 * i, i * S)]
    lines.append({"op": "reset", "group": "reset", "topic": T, "queue_id": 0, "to_offset": 200,
                  "execute": True, "reason": "replay", "ts": 6 * S})
    lines.append({"op": "pull", "group": "reset", "topic": T, "queue_id": 0, "client": "c1",
                  "max": 32, "ts": 7 * S})
    apply(led, lines)
    led.writer.clock.now = 6 * S  # type: ignore[attr-defined]
    led.sync([("synced", T, 0, 200)], source="broker-b")
    apply(led, [commit("reset", 0, 200 + 32 * i, (6 + i) * S, client="c1") for i in (1, 2, 3)]
          + [commit("synced", 0, 200 + 32 * i, (6 + i) * S) for i in (1, 2, 3)])
    doc = led.lag(at_ms=9 * S + S // 2)
    after_reset = queues(doc, "reset")[0]
    assert [(e["ts"], e["offset"]) for e in after_reset["window"]] == [
        (7 * S, 232), (8 * S, 264), (9 * S, 296)]
    assert after_reset["status"] == "OK"
    synced = queues(doc, "synced")[0]
    assert [e["offset"] for e in synced["window"]] == [100, 200, 300, 400, 500, 200, 232, 264,
                                                       296]
    assert synced["status"] == "REWIND"
    assert {d["consumer_group"]: d["status"] for d in doc} == {"reset": "OK", "synced": "ERR"}


def test_the_worst_queue_decides_the_group(led: Ledger) -> None:
    lines = [append(0, 100, 1 * S), append(2, 100, 1 * S)]
    lines += slow_consumer("app", 1, 1 * S)  # queue 1: WARN
    lines += [commit("app", 0, 100, 2 * S)]  # queue 0: caught up, OK
    lines += [commit("app", 2, 50, i * S) for i in range(2, 7)]  # queue 2: STALL at 50
    apply(led, lines)
    doc = led.lag(at_ms=7 * S)
    statuses = {i: q["status"] for i, q in queues(doc, "app").items()}
    assert statuses == {0: "OK", 1: "WARN", 2: "STALL"}
    assert doc[0]["status"] == "ERR"
    assert doc[0]["max_lag"]["queue_id"] == 1 and doc[0]["total_lag"] == 0 + 160 + 50
    assert led.lag(at_ms=7 * S, topic=f"{T}:0,1")[0]["status"] == "WARN"
    assert led.lag(at_ms=7 * S, topic=f"{T}:0")[0]["status"] == "OK"


def test_an_unknown_group_is_notfound(led: Ledger) -> None:
    apply(led, [append(0, 10, S), commit("known", 0, 5, S)])
    assert led.lag(group="nobody") == [{"consumer_group": "nobody", "status": "NOTFOUND",
                                        "complete": 0.0, "total_lag": 0, "max_lag": None,
                                        "queues": []}]
    assert led.lag(group="known", topic="elsewhere")[0]["status"] == "NOTFOUND"
    assert [d["consumer_group"] for d in led.lag()] == ["known"]
    # before its first commit the group had no offsets either
    assert led.lag(group="known", at_ms=S - 1)[0]["status"] == "NOTFOUND"


def test_time_lag_is_t_minus_the_store_time_of_the_message_at_the_committed_offset(
        led: Ledger) -> None:
    """Appends of 10 messages stored at 100 s, 200 s, 300 s (ledger times a little later);
    commits in between. lag_ms at T is T minus the store time of the append holding the
    committed offset, 0 at zero lag."""
    apply(led, [
        append(0, 10, 101 * S, store=100 * S),                # offsets 0-9
        commit("g", 0, 4, 150 * S),
        append(0, 10, 201 * S, store=200 * S),                # offsets 10-19
        commit("g", 0, 10, 250 * S),
        append(0, 10, 301 * S, store=300 * S),                # offsets 20-29
        commit("g", 0, 30, 350 * S),
    ])
    expected = {
        100 * S: None,                      # nothing appended yet: bounds unknown
        120 * S: (10, 120 * S - 100 * S),   # no commit yet: not listed (checked below)
        150 * S: (6, 50 * S),               # offset 4 was stored at 100 s
        249 * S: (16, 149 * S),
        250 * S: (10, 50 * S),              # offset 10 was stored at 200 s
        301 * S: (20, 101 * S),
        350 * S: (0, 0),                    # caught up
        999 * S: (0, 0),
    }
    for at, want in expected.items():
        doc = led.lag(group="g", at_ms=at)
        if at < 150 * S:
            assert doc[0]["status"] == "NOTFOUND"
            continue
        q = doc[0]["queues"][0]
        assert (q["lag"], q["lag_ms"]) == want, at
    # the progress view answers the same now
    (row,) = led.progress("g")
    assert (row["lag"], row["lag_ms"]) == (0, 0)


def test_time_lag_is_null_where_the_bounds_are_unknown(led: Ledger) -> None:
    """A queue known only from a sync has no MaxOffset: lag and lag_ms are null, and the
    status is judged on the offsets alone (a sync back is still a REWIND)."""
    led.writer.clock.now = 10 * S  # type: ignore[attr-defined]
    led.sync([("g", "mirror", 0, 500)], source="a")
    led.writer.clock.now = 20 * S  # type: ignore[attr-defined]
    led.sync([("g", "mirror", 0, 400)], source="a")
    (g,) = led.lag(at_ms=30 * S)
    q = g["queues"][0]
    assert (q["lag"], q["lag_ms"], q["max_offset"]) == (None, None, None)
    assert [(e["offset"], e["lag"]) for e in q["window"]] == [(500, None), (400, None)]
    assert (q["status"], g["total_lag"], g["max_lag"]) == ("REWIND", 0, None)
    (row,) = led.progress("g")
    assert (row["lag"], row["lag_ms"]) == (None, None)


def test_lag_ms_of_progress_matches_lag_now(tmp_path: Path) -> None:
    clock = FakeClock(0)
    with Ledger.open(tmp_path / "data", backfill=True, clock=clock) as led:
        apply(led, [append(0, 10, 5 * S, store=3 * S), append(0, 10, 6 * S, store=4 * S),
                    commit("g", 0, 12, 7 * S)])
        clock.now = 60 * S
        (row,) = led.progress("g")
        (g,) = led.lag(group="g")
        assert row["lag_ms"] == g["queues"][0]["lag_ms"] == 56 * S
        table = led.sql("SELECT lag, lag_ms FROM progress WHERE consumer_group = 'g'")
        assert table.to_pylist() == [{"lag": 8, "lag_ms": 56 * S}]


def test_broadcast_group_lag_is_the_slowest_live_client(led: Ledger) -> None:
    """Each client of a broadcast group commits its own offset; the group's offset (for lag and
    for the window) is the minimum over clients seen within the client timeout."""
    apply(led, [
        {"op": "group_set", "group": "b", "mode": "broadcast", "initial": "earliest",
         "client_timeout": "PT10S", "ts": S},
        append(0, 100, S, store=S),
        commit("b", 0, 30, 2 * S, client="c1"),
        commit("b", 0, 80, 3 * S, client="c2"),
        commit("b", 0, 40, 4 * S, client="c1"),
        commit("b", 0, 90, 12 * S, client="c2"),
    ])
    q = queues(led.lag(at_ms=5 * S), "b")[0]
    assert [e["offset"] for e in q["window"]] == [30, 30, 40]
    assert (q["committed_offset"], q["lag"]) == (40, 60)
    # c1 has been silent for more than 10 s at 15 s: only c2 counts
    q = queues(led.lag(at_ms=15 * S), "b")[0]
    assert [e["offset"] for e in q["window"]] == [30, 30, 40, 40]
    assert (q["committed_offset"], q["lag"]) == (90, 10)
    # and nobody at 30 s: the group has no offset left
    assert led.lag(group="b", at_ms=30 * S)[0]["status"] == "NOTFOUND"


def test_windows_reach_back_across_checkpoints(tmp_path: Path) -> None:
    """Many small segments and checkpoints: a window of 10 spans several of them; a key younger
    than its window (first commit at 25 s) has what it has."""
    with Ledger.open(tmp_path / "data", backfill=True, clock=FakeClock(0), segment_events_max=9,
                     checkpoint_interval_events=5) as led:
        lines = [append(0, 10_000, S), append(1, 10_000, S)]
        for i in range(1, 40):
            lines += [commit("g", 0, 10 * i, i * S), commit("other", 1, 5 * i, i * S)]
        lines += [commit("late", 1, 7 * i, i * S) for i in range(25, 40)]
        apply(led, lines, batch=False)
        assert len(led.log.checkpoints()) > 8 and len(led.log.segments()) > 8
        doc = led.lag(at_ms=30 * S)
        assert [e["offset"] for e in queues(doc, "g")[0]["window"]] == [
            10 * i for i in range(21, 31)]
        late = queues(doc, "late")[1]
        assert ([e["ts"] for e in late["window"]], late["complete"]) == (
            [i * S for i in range(25, 31)], 0.6)
        q = queues(led.lag(at_ms=3 * S, window=10), "g")[0]
        assert ([e["offset"] for e in q["window"]], q["complete"]) == ([10, 20, 30], 0.3)


def test_lag_ms_survives_a_reopen_and_log_retention(tmp_path: Path) -> None:
    """The appends live in the state and its checkpoints: after old segments are deleted the
    store time of an old message is still known."""
    clock = FakeClock(0)
    root = tmp_path / "data"
    with Ledger.open(root, backfill=True, clock=clock, segment_events_max=4) as led:
        apply(led, [append(0, 10, S, store=S // 2), commit("g", 0, 3, 2 * S)]
              + [append(1, 1, (10 + i) * S) for i in range(20)])
        clock.now = 100 * S
        led.retention(log_retention_ms=50 * S)
        assert led.log.start_seq > 0
    with Ledger.open(root, backfill=True, clock=clock) as led:
        q = led.lag(group="g")[0]["queues"][0]
        assert (q["lag"], q["lag_ms"]) == (7, 100 * S - S // 2)


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"window": 0}, "invalid window 0"),
    ({"window": -3}, "invalid window -3"),
    ({"allowed_lag": -1}, "invalid allowed lag -1"),
    ({"topic": "t:x"}, "invalid --topic 't:x'"),
    ({"topic": "t:-1"}, "invalid --topic 't:-1'"),
    ({"topic": "t:\u00b2"}, "invalid --topic"),
    ({"topic": "no spaces"}, "invalid --topic 'no spaces'"),
    ({"group": ""}, "invalid group ''"),
    ({"at_ms": -5}, "invalid time -5"),
])
def test_bad_lag_questions_name_the_bad_value(led: Ledger, kwargs: dict, fragment: str) -> None:
    with pytest.raises(InvalidInput, match=fragment.replace("(", r"\(")):
        led.lag(**kwargs)


def test_series_and_lag_at_agree_across_a_broadcast_group_deleted_and_recreated(
        led: Ledger) -> None:
    """A delete drops the group's offsets and its clients' (still live ones included); clients
    committing afterwards start a new life. The SQL series and lag --at give the same offsets
    at every second."""
    apply(led, [
        {"op": "group_set", "group": "b", "mode": "broadcast", "client_timeout": "PT1M",
         "ts": S},
        append(0, 100, S, store=0),
        commit("b", 0, 20, 2 * S, client="c1"),
        commit("b", 0, 60, 3 * S, client="c2"),
        {"op": "group_delete", "group": "b", "ts": 4 * S},
        {"op": "group_set", "group": "b", "mode": "broadcast", "client_timeout": "PT1M",
         "ts": 5 * S},
        commit("b", 0, 70, 6 * S, client="c2"),
        commit("b", 0, 90, 8 * S, client="c3"),
    ])
    series = led.lag_series(since_ms=S, until_ms=9 * S, every_ms=S, group="b")
    points = {p["ts"]: p["committed_offset"] for q in series for p in q["series"]}
    assert points == {2 * S: 20, 3 * S: 20, 6 * S: 70, 7 * S: 70, 8 * S: 70, 9 * S: 70}
    for at in range(S, 10 * S, S):
        (g,) = led.lag(group="b", at_ms=at)
        assert [q["committed_offset"] for q in g["queues"]] == (
            [points[at]] if at in points else []), at
    window = led.lag(group="b", at_ms=9 * S)[0]["queues"][0]["window"]
    assert [(e["ts"], e["offset"]) for e in window] == [(6 * S, 70), (8 * S, 70)]
