"""Events folded a slice at a time (ledger/store/replay.py: a reader's catch-up, an open's
replay of the tail, verify) give the state of folding them all at once, whatever the slices."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from ledger import Ledger
from ledger.fold.events import EVENT_SCHEMA
from ledger.fold.state import State
from ledger.store import replay
from ledger.store.checkpoint import state_to_table
from tests.spark.conftest import random_ledger


@pytest.mark.parametrize("seed", [3, 11])
def test_any_slicing_folds_the_state_of_one_fold(tmp_path: Path, seed: int) -> None:
    random_ledger(tmp_path / "l", seed, commands=400)
    with Ledger.open(tmp_path / "l", readonly=True) as led:
        events = led.log.read()
    whole = State()
    whole.apply_columns(events.to_pydict())
    expected = state_to_table(whole)
    assert events.num_rows > 400
    for size in (1, 7, 64, events.num_rows - 1, events.num_rows, 10**6):
        state = State()
        replay.fold_events(state, events, size)
        assert state_to_table(state).equals(expected), size


def test_a_reader_catches_up_and_an_open_replays_in_slices(tmp_path: Path) -> None:
    # slices of 5 events: the reader's catch-up of a few hundred events and the open's replay
    # of the tail take many slices, and both end where the writer is
    with mock.patch.object(replay, "REPLAY_SLICE_EVENTS", 5):
        root = tmp_path / "l"
        with Ledger.open(root) as writer:
            list(writer.apply([{"op": "queue_append", "topic": "t", "queue_id": q,
                                "count": 100} for q in range(4)]))
            with Ledger.open(root, readonly=True) as reader:
                for i in range(1, 60):
                    list(writer.apply([{"op": "commit", "group": f"g{i % 3}", "topic": "t",
                                        "queue_id": i % 4, "offset": i}]))
                assert reader.catch_up() == 59
                assert reader.state.positions == writer.state.positions
            expected = state_to_table(writer.state)
        with Ledger.open(root, readonly=True) as reopened:
            assert state_to_table(reopened.state).equals(expected)


def test_a_slice_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="slice_events must be positive, got 0"):
        replay.fold_events(State(), EVENT_SCHEMA.empty_table(), 0)
