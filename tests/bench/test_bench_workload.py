"""The bench workload is pinned (same stream per seed) and valid against the ledger's rules."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import workload
from bench.baselines.common import events_from_commands

NAME = re.compile(r"[A-Za-z0-9._%|-]{1,249}")
SMALL = {"groups": 3, "topics": 2, "queues": 2}  # many commands per key
#: Rare kinds made frequent, to exercise the generator's per-key paths in small streams.
BOOST = {"P_RESET": 1e-3, "P_REBALANCE": 5e-4, "TRUNCATES_PER_EPOCH": 3.0, "EPOCH_SLOTS": 4096}


@contextmanager
def boosted() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for name, value in BOOST.items():
            mp.setattr(workload, name, value)
        yield


def _plain(table: pa.Table) -> list[dict]:
    cols = [c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c for c in table.columns]
    return pa.table(cols, names=table.column_names).to_pylist()


def check_stream(cmds: list[dict]) -> Counter[str]:
    """Invariants checked from the commands alone; returns the op mix."""
    max_off: dict[tuple, int] = {}
    min_off: dict[tuple, int] = {}
    last_commit: dict[tuple, int] = {}
    last_ts = 0
    ops: Counter[str] = Counter()
    for d in cmds:
        ops[d["op"]] += 1
        assert d["ts"] >= last_ts
        last_ts = d["ts"]
        for f in ("group", "topic", "client"):
            if f in d:
                assert NAME.fullmatch(d[f]), d
        q = (d.get("topic"), d.get("queue_id"))
        if d["op"] == "queue_append":
            assert d["count"] >= 1
            max_off[q] = max_off.get(q, 0) + d["count"]
        elif d["op"] == "queue_truncate":
            assert min_off.get(q, 0) < d["min_offset"] <= max_off[q]
            min_off[q] = d["min_offset"]
        elif d["op"] == "commit":
            k = (d["group"], d["topic"], d["queue_id"], d["client"])
            assert d["offset"] <= max_off[q], d
            # Increase-only per key: commits only go down through a reset.
            key = k[:3] if not d["group"].startswith("GID_bcast") else k
            assert d["offset"] > last_commit.get(key, -1), d
            last_commit[key] = d["offset"]
        elif d["op"] == "reset":
            assert d["execute"] is True
            assert ("to_datetime" in d) != ("shift_by" in d)
            last_commit.pop((d["group"], d["topic"], d["queue_id"]), None)
        elif d["op"] == "pull":
            assert d["max"] == workload.PULL_MAX
    return ops


def test_deterministic_per_seed_and_prefix_stable() -> None:
    a = list(workload.generate(3000, seed=7))
    assert a == list(workload.generate(3000, seed=7))
    assert a != list(workload.generate(3000, seed=8))
    assert list(workload.generate(1234, seed=7)) == a[:1234]
    assert len(a) == 3000


def test_default_stream_is_valid() -> None:
    cmds = list(workload.generate(40_000))
    ops = check_stream(cmds)
    assert ops["commit"] > 0.5 * len(cmds)  # the bulk, though first pulls are many this early
    assert ops["group_set"] == 200
    broadcast = [d for d in cmds if d["op"] == "group_set" and d["mode"] == "broadcast"]
    assert len(broadcast) == 1
    clients = {d["client"] for d in cmds if "client" in d}
    assert len(clients) <= 800
    rows = events_from_commands(workload.commands_table(40_000))
    assert not rows.anomalies, rows.anomalies


def test_rare_kinds_stay_valid() -> None:
    with boosted():
        cmds = list(workload.generate(60_000, **SMALL))
        table = workload.commands_table(60_000, **SMALL)
    ops = check_stream(cmds)
    assert ops["reset"] >= 10 and ops["queue_truncate"] >= 3
    owners: dict[tuple, set[str]] = {}
    for d in cmds:
        if d["op"] == "commit":
            owners.setdefault((d["group"], d["topic"], d["queue_id"]), set()).add(d["client"])
    assert any(len(v) > 1 for k, v in owners.items() if not k[0].startswith("GID_bcast"))
    rows = events_from_commands(table)
    assert not rows.anomalies, rows.anomalies
    kinds = Counter(rows.table.column("kind").to_pylist())
    assert kinds["reset"] == ops["reset"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 20_000),
    groups=st.integers(2, 40),
    topics=st.integers(1, 4),
    queues=st.integers(1, 4),
    boost=st.booleans(),
)
def test_valid_for_any_seed_and_shape(seed: int, n: int, groups: int, topics: int,
                                      queues: int, boost: bool) -> None:
    with boosted() if boost else nullcontext():
        table = workload.commands_table(n, seed, groups, topics, queues)
    assert table.num_rows == n
    rows = events_from_commands(table)
    assert not rows.anomalies, rows.anomalies


def test_files_ndjson_dicts_and_columns_agree(tmp_path) -> None:
    n = 6000
    path = workload.ensure_file(n, 3, data_dir=tmp_path, **SMALL)
    mtime = path.stat().st_mtime_ns
    assert workload.ensure_file(n, 3, data_dir=tmp_path, **SMALL) == path
    assert path.stat().st_mtime_ns == mtime  # reused, not rewritten
    lines = path.read_text().splitlines()
    dicts = list(workload.generate(n, 3, **SMALL))
    assert [json.loads(x) for x in lines] == dicts
    assert all(" " not in x for x in lines)
    twin = workload.load_arrow(path)
    parsed = workload.read_ndjson_arrow(path)
    assert twin.schema.equals(workload.COMMAND_SCHEMA)
    assert _plain(twin) == _plain(parsed) == _plain(workload.commands_table(n, 3, **SMALL))
    first = _plain(twin)[dicts.index(next(d for d in dicts if d["op"] == "commit"))]
    assert first["op"] == "commit" and first["count"] is None


def test_bad_shape_is_refused() -> None:
    with pytest.raises(ValueError):
        next(workload.generate(10, groups=1))
