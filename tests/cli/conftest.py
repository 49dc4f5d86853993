"""CLI test helpers: run `offset-ledger` in-process, decode its JSON, count ledger events."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from cli import app
from ledger import Ledger

T, G = "t", "g"


class Cli:
    """`offset-ledger --data-dir DIR ...` in-process; stdout and stderr kept apart."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None) -> Result:
        return self.runner.invoke(app, ["--data-dir", str(self.data), *map(str, args)],
                                  input=input)

    def json(self, *args: str, code: int = 0, input: str | None = None) -> Any:
        r = self(*args, "--json", input=input)
        assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
        return json.loads(r.stdout)

    def events(self) -> int:
        """Events in the log (to check that a refused or bad command appended nothing)."""
        with Ledger.open(self.data) as led:
            return led.log.next_seq


def assert_error(r: Result, code: int, *fragments: str) -> None:
    """One line on stderr naming the bad value, nothing on stdout, the exit code."""
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: ")
    for f in fragments:
        assert f in lines[0], (f, lines[0])


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "data")


def _build_committed(root: Path) -> None:
    """Group g committed at 100 on t:0 and t:1, each of MaxOffset 200 (stored at 1000/2000 s)."""
    with Ledger.open(root) as led:
        for q in (0, 1):
            led.queue_append(T, q, 100, store_ts=1_000_000)
            led.queue_append(T, q, 100, store_ts=2_000_000)
        led.group_set(G, initial="earliest")
        for q in (0, 1):
            led.pull(G, T, q, client="c1")
            assert led.commit(G, T, q, 100, client="c1").accepted


@pytest.fixture(scope="session")
def committed_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("template") / "data"
    _build_committed(root)
    return root


@pytest.fixture
def committed(cli: Cli, committed_template: Path) -> Cli:
    """A fresh copy of the committed-100-of-200 ledger."""
    shutil.copytree(committed_template, cli.data)
    return cli


Runner = Callable[..., Result]
