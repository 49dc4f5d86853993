"""The injected clock of every test (TigerBeetle: time is stubbed, never read)."""

from __future__ import annotations

T0 = 1_763_600_000_000  # 2025-11-20T00:53:20Z, a fixed epoch-ms start for every test


class FakeClock:
    """Epoch ms that tests move explicitly; a `clock=` for `Ledger.open` and `SegmentedLog.open`."""

    def __init__(self, start_ms: int = T0) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now
