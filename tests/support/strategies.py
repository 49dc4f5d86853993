"""Hypothesis strategies of apply lines: one generator for every property test, so that each
test draws from every rule (and a few malformed lines) rather than its own subset."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from tests.support.clock import T0
from tests.support.reference import ReferenceLedger

GROUPS = ("g1", "g2", "g3")
TOPICS = ("t", "u")
QUEUES = (0, 1)
CLIENTS = ("c1", "c2", "c3")

#: Examples of the property tests that check the ledger against the reference model;
#: `PROPERTY_EXAMPLES=2000` for a longer hunt (the other property tests take a share of it).
EXAMPLES = int(os.environ.get("PROPERTY_EXAMPLES", "100"))

#: An apply line of `commands` as an Arrow row: one column per field (null: absent).
LINE_SCHEMA = pa.schema([
    ("op", pa.string()), ("group", pa.string()), ("topic", pa.string()),
    ("queue_id", pa.int64()), ("client", pa.string()), ("offset", pa.int64()),
    ("max", pa.int64()), ("count", pa.int64()), ("min_offset", pa.int64()),
    ("generation", pa.int64()), ("to_offset", pa.int64()), ("shift_by", pa.int64()),
    ("to_datetime", pa.int64()), ("to_state_at", pa.int64()), ("by_duration", pa.string()),
    ("to_earliest", pa.bool_()), ("to_latest", pa.bool_()), ("to_current", pa.bool_()),
    ("all_topics", pa.bool_()), ("backward_only", pa.bool_()), ("execute", pa.bool_()),
    ("mode", pa.string()), ("client_timeout", pa.string()), ("initial", pa.string()),
    ("ts", pa.int64()), ("owner_only", pa.bool_()),
])


#: Shrink a failing example (`PROPERTY_SHRINK=1`)? Off by default: an example opens ledgers
#: (a second or so), so hypothesis spends its 5-minute shrinking budget per failing test and
#: still ends with most of the stream, while the failure already names the first line whose
#: answer differs, with both answers.
SHRINK = os.environ.get("PROPERTY_SHRINK", "") not in ("", "0")


def property_settings(share: float = 1.0) -> Any:
    """Hypothesis settings of a property test running `share` of `EXAMPLES`: no deadline (a
    ledger opens files), and the function-scoped tmp_path_factory is fine (each example makes
    its own directory)."""
    phases = tuple(p for p in Phase if SHRINK or p is not Phase.shrink)
    return settings(max_examples=max(1, round(EXAMPLES * share)), deadline=None, phases=phases,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def _scenarios() -> st.SearchStrategy[dict[str, Any]]:
    """One reset scenario (every mode of rule 4 an apply line can carry) and its options."""
    scenario = st.one_of(
        st.sampled_from([{"to_offset": 0}, {"to_offset": 5}, {"to_offset": 150},
                         {"to_earliest": True}, {"to_latest": True}, {"to_current": True},
                         {"shift_by": -10}, {"shift_by": 0}, {"shift_by": 7},
                         {"by_duration": "PT1S"}, {"by_duration": "PT2M"}]),
        st.builds(lambda d: {"to_datetime": T0 + d},
                  st.sampled_from([-1, 0, 1_000, 70_000, 10_000_000])),
        st.builds(lambda d: {"to_state_at": T0 + d},
                  st.sampled_from([-1, 0, 10, 1_000, 70_000, 10_000_000])),
    )
    options = st.fixed_dictionaries({}, optional={
        "backward_only": st.just(True), "execute": st.sampled_from([True, True, True, False])})
    return st.builds(lambda s, o: {**s, "execute": True, **o}, scenario, options)


def commands(*, groups: tuple[str, ...] = GROUPS, topics: tuple[str, ...] = TOPICS,
             queues: tuple[int, ...] = QUEUES, clients: tuple[str, ...] = CLIENTS,
             malformed: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """Apply lines without `ts`: appends and truncations, pulls and commits (most of them, as
    in real streams; some naming a generation), resets of every mode and scope, group settings
    (mode, initial policy, client timeout), group deletes; with `malformed`, lines every path
    must refuse the same way."""
    queue = st.tuples(st.sampled_from(topics), st.sampled_from(queues))
    key = st.tuples(st.sampled_from(groups), queue)
    pull = st.builds(lambda k, c, m: {"op": "pull", "group": k[0], "topic": k[1][0],
                                      "queue_id": k[1][1], "client": c, "max": m},
                     key, st.sampled_from(clients), st.integers(0, 40))
    commit = st.builds(lambda k, c, o: {"op": "commit", "group": k[0], "topic": k[1][0],
                                        "queue_id": k[1][1], "offset": o,
                                        **({} if c is None else {"client": c})},
                       key, st.sampled_from((*clients, None)), st.integers(0, 200))
    group_set = st.builds(
        lambda g, s: {"op": "group_set", "group": g, **s}, st.sampled_from(groups),
        st.fixed_dictionaries({}, optional={
            "mode": st.sampled_from(["clustering", "broadcast"]),
            "initial": st.sampled_from(["latest", "earliest", f"timestamp:{T0 + 5_000}"]),
            "client_timeout": st.sampled_from(["PT1S", "PT2S", "PT2M"])}))
    scope = st.one_of(
        st.builds(lambda t: {"topic": t}, st.sampled_from(topics)),
        st.builds(lambda q: {"topic": q[0], "queue_id": q[1]}, queue),
        st.just({"all_topics": True}))
    reset = st.builds(lambda g, s, r: {"op": "reset", "group": g, **s, **r},
                      st.sampled_from(groups), scope, _scenarios())
    parts = [
        st.builds(lambda q, n: {"op": "queue_append", "topic": q[0], "queue_id": q[1],
                                "count": n}, queue, st.integers(1, 60)),
        st.builds(lambda q, m: {"op": "queue_truncate", "topic": q[0], "queue_id": q[1],
                                "min_offset": m}, queue, st.integers(0, 120)),
        *[pull] * 4, *[commit] * 4,
        st.builds(lambda k, o, g: {"op": "commit", "group": k[0], "topic": k[1][0],
                                   "queue_id": k[1][1], "offset": o, "generation": g},
                  key, st.integers(0, 200), st.integers(0, 3)),
        # a Kafka consumer's commit: fenced unless its client pulled the queue last
        st.builds(lambda k, c, o: {"op": "commit", "group": k[0], "topic": k[1][0],
                                   "queue_id": k[1][1], "offset": o, "client": c,
                                   "owner_only": True},
                  key, st.sampled_from(clients), st.integers(0, 200)),
        *[reset] * 2,  # every mode and scope, racing pulls and commits
        *[group_set] * 2,  # mode switches meet every other rule
        st.builds(lambda g: {"op": "group_delete", "group": g}, st.sampled_from(groups)),
    ]
    if malformed:
        parts += [
            st.builds(lambda k: {"op": "pull", "group": k[0], "topic": k[1][0],
                                 "queue_id": k[1][1], "client": "c1", "max": -1}, key),
            st.builds(lambda k: {"op": "commit", "group": k[0], "topic": "bad topic",
                                 "queue_id": k[1][1], "offset": 1}, key),
            st.just({"op": "teleport", "group": groups[0]}),
        ]
    return st.one_of(*parts)


#: Ledger time between lines: mostly small; some past a client timeout (1 s, 2 s, 120 s) or
#: the offset retention of the property ledgers (`OFFSETS_RETENTION_MS`); a few backwards
#: (ts = max(ts, last ts)).
steps = st.sampled_from([0, 0, 1, 10, 500, 1_000, 1_500, 60_000, 130_000, 4_000_000, -5])
OFFSETS_RETENTION_MS = 3_600_000


def _aim(model: ReferenceLedger, cmd: dict[str, Any], aim: int | None) -> dict[str, Any]:
    """Point a line at the state the earlier lines left (as the model has it), so that streams
    reach deep states: commits at or next to the committed and pulled offsets and MaxOffset
    (accepted, stale, one past it), truncations inside the queue's bounds. `aim` picks among
    them (None: the line as drawn)."""
    op = cmd["op"]
    q = model.queues.get((cmd.get("topic"), cmd.get("queue_id")))  # type: ignore[arg-type]
    if aim is None:
        return cmd
    if op == "queue_truncate" and q is not None:
        return {**cmd, "min_offset": q["min_offset"] + aim % (q["max_offset"] - q["min_offset"] + 1)}
    if op != "commit" or "generation" in cmd:
        return cmd
    key = (cmd["group"], cmd["topic"], cmd["queue_id"])
    client = cmd.get("client")
    if client is not None and model.is_broadcast(cmd["group"]):
        p = model.clients.get(key, {}).get(client, {})
    else:
        p = model.positions.get(key, {})
    near = [v for v in (p.get("committed"), p.get("pulled")) if v is not None]
    near += [v + 1 for v in near]
    if q is not None:
        near += [q["max_offset"], q["max_offset"] + 1]
    return {**cmd, "offset": near[aim % len(near)]} if near else cmd


def _timed_and_aimed(drawn: list[tuple[dict[str, Any], int, int | None]],
                     max_size: int) -> list[dict[str, Any]]:
    """The drawn lines in order, each with its `ts` (T0 plus the running sum of the steps) and
    aimed with the model at the state the lines before it left."""
    model = ReferenceLedger(offsets_retention_ms=OFFSETS_RETENTION_MS)
    lines: list[dict[str, Any]] = []
    ts = T0
    for cmd, step, aim in drawn[:max_size]:
        ts += step
        line = {**_aim(model, cmd, aim), "ts": ts}
        model.apply(line, T0)
        lines.append(line)
    return lines


def streams(*, max_size: int = 60, **kw: Any) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Lists of apply lines of `commands(**kw)`, each with its `ts`, aimed with the reference
    model. Lengths are uniform up to `max_size`: a flat hypothesis list averages about 6 lines,
    too few for a client to join a broadcast group late or a delete to race a commit."""
    drawn = st.tuples(commands(**kw), steps, st.none() | st.integers(0, 255))
    return st.integers(1, max_size).flatmap(
        lambda n: st.lists(drawn, min_size=n, max_size=n)).map(
        lambda d: _timed_and_aimed(d, max_size))
