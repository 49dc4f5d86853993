"""Positions as columns (ledger/fold/position.py): whatever reads many keys (a checkpoint, a view
flush) takes whole columns by rows and reads no Position; what it took does not change as the
state moves on; handles stay right as the table grows; a checkpoint loads back equal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import Commit, GroupSet, Ledger, Pull, QueueAppend
from ledger.fold.position import Position, PositionTable
from ledger.store.checkpoint import state_to_table, table_to_state
from tests.support.clock import FakeClock


def _commands(n_keys: int, group: str = "g") -> list:
    out: list = [GroupSet(group="b", mode="broadcast"), GroupSet(group=group, initial="earliest")]
    for q in range(n_keys):
        out += [QueueAppend(topic="t", queue_id=q, count=50),
                Pull(group=group, topic="t", queue_id=q, client=f"c{q % 3}"),
                Commit(group=group, topic="t", queue_id=q, offset=q % 50, client=f"c{q % 3}")]
    out += [Pull(group="b", topic="t", queue_id=0, client="x"),
            Commit(group="b", topic="t", queue_id=0, offset=4, client="x")]
    return out


def test_a_checkpoint_and_a_view_flush_read_no_position(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with Ledger.open(tmp_path, clock=FakeClock()) as led:
        led.submit(_commands(40))
        state = led.state
        want = state_to_table(state)
        for name in ("committed", "pulled", "generation", "pending", "expired", "last_client",
                     "last_pull_ts", "last_active_ts", "last_update_ts", "client_generations"):
            def refuse(self: Position, name: str = name) -> None:
                raise AssertionError(f"{name} of a Position read one key at a time")

            monkeypatch.setattr(Position, name, property(refuse))
        assert state_to_table(state).equals(want)
        led.writer.flush_view()  # the touched rows, taken by rows
        monkeypatch.undo()
        got = led.sql("SELECT consumer_group, queue_id, committed_offset FROM offsets "
                      "WHERE consumer_group = 'g' ORDER BY queue_id").to_pylist()
        assert [(r["queue_id"], r["committed_offset"]) for r in got] == [
            (q, q % 50) for q in range(40)]


def test_what_a_checkpoint_took_stays_as_the_state_moves_on(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, clock=FakeClock()) as led:
        led.submit(_commands(20))
        taken = state_to_table(led.state)
        copy = pa.Table.from_pylist(taken.to_pylist(), schema=taken.schema)
        led.submit([Commit(group="g", topic="t", queue_id=q, offset=49) for q in range(20)])
        led.submit(_commands(3000, "h"))  # the table grows several times over
        assert taken.equals(copy)
        assert led.state.positions[("g", "t", 0)].committed == 49
        assert led.state.positions[("h", "t", 2999)].committed == 2999 % 50


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.one_of(st.none(), st.integers(0, 2**62)),
                          st.one_of(st.none(), st.sampled_from(["a", "b", "c"])), st.booleans()),
                min_size=1, max_size=60))
def test_handles_read_what_they_wrote_across_growth(writes: list) -> None:
    table = PositionTable(1)
    handles: list[Position] = []
    want: dict[int, tuple] = {}
    for row, offset, client, flag in writes:
        while len(handles) <= row:
            handles.append(Position(table, table.add()))
        pos = handles[row]
        pos.committed, pos.last_client, pos.pending = offset, client, flag
        pos.client_generations[client or "-"] = row
        want[row] = (offset, client, flag)
    for row, (offset, client, flag) in want.items():
        pos = handles[row]
        assert (pos.committed, pos.last_client, pos.pending) == (offset, client, flag)
        assert pos.client_generations[client or "-"] == row
    fresh = [h for i, h in enumerate(handles) if i not in want]
    assert all(h == Position.detached() for h in fresh)  # defaults, equal by fields


def test_a_checkpoint_loads_back_equal_with_its_keys(tmp_path: Path) -> None:
    with Ledger.open(tmp_path, clock=FakeClock()) as led:
        led.submit(_commands(30))
        state = led.state
        loaded = table_to_state(state_to_table(state))
        assert loaded.positions == state.positions
        assert loaded.clients == state.clients
        assert [loaded.table.key_of(p.row) for p in loaded.positions.values()] == list(
            state.positions)
        assert state_to_table(loaded).equals(state_to_table(state))


_CLIENTS = st.text(st.characters(codec="utf-8"), max_size=6)  # quotes, newlines, emoji too


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(_CLIENTS, st.integers(-(2**63), 2**63 - 1), max_size=3),
                max_size=40), st.data())
def test_generations_are_each_rows_own_json(generations: list, data: st.DataObject) -> None:
    """A checkpoint's client generations (one msgspec call for all rows, cut at its newlines)
    are each row's own encoding, null where a row has none, for all rows or some."""
    import msgspec

    from ledger.store.positions import generations_json

    table = PositionTable(1)
    for i, gens in enumerate(generations):
        table.add()
        table.generations[i] = gens
    rows = data.draw(st.one_of(st.none(), st.lists(
        st.integers(0, max(len(generations) - 1, 0)), max_size=len(generations))))
    if rows is not None:
        rows = sorted(rows) if generations else []
    picked = generations if rows is None else [generations[r] for r in rows]
    want = [msgspec.json.encode(g).decode() if g else None for g in picked]
    got = generations_json(table, None if rows is None else np.array(rows, np.int64))
    assert got.to_pylist() == want
