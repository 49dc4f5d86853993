"""Every baseline stores the same rows and gives the same state-at-T answer as the dict fold."""

from __future__ import annotations

import pytest

from bench import workload
from bench.baselines import common, dict_fold, duckdb_store, parquet_plain, sqlite_store


@pytest.fixture(scope="module")
def events() -> common.EventRows:
    rows = common.events_from_commands(workload.commands_table(5000))
    assert not rows.anomalies
    return rows


@pytest.fixture(scope="module")
def busy_events() -> common.EventRows:
    """Few keys, many commands each: resets and truncations inside the stream."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(workload, "P_RESET", 1e-3)
        mp.setattr(workload, "P_REBALANCE", 5e-4)
        mp.setattr(workload, "EPOCH_SLOTS", 4096)
        table = workload.commands_table(30_000, 11, groups=3, topics=2, queues=2)
    rows = common.events_from_commands(table)
    assert not rows.anomalies
    kinds = set(rows.table.column("kind").to_pylist())
    assert {"reset", "initial", "pull", "commit", "queue_append"} <= kinds
    return rows


def test_rows_per_batch_cover_every_event(events: common.EventRows) -> None:
    batches = list(events.batches(1000))
    assert sum(b.num_rows for b in batches) == events.n_events
    assert len(batches) == 5
    seq = events.table.column("seq").to_pylist()
    assert seq == list(range(events.n_events))


@pytest.mark.parametrize("fixture", ["events", "busy_events"])
def test_state_at_t_agrees(fixture: str, request, tmp_path) -> None:
    ev: common.EventRows = request.getfixturevalue(fixture)
    times = [ev.time_at(f) for f in (0.0, 0.3, 0.7, 1.0)]
    expected = [dict_fold.state_at(ev, t) for t in times]
    assert all(expected[1:])
    by_sqlite = sqlite_store.state_answers(ev, tmp_path, times)
    by_duckdb = duckdb_store.state_answers(ev, tmp_path, times)
    for want, sq, dd in zip(expected, by_sqlite, by_duckdb, strict=True):
        assert sq["group_by"] == want
        assert sq["seek"] == want
        assert sq["seek_loop"] == want
        assert dd == want


def test_sqlite_figures_and_plans(events: common.EventRows, tmp_path) -> None:
    f = sqlite_store.run(events, tmp_path, repeat=1, lookups_n=200)
    assert f["state_at_T_agree"] is True
    assert f["ingest_plain"]["transactions"] == 1 and f["ingest_indexed"]["commands_per_s"] > 0
    assert any("SCAN history" in p for p in f["plan_group_by"])
    assert any("COVERING INDEX history_key_ts" in p for p in f["plan_seek"])
    assert not any("TEMP B-TREE" in p for p in f["plan_seek"] + f["plan_seek_one"])
    assert f["bytes_per_event_indexed"] > f["bytes_per_event_plain"] > 0
    assert f["lookup"]["p99_us"]["median"] >= f["lookup"]["p50_us"]["median"] > 0
    assert not list(tmp_path.glob("*.db*"))


def test_duckdb_parquet_and_fold_figures(events: common.EventRows, tmp_path) -> None:
    d = duckdb_store.run(events, tmp_path, repeat=1, lookups_n=50)
    assert d["ingest"]["commands_per_s"] > 0 and d["bytes_per_event"] > 0
    assert d["state_at_T_keys"] == len(dict_fold.state_at(events, events.time_at(0.5)))
    p = parquet_plain.run(events, tmp_path, repeat=1)
    assert p["zstd"]["bytes_per_event"] > 0 and p["bytes_per_event"] > 0
    f = dict_fold.run(events, repeat=1)
    assert f["events_per_s"] > 0 and f["events"] == events.n_events


def test_events_cache_round_trips(tmp_path) -> None:
    path = workload.ensure_file(3000, 5, data_dir=tmp_path)
    first = common.ensure_events(path)
    again = common.ensure_events(path)
    assert again.table.equals(first.table)
    assert (again.cmd_index == first.cmd_index).all()
    assert again.n_commands == first.n_commands == 3000
