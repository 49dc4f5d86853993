"""`python -m bench.run --size smoke` runs end to end and reports every measure with numbers."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench import report

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("bench-smoke")
    p = subprocess.run(
        [sys.executable, "-m", "bench.run", "--size", "smoke", "--out", str(out),
         "--workdir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads((out / "latest.json").read_text()), out


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.mark.slow
def test_every_measure_has_numbers(smoke: tuple[dict, Path]) -> None:
    data, _ = smoke
    assert not data["failures"], data["failures"]
    for key in report.MEASURES:
        m = data["measures"][key]
        if key in report.SPARK_KEYS and m.get("skipped"):
            assert "Spark" in m["skipped"]  # smoke leaves Spark out, and says so
            continue
        assert all(_number(m[s]) for s in ("min", "median", "max")), (key, m)
        assert m["min"] <= m["median"] <= m["max"], (key, m)
        assert m["n"] >= 1 and m["median"] > 0, (key, m)


@pytest.mark.slow
def test_targets_machine_and_files(smoke: tuple[dict, Path]) -> None:
    data, out = smoke
    results = {t["target"]: t["result"] for t in data["targets"]}
    assert len(results) == len(report.TARGETS)
    assert set(results.values()) <= {"pass", "MISSED", "not measured"}
    assert all(t["result"] != "not measured" or t["measure"] in report.SPARK_KEYS
               for t in data["targets"])
    mach = data["machine"]
    for k in ("cpu_count", "python", "pyarrow", "duckdb", "pyspark", "git_commit"):
        assert mach.get(k), k
    assert len(data["load_average"]["start"]) == len(data["load_average"]["end"]) == 3
    assert [s["commands"] for s in data["scaling"]] == data["config"]["scaling"]
    for name in ("apply", "sqlite", "references", "recovery_open", "reset"):
        assert data["peak_rss"][name]["median"] > 10, name  # MiB
    assert data["checks"]["ledger_state_at_agrees_with_dict_fold"] is True
    assert data["checks"]["ledger_apply_errors"] == [0] * data["config"]["repeat"]
    md = (out / "latest.md").read_text()
    assert "## Targets" in md and "Ledger advantage" in md
    assert md.count("\n| ") >= len(report.TARGETS)
    assert (out / "scaling.png").stat().st_size > 10_000
    assert not list(out.glob("bench-run-*")), "the scratch directory is removed"
