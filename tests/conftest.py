"""Shared fixtures: a fake clock and a ledger in a temporary data directory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledger import Ledger
from tests.support.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ledger(tmp_path, clock) -> Iterator[Ledger]:
    with Ledger.open(tmp_path / "data", clock=clock) as led:
        yield led
