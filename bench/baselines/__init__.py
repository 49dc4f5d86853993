"""Baselines the ledger is measured against, all storing the same event rows (see common.py).

Why: a figure means something only next to what the obvious alternatives do with the same
stream on the same machine: SQLite (history + UPSERT), DuckDB alone, plain Parquet at rest,
and a pure-Python dict fold (the in-process ceiling).
"""

from __future__ import annotations

import platform
import shutil
import tempfile
import time
from pathlib import Path

BASELINES: tuple[str, ...] = ("dict_fold", "parquet_plain", "duckdb_store", "sqlite_store")


def run_all(
    n_commands: int,
    seed: int = 7,
    repeat: int = 3,
    only: tuple[str, ...] | None = None,
    workdir: Path | None = None,
) -> dict:
    """Figures of every baseline (or `only` some) for the pinned workload of `n_commands`."""
    import importlib

    from bench import workload
    from bench.baselines.common import ensure_events

    t = time.perf_counter()
    path = workload.ensure_file(n_commands, seed)
    t_file = time.perf_counter() - t
    t = time.perf_counter()
    events = ensure_events(path)
    t_events = time.perf_counter() - t
    out: dict = {
        "workload": {"n_commands": n_commands, "seed": seed, "file": str(path),
                     "gen_version": workload.GEN_VERSION, "events": events.n_events,
                     "anomalies": dict(events.anomalies), "ensure_file_s": t_file,
                     "ensure_events_s": t_events},
        "machine": {"python": platform.python_version(), "cpu": platform.processor(),
                    "machine": platform.machine()},
    }
    base = Path(workdir) if workdir is not None else workload.DATA_DIR
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="baselines-", dir=base))
    try:
        for name in only or BASELINES:
            mod = importlib.import_module(f"bench.baselines.{name}")
            if name == "dict_fold":
                out[name] = mod.run(events, repeat=repeat)
            else:
                out[name] = mod.run(events, tmp, repeat=repeat)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
