"""`serve --json` and `token add --json`: one JSON document on stdout, as every command's
`--json` promises, that a script can use as it is (the URL to call, the token to present)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tomllib
from pathlib import Path

from tests.server.conftest import Server, raw
from tests.tools.crash_harness import _cli_command


def test_token_add_json_is_the_token_and_what_it_may_do(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.toml"
    done = subprocess.run([*_cli_command(), "token", "add", "ops", "--role", "operate",
                           "--role", "audit", "--groups", "billing*", "--tokens", str(tokens),
                           "--json"], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["name"] == "ops" and doc["roles"] == ["operate", "audit"]
    assert doc["groups"] == ["billing*"] and doc["tokens_file"] == str(tokens)
    stored = tomllib.loads(tokens.read_text())["token"]
    assert [t["sha256"] for t in stored] == [hashlib.sha256(doc["token"].encode()).hexdigest()]


def test_serve_json_prints_the_url_once_it_answers(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", "--json")
    try:
        assert server.proc.stdout is not None
        doc = json.loads(server.proc.stdout.readline())
        assert doc == {"url": server.url}
        assert raw(server, "GET", "/healthz")[0] == 200
    finally:
        assert server.stop() == 0, server.stderr
