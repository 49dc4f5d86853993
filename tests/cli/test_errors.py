"""Bad input: one line on stderr naming the bad value, exit 2, nothing appended."""

from __future__ import annotations

import pytest

from cli import app
from tests.cli.conftest import G, T
from tests.support.cli import Cli, assert_one_line_error

COMMIT = ["commit", "--group", G, "--topic", T, "--queue", "0"]


@pytest.mark.parametrize(("args", "fragments"), [
    ([*COMMIT, "--offset", "-1"], ["invalid offset -1"]),
    ([*COMMIT, "--offset", "abc"], ["--offset", "'abc'"]),
    ([*COMMIT, "--offset", "1.5"], ["--offset", "'1.5'"]),
    (["commit", "--group", G, "--topic", T, "--queue", "-3", "--offset", "1"],
     ["invalid queue id -3"]),
    ([*COMMIT], ["--offset"]),
    (["commit", "--group", "bad group", "--topic", T, "--queue", "0", "--offset", "1"],
     ["'bad group'"]),
    (["queue", "append", "--topic", T, "--queue", "0", "--store-time", "-5"], ["'-5'"]),
    (["queue", "append", "--topic", T, "--queue", "0", "--store-time", "10am"], ["'10am'"]),
    (["queue", "append", "--topic", T, "--queue", "0", "--count", "0"], ["invalid count 0"]),
    (["queue", "truncate", "--topic", T, "--queue", "0", "--min-offset", "-1"], ["-1"]),
    (["pull", "--group", G, "--topic", T, "--queue", "0", "--max", "-1"], ["invalid max -1"]),
    (["history", "--since", "last tuesday"], ["since", "'last tuesday'"]),
    (["history", "--until", "2026-13-01T00:00:00"], ["until", "'2026-13-01T00:00:00'"]),
    (["at", "2026-11-20 25:00"], ["'2026-11-20 25:00'"]),
    (["lookup", "--topic", T, "--datetime", "noon"], ["datetime", "'noon'"]),
    (["group", "set", "--group", G, "--client-timeout", "2 minutes"], ["'2 minutes'"]),
    (["group", "set", "--group", G, "--initial", "newest"], ["'newest'"]),
    (["retention", "--offsets-retention", "7d"], ["--offsets-retention", "'7d'"]),
    (["sql", "SELECT 1", "--format", "xml"], ["'xml'"]),
    (["frobnicate"], ["frobnicate"]),
    (["progress", "--group", G, "--colour"], ["--colour"]),
    (["progress"], ["--group"]),
])
def test_bad_input_is_one_line_exit_2_and_appends_nothing(committed: Cli, args: list[str],
                                                           fragments: list[str]) -> None:
    before = committed.events()
    assert_one_line_error(committed(*args), 2, *fragments)
    assert_one_line_error(committed(*args, "--json"), 2, *fragments)
    assert committed.events() == before


def test_no_arguments_prints_help(cli: Cli) -> None:
    r = cli.runner.invoke(app, [])
    assert r.exit_code == 0
    assert "Usage:" in r.stdout and "reset" in r.stdout


def test_a_missing_command_is_a_usage_error(cli: Cli) -> None:
    assert_one_line_error(cli(), 2, "Missing command")
    assert_one_line_error(cli("queue", "--data-dir"), 2, "--data-dir")
