"""The column-wise apply path (commands as an Arrow table) writes exactly the events, results and
state of the per-command path (commands as dicts), whatever the stream holds."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ledger.executor.batch as executor
import ledger.executor.columnar as columnar
from bench.workload import commands_table
from ledger import Ledger
from ledger.fold.state import State, snapshot_rows
from tests.support.clock import T0, FakeClock
from tests.support.oracle import assert_results, model_run
from tests.support.strategies import LINE_SCHEMA, OFFSETS_RETENTION_MS, property_settings, streams


def _run(root: Path, commands: object, **kw: object) -> tuple[list, pa.Table, list, list]:
    """Dicts run per command (the reference: the executor's column-wise fold is off), an Arrow
    table column-wise."""
    per_command = not isinstance(commands, pa.Table | pa.RecordBatch)
    column_min = executor.COLUMN_MIN
    executor.COLUMN_MIN = 10**12 if per_command else column_min
    try:
        with Ledger.open(root, backfill=True, clock=FakeClock(), segment_events_max=5_000, **kw) as led:
            results = list(led.apply(commands))  # type: ignore[arg-type]
            log = led.log.read()
            snapshot = led.snapshot()
            view = sorted(led.sql("SELECT * FROM offsets").to_pylist(),
                          key=lambda r: (r["consumer_group"], r["topic"], r["queue_id"]))
    finally:
        executor.COLUMN_MIN = column_min
    return results, log, snapshot, view


def _as_dicts(table: pa.Table) -> list[dict]:
    return [{k: v for k, v in row.items() if v is not None} for row in table.to_pylist()]


def _same(tmp_path: Path, table: pa.Table, **kw: object) -> list:
    by_dict = _run(tmp_path / "dicts", _as_dicts(table))
    by_column = _run(tmp_path / "columns", table, **kw)
    for name, a, b in zip(("results", "log", "snapshot", "view"), by_dict, by_column, strict=True):
        if name == "log":
            assert a.equals(b), _first_difference(a, b)
        else:
            assert a == b, name
    return by_column[0]


def _count_folds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(lines folded column-wise, lines) of every run `columnar.fold_run` folds from now on."""
    folded: list[tuple[int, int]] = []
    real = columnar.fold_run

    def counting(*args: object) -> object:
        run = real(*args)
        folded.append((run.vector_rows, len(run.results)))
        return run

    monkeypatch.setattr(columnar, "fold_run", counting)
    return folded


def _first_difference(a: pa.Table, b: pa.Table) -> str:
    rows_a, rows_b = a.to_pylist(), b.to_pylist()
    for i, (x, y) in enumerate(zip(rows_a, rows_b, strict=False)):
        if x != y:
            return f"event {i}: {x} != {y}"
    return f"{len(rows_a)} events != {len(rows_b)}"


@pytest.mark.parametrize(("seed", "batch"), [(1, 131_072), (2, 5_000), (3, 97)])
def test_generated_workload_folds_the_same_column_wise(tmp_path, seed, batch):
    table = commands_table(30_000, seed=seed, groups=8, topics=2, queues=3)
    results = _same(tmp_path, table, apply_column_batch_commands=batch)
    assert len(results) == table.num_rows
    assert [r["line"] for r in results] == list(range(1, table.num_rows + 1))


def test_most_lines_fold_column_wise(tmp_path, monkeypatch):
    """Not a timing test: the vector path must actually take the common case."""
    folded = _count_folds(monkeypatch)
    table = commands_table(60_000, seed=4, groups=20, topics=2, queues=4)
    with Ledger.open(tmp_path, backfill=True, clock=FakeClock()) as led:
        assert sum(1 for _ in led.apply(table)) == table.num_rows
    vector, total = map(sum, zip(*folded, strict=True))
    assert vector > 0.8 * total


def test_refusals_and_errors_match_and_append_nothing(tmp_path):
    lines = [
        {"op": "queue_append", "topic": "t", "queue_id": 0, "count": 100, "ts": T0},
        {"op": "pull", "group": "g", "topic": "t", "queue_id": 0, "client": "c", "max": 10,
         "ts": T0},  # the first pull starts at MaxOffset (policy latest): 100
        {"op": "queue_append", "topic": "t", "queue_id": 0, "count": 100, "ts": T0},
        {"op": "commit", "group": "g", "topic": "t", "queue_id": 0, "client": "c", "offset": 108,
         "ts": T0 + 1},
        {"op": "commit", "group": "g", "topic": "t", "queue_id": 0, "client": "c", "offset": 105,
         "ts": T0 + 2},  # stale
        {"op": "commit", "group": "g", "topic": "t", "queue_id": 0, "client": "c", "offset": 500,
         "ts": T0 + 3},  # above MaxOffset: invalid
        {"op": "commit", "group": "bad name", "topic": "t", "queue_id": 0, "offset": 9,
         "ts": T0 + 4},
        {"op": "pull", "group": "g", "topic": "t", "queue_id": -1, "client": "c", "ts": T0 + 5},
        {"op": "nope", "ts": T0 + 6},
        {"op": "pull", "group": "g", "topic": "t", "queue_id": 0, "client": "c", "max": 10,
         "ts": T0 + 7},
    ]
    table = pa.Table.from_pylist(lines * 3, schema=LINE_SCHEMA)
    results = _same(tmp_path, table)
    assert [r.get("reason") for r in results[3:6]] == [None, "stale", "invalid"]
    assert [r["offset"] for r in results[3:6]] == [108, 108, 108]
    assert "seq" in results[3] and "seq" not in results[4] and "seq" not in results[5]
    assert results[6]["error"].startswith("invalid group 'bad name'")
    assert results[7]["error"].startswith("invalid queue id -1")
    assert results[8]["error"].startswith("unknown op 'nope'")
    assert results[9]["next_offset"] == 108 and results[9]["count"] == 10  # from the commit
    # the second round: the key is known now and folds column-wise, with the same answers
    assert [r.get("reason") for r in results[13:16]] == [None, "stale", "invalid"]


def test_out_of_order_ts_and_lines_without_ts(tmp_path):
    lines = [
        {"op": "queue_append", "topic": "t", "queue_id": 0, "count": 100, "ts": T0 + 50},
        {"op": "pull", "group": "g", "topic": "t", "queue_id": 0, "client": "c", "ts": T0 + 60},
        {"op": "commit", "group": "g", "topic": "t", "queue_id": 0, "offset": 3, "ts": T0 + 10},
        {"op": "commit", "group": "g", "topic": "t", "queue_id": 0, "offset": 4},
        {"op": "commit", "group": "g", "topic": "t", "queue_id": 0, "offset": 1, "ts": T0 + 99},
        {"op": "pull", "group": "g", "topic": "t", "queue_id": 0, "client": "c", "ts": T0 + 70},
    ]
    _same(tmp_path, pa.Table.from_pylist(lines * 4, schema=LINE_SCHEMA))


def test_dictionary_columns_and_record_batches(tmp_path):
    table = commands_table(5_000, seed=5, groups=4, topics=2, queues=2)
    plain = table.cast(pa.schema([
        pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type)
        for f in table.schema]))
    by_dict = _run(tmp_path / "dict-encoded", table)
    by_plain = _run(tmp_path / "plain", plain)
    by_batch = _run(tmp_path / "batch", plain.combine_chunks().to_batches()[0])
    assert by_dict[0] == by_plain[0] == by_batch[0]
    assert by_dict[1].equals(by_plain[1]) and by_dict[1].equals(by_batch[1])


