"""A state's positions are out of the cyclic collector's sight: with 160,000 keys a full
collection would walk them all (tens of milliseconds, every thread stopped)."""

from __future__ import annotations

import gc
from pathlib import Path

from ledger import Commit, GroupSet, Ledger, Pull


def test_positions_of_groups_and_broadcast_clients_are_not_tracked(tmp_path: Path) -> None:
    with Ledger.open(tmp_path) as led:
        led.submit([GroupSet(group="b", mode="broadcast"),
                    *(Commit(group="g", topic="t", queue_id=q, offset=3) for q in range(4)),
                    Pull(group="b", topic="t", queue_id=0, client="c1")])
        positions = [*led.state.positions.values(),
                     *(p for per in led.state.clients.values() for p in per.values())]
        assert len(positions) >= 5 and led.state.clients
        assert not any(gc.is_tracked(p) for p in positions)
        assert not any(gc.is_tracked(p.client_generations) for p in positions)
