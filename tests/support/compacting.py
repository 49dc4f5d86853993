"""Compaction without Spark, for tests that need the compacted layout many times: what
`spark_compaction.compaction` does after Spark collected a run's rows (storage's
`write_segment`, then one `replace` swap), on a ledger open as the writer."""

from __future__ import annotations

from pathlib import Path

from ledger import Ledger
from storage.sealed import write_segment
from tests.support.faults import NoSyncFS


def compact_in_place(led: Ledger) -> int:
    """Merge runs of three sealed segments into one, as `compact` does (the rows of the run
    written in the sealing's clustered layout, swapped in by one manifest commit), without
    Spark. Returns the runs merged."""
    log = led.log
    staging = Path(log.root) / "compaction"
    staging.mkdir(exist_ok=True)
    segments = log.segments()
    runs = [segments[i:i + 3] for i in range(0, len(segments) - 2, 3)]
    for run in runs:
        table = log.read(seq_gte=run[0].base_seq, seq_lt=run[-1].end_seq)
        staged = staging / f"{run[0].base_seq:020d}.parquet"
        write_segment(NoSyncFS(), staged, table, log.settings)
        log.replace(run, [staged])
    return len(runs)