@property_settings(share=0.5)
@given(lines=streams(max_size=60, topics=("t",)), batch=st.sampled_from([3, 16, 4096]),
       no_ts=st.booleans())
def test_random_streams_fold_the_same_column_wise(tmp_path_factory, lines, batch, no_ts):
    """The column-wise fold writes the very log (every column, `detail` too) of the per-command
    one; both answer as the reference model does."""
    tmp = tmp_path_factory.mktemp("columnar")
    rows = [{k: v for k, v in line.items() if not (k == "ts" and no_ts and i % 3 == 0)}
            for i, line in enumerate(lines)]  # some lines take the (fixed) clock instead
    table = pa.Table.from_pylist(rows, schema=LINE_SCHEMA)
    by_dict = _run(tmp / "dicts", _as_dicts(table), offsets_retention_ms=OFFSETS_RETENTION_MS)
    by_column = _run(tmp / "columns", table, offsets_retention_ms=OFFSETS_RETENTION_MS,
                     apply_column_batch_commands=batch)
    assert by_dict[0] == by_column[0]
    assert by_dict[1].equals(by_column[1]), _first_difference(by_dict[1], by_column[1])
    assert by_dict[2:] == by_column[2:]
    _, want = model_run(rows, clock_ms=T0, offsets_retention_ms=OFFSETS_RETENTION_MS)
    assert_results(by_column[0], want, rows, "columns")


