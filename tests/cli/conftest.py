"""CLI test fixtures: a data directory to run `offset-ledger` on, empty or with a committed group."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ledger import Ledger
from tests.support.cli import Cli

T, G = "t", "g"


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


