"""`Ledger.lag(at_ms=T)` equals a plain evaluation of the log prefix up to T, for random ledgers
(clustering and broadcast groups, commits, pulls, resets, syncs either way, expiries, deletes,
appends stored in any order), random times and settings. The reference (tests/support/
lag_reference.py) reads the log and folds it in plain dicts, sharing no code with ledger/lag*.py
or the fold."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ledger.lag.windows as windows
from ledger import Ledger
from tests.support.clock import T0, FakeClock
from tests.support.lag_reference import reference

GROUPS = ("g1", "g2")
TOPIC = "t"
QUEUES = (0, 1)
CLIENTS = ("c1", "c2", "c3")
RETENTION_MS = 400_000

key = st.tuples(st.sampled_from(GROUPS), st.sampled_from(QUEUES))
step_ms = st.sampled_from([0, 1, 1_000, 1_000, 1_000, 5_000, 60_000, 130_000])
appends = st.builds(lambda q, n, back: {"op": "queue_append", "topic": TOPIC, "queue_id": q,
                                         "count": n, "store_back": back},
                    st.sampled_from(QUEUES), st.integers(1, 60),
                    st.sampled_from([None, 0, 5_000, -50]))
# a commit some messages past the current offset (0: the same again): most commands, so that
# windows fill up
commits = st.builds(lambda k, c, a: {"op": "commit", "group": k[0], "topic": TOPIC,
                                     "queue_id": k[1], "client": c, "advance": a},
                    key, st.sampled_from((*CLIENTS, None)), st.sampled_from([0, 1, 5, 20]))
pulls = st.builds(lambda k, c, m: {"op": "pull", "group": k[0], "topic": TOPIC, "queue_id": k[1],
                                   "client": c, "max": m},
                  key, st.sampled_from(CLIENTS), st.integers(1, 40))
# a broker snapshot moving the offset back or ahead of where it is, also on a queue known only
# from syncs (queue 2: never appended, its bounds unknown)
syncs = st.builds(lambda g, q, d: {"op": "sync", "group": g, "queue_id": q, "advance": d},
                  st.sampled_from(GROUPS), st.sampled_from((*QUEUES, 2)),
                  st.sampled_from([-30, -5, 10]))
others = st.one_of(
    st.builds(lambda q, m: {"op": "queue_truncate", "topic": TOPIC, "queue_id": q,
                            "min_offset": m}, st.sampled_from(QUEUES), st.integers(0, 120)),
    st.builds(lambda k, c, o: {"op": "commit", "group": k[0], "topic": TOPIC,
                               "queue_id": k[1], "client": c, "offset": o},
              key, st.sampled_from((*CLIENTS, None)), st.integers(0, 200)),
    st.builds(lambda g, s: {"op": "reset", "group": g, "topic": TOPIC, "execute": True, **s},
              st.sampled_from(GROUPS),
              st.sampled_from([{"to_offset": 5}, {"shift_by": -10}, {"to_latest": True}])),
    st.builds(lambda g, m, t: {"op": "group_set", "group": g, "mode": m, "client_timeout": t},
              st.sampled_from(GROUPS), st.sampled_from(["clustering", "broadcast"]),
              st.sampled_from(["PT30S", "PT5M"])),
    st.builds(lambda g: {"op": "group_delete", "group": g}, st.sampled_from(GROUPS)),
)
# weighted: mostly commits, then appends and pulls, now and then anything else
command = st.integers(0, 99).flatmap(
    lambda n: (commits if n < 50 else appends if n < 68 else pulls if n < 78 else syncs if n < 88
               else others))
streams = st.lists(st.tuples(command, step_ms), min_size=20, max_size=100)
PREAMBLE = [{"op": "queue_append", "topic": TOPIC, "queue_id": q, "count": 50} for q in QUEUES]


def run_stream(led: Ledger, clock: FakeClock, stream: list) -> None:
    """The commands one batch each; a relative commit or sync names the offset it reaches."""
    list(led.apply(PREAMBLE))
    for cmd, step in stream:
        clock.advance(step)
        cmd = dict(cmd)
        if "advance" in cmd:
            now = led.committed(cmd["group"], TOPIC, cmd["queue_id"]) or 0
            cmd["offset"] = max(0, now + cmd.pop("advance"))
        if cmd["op"] == "sync":
            led.sync([(cmd["group"], TOPIC, cmd["queue_id"], cmd["offset"])], source="mirror")
            continue
        back = cmd.pop("store_back", None)
        if back is not None:
            cmd["store_time"] = clock.now - back
        list(led.apply([cmd]))


@contextlib.contextmanager
def built(root: Path, stream: list) -> Iterator[tuple[Ledger, FakeClock, list[dict[str, Any]]]]:
    """The stream applied to a ledger of small segments and frequent checkpoints (so windows
    span several ranges), and its events."""
    clock = FakeClock()
    with Ledger.open(root, clock=clock, segment_events_max=7, checkpoint_interval_events=5,
                     offsets_retention_ms=RETENTION_MS) as led:
        run_stream(led, clock, stream)
        yield led, clock, led.log.read().to_pylist()


@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=streams, data=st.data())
def test_lag_at_equals_a_plain_evaluation_of_the_log_prefix(tmp_path_factory, stream, data):
    with built(tmp_path_factory.mktemp("lagprop"), stream) as (led, clock, events):
        times = sorted({e["ts"] for e in events} | {T0 - 1, clock.now + 90_000})
        window = data.draw(st.integers(1, 6), label="window")
        allowed = data.draw(st.sampled_from([0, 5, 30]), label="allowed_lag")
        only = data.draw(st.sampled_from([None, *GROUPS]), label="group")
        # the first range holds every window of a ledger this small: a range from each
        # checkpoint makes windows reach back across ranges (checkpoint holders, broadcast
        # starts inside a range, the keyed path's questions in Arrow)
        ranges = data.draw(st.sampled_from(["first range", "one per checkpoint"]),
                           label="ranges")
        small = ranges == "one per checkpoint"
        with mock.patch.object(windows, "FIRST_RANGE_EVENTS", 1 if small else
                               windows.FIRST_RANGE_EVENTS), \
                mock.patch.object(windows, "FIRST_RANGE_EVENTS_PER_ENTRY_AND_KEY", 0 if small
                                  else windows.FIRST_RANGE_EVENTS_PER_ENTRY_AND_KEY):
            for at in data.draw(st.lists(st.sampled_from(times), min_size=1, max_size=4),
                                label="at"):
                want = reference(events, at, window, allowed, only)
                got = led.lag(at_ms=at, window=window, allowed_lag=allowed, group=only)
                assert got == want, (at, window, allowed, only, ranges)


@settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "40")) // 2, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stream=streams, data=st.data())
def test_the_lag_series_in_sql_equals_the_plain_evaluation_at_every_point(
        tmp_path_factory, stream, data):
    with built(tmp_path_factory.mktemp("lagseries"), stream) as (led, _, events):
        every = data.draw(st.sampled_from([1, 999, 30_000, 61_000]), label="every")
        since = data.draw(st.sampled_from([T0, events[-1]["ts"] - every * 20]), label="since")
        until = since + every * 30
        got = {(q["consumer_group"], q["topic"], q["queue_id"], p["ts"]): p
               for q in led.lag_series(since_ms=since, until_ms=until, every_ms=every)
               for p in q["series"]}
        want = {}
        for at in range(since, until + 1, every):
            for g in reference(events, at, 1, 0, None):
                for q in g["queues"]:
                    want[(g["consumer_group"], q["topic"], q["queue_id"], at)] = {
                        "ts": at, **{k: q[k] for k in ("committed_offset", "max_offset", "lag",
                                                       "lag_ms")}}
        assert got == want