def test_apply_arrow_returns_the_same_results_as_a_table(tmp_path):
    from ledger.executor.run_results import RESULT_SCHEMA, results_table

    table = commands_table(20_000, seed=6, groups=6, topics=2, queues=3)
    dicts = _run(tmp_path / "dicts", _as_dicts(table))
    with Ledger.open(tmp_path / "arrow", backfill=True, clock=FakeClock(), segment_events_max=5_000) as led:
        got = led.apply_arrow(table)
        log = led.log.read()
    assert got.schema == RESULT_SCHEMA
    assert got.equals(results_table(dicts[0]))
    assert log.equals(dicts[1])
    assert got.column("line").to_pylist() == list(range(1, table.num_rows + 1))
    seqs = [s for s in got.column("seq").to_pylist() if s is not None]
    assert seqs == sorted(seqs) and seqs[-1] == log.num_rows - 1
    # other fields of a line's result (a queue's bounds here) are kept in `detail`
    appends = got.filter(pa.compute.equal(got.column("op"), "queue_append"))
    assert appends.num_rows > 0
    assert all('"max_offset"' in d for d in appends.column("detail").to_pylist())


def test_apply_arrow_refuses_dicts(tmp_path):
    from ledger import InvalidInput

    with Ledger.open(tmp_path, clock=FakeClock()) as led, pytest.raises(InvalidInput, match="list"):
        led.apply_arrow([{"op": "pull"}])  # type: ignore[arg-type]


def _fold_of_log(led: Ledger, seq_to: int | None = None) -> State:
    state = State()
    state.apply_columns(led.log.read(seq_gte=0, seq_lt=seq_to).to_pydict())
    return state


def test_checkpoints_written_mid_apply_hold_the_state_at_their_seq(tmp_path):
    """Positions folded column-wise are written back lazily: every checkpoint must still be the
    exact state at its seq."""
    from ledger.store.checkpoint import table_to_state

    table = commands_table(40_000, seed=8, groups=10, topics=2, queues=3)
    seen: set[int] = set()
    with Ledger.open(tmp_path, backfill=True, clock=FakeClock(), segment_events_max=3_000,
                     checkpoint_interval_events=2_000, apply_column_batch_commands=2_500) as led:
        for start in range(0, table.num_rows, 10_000):  # the log keeps the latest checkpoints
            led.apply_arrow(table.slice(start, 10_000))
            seen.update(led.log.checkpoints())
            for seq in led.log.checkpoints():
                saved = table_to_state(led.log.read_checkpoint(seq))
                replayed = _fold_of_log(led, seq)
                assert saved.positions == replayed.positions, seq
                assert saved.queues == replayed.queues, seq
    assert len(seen) >= 8


