"""`offset-ledger` in-process (typer's CliRunner), and the one-line error contract of the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner, Result

from cli import app
from ledger import Ledger


class Cli:
    """`offset-ledger --data-dir DIR ...` in-process; stdout and stderr kept apart."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.runner = CliRunner()

    def __call__(self, *args: Any, input: str | bytes | None = None) -> Result:
        return self.runner.invoke(app, ["--data-dir", str(self.data), *map(str, args)],
                                  input=input)

    def json(self, *args: str, code: int = 0, input: str | None = None) -> Any:
        """Run with `--json`, check the exit code, decode stdout."""
        r = self(*args, "--json", input=input)
        assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
        return json.loads(r.stdout)

    def events(self) -> int:
        """Events in the log (to check that a refused or bad command appended nothing)."""
        with Ledger.open(self.data) as led:
            return led.log.next_seq


def assert_one_line_error(r: Result, code: int, *fragments: str, stdout: bool = False) -> str:
    """Exit `code`, exactly one `Error: ` line on stderr naming every fragment, no traceback
    anywhere, and nothing on stdout unless `stdout` (an `apply` prints the results it made
    durable before the error). Returns the line."""
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr, r.exception)
    assert "Traceback" not in r.stderr + r.stdout
    if not stdout:
        assert r.stdout == "", r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("Error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]
