"""Every command documented; `--help` starts no JVM; the demo runs end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer

from cli import app
from tests.support.cli import Cli

SCRIPT = Path(sys.executable).parent / "offset-ledger"
ROOT = Path(__file__).resolve().parents[2]


def _commands(group, path=()):  # noqa: ANN001, ANN202 (click objects)
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def test_every_command_and_option_has_help_text(cli: Cli) -> None:
    commands = list(_commands(typer.main.get_command(app)))
    names = {" ".join(p) for p, _ in commands}
    assert {"init", "queue append", "queue truncate", "queue list", "group set", "group list",
            "group delete", "pull", "commit", "reset", "progress", "lag", "history", "at", "lookup",
            "sql", "sync rocketmq", "sync kafka-csv", "export", "apply", "retention", "rebuild",
            "demo"} <= names
    for path, cmd in commands:
        assert cmd.help and cmd.help.strip(), path
        for param in cmd.params:
            if param.param_type_name == "option" and param.name != "ctx":
                assert getattr(param, "help", None), (path, param.name)
        r = cli(*path, "--help")
        assert r.exit_code == 0, (path, r.stderr)
        assert "Usage:" in r.stdout and "--json" in r.stdout


def test_help_does_not_import_pyspark() -> None:
    code = (
        "import sys\n"
        "from cli import app\n"
        "try:\n"
        "    app(['--help'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j',"
        " 'spark_compaction')]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr
    assert "Commands:" in r.stdout


def test_console_script_help_exits_0() -> None:
    r = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Usage: offset-ledger" in r.stdout


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    env = {**os.environ, "OFFSET_LEDGER_DEMO_SPARK": "0", "COLUMNS": "200"}
    r = subprocess.run([str(SCRIPT), "demo"], capture_output=True, text=True, timeout=120,
                       env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    out = r.stdout
    for fragment in ("$ offset-ledger reset --group billing --topic orders --to-datetime",
                     "--execute --actor alice", "fenced", "alice", "INC-4711",
                     "$ offset-ledger sql", "Spark compaction and audit skipped"):
        assert fragment in out, fragment
    assert list(tmp_path.iterdir()) == []  # the temporary data dir is not in the cwd