def test_segments_sealed_in_the_background_get_their_checkpoint_and_close_lists_the_last(
        tmp_path):
    """The ledger seals on the log's sealer thread: each seal is listed by a later append (or
    close), which writes the checkpoint at that point; nothing is left for the next open."""
    table = commands_table(20_000, seed=9, groups=10, topics=2, queues=3)
    with Ledger.open(tmp_path, backfill=True, clock=FakeClock(), segment_events_max=3_000,
                     checkpoint_interval_events=10**9, apply_column_batch_commands=2_500) as led:
        assert led.log.settings.seal_in_background
        led.apply_arrow(table)
        end = led.log.next_seq
    with Ledger.open(tmp_path, backfill=True, clock=FakeClock()) as again:
        assert again.log.recovery.sealed == () and again.log.recovery.files_deleted == ()
        segments = again.log.segments()
        assert [s.end_seq - s.base_seq for s in segments] == [3_000] * (end // 3_000)
        # every seal got a checkpoint within two appends (the log keeps the latest checkpoints)
        cps = again.log.checkpoints()
        for s in (s for s in segments if s.end_seq >= cps[0]):
            assert any(s.end_seq <= c <= s.end_seq + 6_000 for c in cps), (s.end_seq, cps)
        assert cps[-1] >= segments[-1].end_seq
        assert again.snapshot() == _run(tmp_path / "dicts", _as_dicts(table))[2]


def test_a_read_lists_a_background_seal_and_the_next_append_checkpoints_at_it(tmp_path):
    """A seal finished in the background is listed by the next read too (state_at, SQL), so
    reads scan Parquet, not a segment's worth of WAL rows; the checkpoint follows at the next
    append (a read may come in the middle of an apply)."""
    table = commands_table(12_000, seed=9, groups=10, topics=2, queues=3)
    with Ledger.open(tmp_path, backfill=True, clock=FakeClock(), segment_events_max=5_000,
                     checkpoint_interval_events=10**9) as led:
        led.apply_arrow(table.slice(0, 10_000))
        listed = [s.end_seq for s in led.log.segments()]
        assert led.log.tail().num_rows >= 5_000  # a full segment still sealing
        cps = led.log.checkpoints()
        led.state_at(seq=led.log.next_seq)
        after = led.log.segments()
        assert len(after) > len(listed) and {s.events for s in after} == {5_000}
        assert led.log.tail().num_rows < 5_000
        assert after[-1].end_seq + led.log.tail().num_rows == led.log.next_seq
        assert led.log.checkpoints() == cps  # none written by the read
        led.apply_arrow(table.slice(10_000, 10))
        assert led.log.checkpoints()[-1] == led.log.next_seq


def test_state_between_yielded_batches_is_current(tmp_path):
    """`apply` yields a batch's results once durable; the caller may read the state then."""
    table = commands_table(20_000, seed=9, groups=6, topics=2, queues=3)
    with Ledger.open(tmp_path, backfill=True, clock=FakeClock(), apply_column_batch_commands=1_500) as led:
        checked = 0
        for result in led.apply(table):
            if result["line"] % 1_500 == 0:
                folded = _fold_of_log(led)
                assert led.state.positions == folded.positions, result["line"]
                assert led.snapshot() == snapshot_rows(folded, led.now_ms())
                checked += 1
        assert checked == 20_000 // 1_500


def test_first_pulls_of_new_keys_fold_column_wise_with_their_initial_event(tmp_path, monkeypatch):
    """A new key's first pull writes `initial` (policy latest: MaxOffset at that line; earliest:
    MinOffset) then the pull, as the per-command path does."""
    setup = [
        *[{"op": "group_set", "group": f"early-{i}", "initial": "earliest", "ts": T0}
          for i in (1, 3, 5)],
        {"op": "queue_append", "topic": "t", "queue_id": 0, "count": 50, "ts": T0},
        {"op": "queue_append", "topic": "t", "queue_id": 1, "count": 70, "ts": T0},
        {"op": "queue_truncate", "topic": "t", "queue_id": 1, "min_offset": 20, "ts": T0},
    ]
    lines = []
    for i, group in enumerate(["late", "early"] * 3):
        q = i % 2
        lines += [
            {"op": "queue_append", "topic": "t", "queue_id": q, "count": 5, "ts": T0 + 10 * i},
            {"op": "pull", "group": f"{group}-{i}", "topic": "t", "queue_id": q, "client": "c",
             "max": 8, "ts": T0 + 10 * i + 1},
            {"op": "commit", "group": f"{group}-{i}", "topic": "t", "queue_id": q, "client": "c",
             "offset": 1_000, "ts": T0 + 10 * i + 2},  # above MaxOffset: refused
            {"op": "pull", "group": f"{group}-{i}", "topic": "t", "queue_id": q, "client": "c",
             "max": 8, "ts": T0 + 10 * i + 3},
        ]
    results = []
    for name, how in (("dicts", "dicts"), ("columns", "columns")):
        folded = _count_folds(monkeypatch)
        with Ledger.open(tmp_path / name, backfill=True, clock=FakeClock()) as led:
            list(led.apply(_as_dicts(pa.Table.from_pylist(setup, schema=LINE_SCHEMA))))
            table = pa.Table.from_pylist(lines, schema=LINE_SCHEMA)
            out = list(led.apply(_as_dicts(table) if how == "dicts" else table))
            results.append((out, led.log.read(), led.snapshot()))
        monkeypatch.undo()
        if how == "columns":
            assert sum(v for v, _ in folded) == 24  # every pull, commit and append
    (a_out, a_log, a_snap), (b_out, b_log, b_snap) = results
    assert a_out == b_out and a_snap == b_snap
    assert a_log.equals(b_log), _first_difference(a_log, b_log)
    initial = b_log.filter(pa.compute.equal(b_log.column("kind"), "initial")).to_pylist()
    assert [(e["consumer_group"], e["offset"], e["detail"]) for e in initial] == [
        ("late-0", 55, "policy latest"), ("early-1", 20, "policy earliest"),
        ("late-2", 60, "policy latest"), ("early-3", 20, "policy earliest"),
        ("late-4", 65, "policy latest"), ("early-5", 20, "policy earliest")]


@pytest.mark.parametrize("values", [
    [], [5], [3, 1, 3, 0, 1, 3], list(range(50, 0, -1)) * 3,
    [2**61, 1, 2**61, 0],  # too large for value * n + index: the stable sort itself
    [-1, 2, -1, 0],  # negative: the same
])
def test_stable_order_is_a_stable_argsort(values):
    import numpy as np

    a = np.asarray(values, np.int64)
    assert columnar.stable_order(a).tolist() == np.argsort(a, kind="stable").tolist()


def test_commit_only_feeds_fold_column_wise_and_the_same(tmp_path, monkeypatch):
    """A broker's or importer's feed: commits only, on keys never pulled and queues whose
    bounds are unknown, keys first seen by a commit; then the queues get messages, some keys
    get pulled, and a few commits are stale or above MaxOffset."""
    from bench.feeds import commits_table

    feed = commits_table(30_000, seed=5, shape=_small_shape())
    later = pa.Table.from_pylist(
        [{"op": "queue_append", "topic": "topic-00", "queue_id": q, "count": 5000,
          "ts": T0 + 10**6} for q in range(2)]
        + [{"op": "pull", "group": "GID_app-001", "topic": "topic-00", "queue_id": q,
            "client": "c9", "ts": T0 + 10**6 + 1} for q in range(2)]
        + [{"op": "commit", "group": "GID_app-001", "topic": "topic-00", "queue_id": q,
            "offset": o, "client": "c9", "ts": T0 + 10**6 + 2} for q in range(2)
           for o in (1, 4999, 6000)], schema=LINE_SCHEMA)
    rows = [{k: v for k, v in r.items()} for r in feed.cast(pa.schema(
        [(f.name, pa.string() if pa.types.is_dictionary(f.type) else f.type)
         for f in feed.schema])).to_pylist()]
    table = pa.concat_tables([pa.Table.from_pylist(rows, schema=LINE_SCHEMA), later])
    folded = _count_folds(monkeypatch)
    # the feed is one batch: a queue's first messages would pin its keys for their whole run
    results = _same(tmp_path, table, apply_column_batch_commands=feed.num_rows)
    vector, total = map(sum, zip(*folded, strict=True))
    assert vector > 0.9 * feed.num_rows
    tail = results[feed.num_rows:]
    assert [r.get("reason") for r in tail if r["op"] == "commit"].count("invalid") == 2


def _small_shape():
    from bench.workload import Shape

    return Shape(groups=8, topics=2, queues=3)
