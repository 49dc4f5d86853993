"""Properties over random command streams: the view, a rebuild, state-at and a reopen all agree
with a pure replay of the log through the fold."""

from __future__ import annotations

import itertools
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import Ledger
from ledger.events import EVENT_SCHEMA
from ledger.state import State, snapshot_rows
from tests.support.clock import T0, FakeClock

GROUPS = ("g1", "g2")
TOPIC = "t"
QUEUES = (0, 1)
CLIENTS = ("c1", "c2", "c3")

key = st.tuples(st.sampled_from(GROUPS), st.sampled_from(QUEUES))
step_ms = st.sampled_from([0, 1, 10, 1_000, 60_000, 130_000])

command = st.one_of(
    st.builds(lambda q, n: {"op": "queue_append", "topic": TOPIC, "queue_id": q, "count": n},
              st.sampled_from(QUEUES), st.integers(1, 60)),
    st.builds(lambda q, m: {"op": "queue_truncate", "topic": TOPIC, "queue_id": q,
                            "min_offset": m}, st.sampled_from(QUEUES), st.integers(0, 120)),
    st.builds(lambda k, c, m: {"op": "pull", "group": k[0], "topic": TOPIC, "queue_id": k[1],
                               "client": c, "max": m},
              key, st.sampled_from(CLIENTS), st.integers(1, 40)),
    st.builds(lambda k, c, o: {"op": "commit", "group": k[0], "topic": TOPIC,
                               "queue_id": k[1], "client": c, "offset": o},
              key, st.sampled_from((*CLIENTS, None)), st.integers(0, 200)),
    st.builds(lambda g, s: {"op": "reset", "group": g, "topic": TOPIC, "execute": True, **s},
              st.sampled_from(GROUPS),
              st.sampled_from([{"to_offset": 5}, {"to_earliest": True}, {"shift_by": -10},
                               {"to_latest": True}, {"to_current": True}])),
    st.builds(lambda g, m, i: {"op": "group_set", "group": g, "mode": m, "initial": i},
              st.sampled_from(GROUPS), st.sampled_from(["clustering", "broadcast"]),
              st.sampled_from(["latest", "earliest"])),
    st.builds(lambda g: {"op": "group_delete", "group": g}, st.sampled_from(GROUPS)),
)
streams = st.lists(st.tuples(command, step_ms), min_size=1, max_size=60)


def replay(led: Ledger, seq_to: int | None = None) -> State:
    data = led.log.read(seq_gte=0, seq_lt=seq_to)
    state = State()
    state.apply_columns(data.to_pydict())
    return state


def view_offsets(led: Ledger) -> list[tuple]:
    led.flush_view()
    return sorted(led.view.con.execute(
        "SELECT consumer_group, topic, queue_id, committed_offset, pulled_offset, generation, "
        "pending FROM offsets").fetchall())


def state_offsets(state: State) -> list[tuple]:
    return sorted(
        (*k, p.committed, p.pulled, p.generation, p.pending)
        for k, p in state.positions.items()
        if p.committed is not None or p.pulled is not None or p.pending)


def run_stream(led: Ledger, clock: FakeClock, stream) -> list[int]:
    times = []
    for cmd, step in stream:
        clock.advance(step)
        list(led.apply([cmd]))
        times.append(clock.now)
    return times


@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=streams, data=st.data())
def test_view_rebuild_state_at_and_reopen_agree_with_replay(tmp_path_factory, stream, data):
    root = tmp_path_factory.mktemp("prop")
    clock = FakeClock()
    with Ledger.open(root, clock=clock, segment_events_max=7) as led:
        times = run_stream(led, clock, stream)
        replayed = replay(led)
        # (a) the incremental view equals a pure replay of the log
        assert view_offsets(led) == state_offsets(replayed)
        assert snapshot_rows(led.state, clock.now) == snapshot_rows(replayed, clock.now)
        # (c) state_at(T) equals the replay of the log prefix up to T
        t = data.draw(st.sampled_from([T0 - 1, *times]))
        seq_to = _first_seq_after(led, t)
        expected = snapshot_rows(replay(led, seq_to), t)
        got = [tuple(r.values()) for r in led.state_at(ts=t).to_pylist()]
        assert got == expected
        before = view_offsets(led)
        # (b) rebuild from checkpoint + log equals the incremental view
        led.rebuild()
        assert view_offsets(led) == before
    # (d) after close and reopen everything is the same
    with Ledger.open(root, clock=clock) as led:
        assert view_offsets(led) == before
        assert snapshot_rows(led.state, clock.now) == snapshot_rows(replayed, clock.now)


def _first_seq_after(led: Ledger, ts: int) -> int:
    data = led.log.read(columns=["seq", "ts"]).to_pydict()
    for s, t in zip(data["seq"], data["ts"], strict=True):
        if t > ts:
            return s
    return led.log.next_seq


def test_schema_has_every_design_column():
    assert list(itertools.islice(EVENT_SCHEMA.names, 0, None)) == [
        "seq", "ts", "kind", "consumer_group", "topic", "queue_id", "offset", "prev_offset",
        "generation", "client_id", "actor", "store_ts", "detail"]
