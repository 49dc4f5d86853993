"""The server bench says what the writer published during a fixed-rate window (a seal's or a
checkpoint's publication holds the writer thread tens of ms): `published` reads it from the
data directory's manifest, as any reader does."""

from __future__ import annotations

from pathlib import Path

from bench.server_bench import fixed_line, published
from ledger import Ledger


def test_published_names_the_seals_and_checkpoints_a_writer_listed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert published(data) == {"seals": set(), "checkpoints": set()}  # no log yet
    with Ledger.open(data, segment_events_max=10) as led:
        led.commit("g", "t", 0, 1)
        before = published(data)
        for offset in range(2, 26):
            led.commit("g", "t", 0, offset)
        led.log.settle()
        led.log.checkpoints()  # waits for the one the checkpoint thread may still write
        after = published(data)
    assert before == {"seals": set(), "checkpoints": set()}
    assert after["seals"] == {0, 10}  # two segments of 10 events sealed since
    assert after["checkpoints"] and min(after["checkpoints"]) >= 10


def test_the_summary_line_says_what_the_window_published() -> None:
    run = {"p50_ms": 1.0, "p99_ms": 9.0, "max_ms": 20.0, "server_cpu_us_per_req": 450.0,
           "server": {}, "published": {"seals": 1, "checkpoints": 2}}
    assert fixed_line("after the batched run", run).endswith(
        "published in the window: 1 seal, 2 checkpoints")
