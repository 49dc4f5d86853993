"""Shared fixtures: a fake clock and a ledger in a temporary data directory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledger import Ledger

T0 = 1_763_600_000_000  # 2025-11-20T00:53:20Z, a fixed epoch-ms start for every test


class FakeClock:
    """Injected time: tests move it explicitly."""

    def __init__(self, start_ms: int = T0) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ledger(tmp_path, clock) -> Iterator[Ledger]:
    with Ledger.open(tmp_path / "data", clock=clock) as led:
        yield led
