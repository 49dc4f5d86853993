"""Parquet storage reference: the same event rows written with pyarrow.parquet.

Why: sealed segments are Parquet; this says what the rows cost at rest with no tuning at all
(pyarrow defaults: snappy, dictionary encoding) and with zstd, so the sealed-segment settings
(zstd, dictionary strings, delta-encoded ints) have a floor and a reference to beat.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq

from bench.baselines.common import EventRows, timings

VARIANTS: dict[str, dict] = {
    "defaults": {},
    "zstd": {"compression": "zstd"},
}


def run(events: EventRows, workdir: Path, repeat: int = 3, keep: bool = False) -> dict:
    """Bytes per event and write/read times per variant."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    n = max(1, events.n_events)
    out: dict = {"events": events.n_events, "commands": events.n_commands}
    for name, kwargs in VARIANTS.items():
        path = workdir / f"events-{name}.parquet"
        t_write, _ = timings(lambda p=path, kw=kwargs: pq.write_table(events.table, p, **kw),
                             repeat)
        t_read, _ = timings(lambda p=path: pq.read_table(p), repeat)
        size = os.path.getsize(path)
        out[name] = {"bytes": size, "bytes_per_event": size / n, "write_s": t_write,
                     "read_s": t_read, "write_events_per_s": n / t_write["median"]}
        if not keep:
            path.unlink()
    out["bytes_per_event"] = out["defaults"]["bytes_per_event"]
    return out
