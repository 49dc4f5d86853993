"""Opening a log makes jemalloc Arrow's pool (a fold's buffers then reuse their pages instead of
faulting them in afresh), unless the user named one in ARROW_DEFAULT_MEMORY_POOL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

OPEN_AND_SAY = """
import pyarrow as pa
from storage import SegmentedLog
before = pa.default_memory_pool().backend_name
schema = pa.schema([("seq", pa.int64()), ("ts", pa.int64())])
with SegmentedLog.open({root!r}, schema) as log:
    log.append(pa.table({{"seq": [0], "ts": [1]}}, schema=schema))
print(before, pa.default_memory_pool().backend_name)
"""


def _pools(tmp_path: Path, env: dict[str, str]) -> list[str]:
    code = OPEN_AND_SAY.format(root=str(tmp_path / "log"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], check=True)
    return out.stdout.split()


def _env_without_choice() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}


def test_opening_a_log_makes_jemalloc_the_pool(tmp_path: Path) -> None:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        pytest.fail("this pyarrow has no jemalloc: the pool the ledger counts on is missing")
    before, after = _pools(tmp_path, _env_without_choice())
    assert before != "jemalloc"  # pyarrow's own default here (mimalloc)
    assert after == "jemalloc"


def test_a_pool_the_user_named_is_kept(tmp_path: Path) -> None:
    before, after = _pools(tmp_path, {**_env_without_choice(),
                                      "ARROW_DEFAULT_MEMORY_POOL": "system"})
    assert before == after == "system"
