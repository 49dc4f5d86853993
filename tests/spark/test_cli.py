"""The Spark commands of the CLI: compact's output and exit codes; no JVM for --help."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from cli import invoke
from ledger import Ledger
from tests.spark.conftest import random_ledger

pytestmark = pytest.mark.spark


def test_help_of_the_spark_commands_starts_no_jvm():
    code = (
        "import sys\n"
        "from cli import invoke\n"
        "for cmd in ('compact', 'replay', 'audit'):\n"
        "    assert invoke([cmd, '--help']) == 0\n"
        "assert 'pyspark' not in sys.modules, 'pyspark imported'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    for cmd in ("compact", "replay", "audit"):
        assert f"Usage: offset-ledger {cmd}" in out.stdout


@pytest.mark.parametrize(("option", "order"), [([], "cluster"), (["--order", "seq"], "seq"),
                                             (["--order", "key"], "key")])
def test_cli_compact_prints_json_only_and_is_idempotent(spark, tmp_path, capsys, option, order):
    root = tmp_path / "data"
    random_ledger(root, seed=5, commands=170)
    args = ["--data-dir", str(root), "compact", "--target-events", "200",
            "--row-group-events", "32", "--json", *option]
    assert invoke(args) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    (result,) = out["roots"]
    assert out["runs"] == 1 and result["segments_after"] < result["segments_before"]
    assert result["runs"][0]["events"] == result["runs"][0]["end_seq"]
    assert out["order"] == result["order"] == result["runs"][0]["order"] == order
    assert invoke(args) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 0


def test_cli_compact_refuses_beside_a_writer_and_on_no_ledger(spark, tmp_path, capsys):
    root = tmp_path / "data"
    random_ledger(root, seed=5, commands=60)
    with Ledger.open(root):
        assert invoke(["--data-dir", str(root), "compact"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "locked by" in err and err.count("\n") == 1
    shutil.rmtree(root)
    assert invoke(["--data-dir", str(root), "compact", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "no ledger at" in captured.err
