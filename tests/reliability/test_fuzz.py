"""Bad input, generated: every `apply` line and every CLI option value ends in a clear error (an
`error` key per apply line; one stderr line and exit 2 for the CLI) or a correct result, never a
traceback, another exit code, or a log that no longer replays into its view."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import Ledger
from ledger.fold.events import EVENT_SCHEMA
from ledger.limits import NAME_PATTERN, QUEUE_ID_MAX
from storage import SegmentedLog
from tests.reliability.helpers import assert_view_is_a_replay
from tests.support.cli import Cli
from tests.tools.crash_harness import KIND_OF_OP, ROOT, _cli_command

FUZZ = settings(max_examples=80, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])
NAMES = ["g1", "g2", "t1", "t2", "c1", "c2"]
OPS = [*KIND_OF_OP, "sync", "expire", ""]

huge_ints = st.sampled_from([-(2**70), -(2**63), -1, 2**31, 2**31 - 1, 2**63 - 1, 2**63, 2**70,
                             10**30])
odd_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "a b", "x" * 249, "x" * 250, "é", "名前", "a/b", "a:b", "-x",
                     "now", "PT1M", "P7D", "2026-11-20T10:00:00", "1e3", "NaN", "null",
                     "timestamp:5", "earliest", "latest", "broadcast", "clustering"]),
)
wild_value = st.one_of(
    st.sampled_from(NAMES),
    st.integers(min_value=-3, max_value=300),
    huge_ints,
    st.floats(allow_nan=True, allow_infinity=True),
    odd_text,
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
FIELDS = ["group", "topic", "queue_id", "offset", "client", "count", "store_time", "min_offset",
          "max", "generation", "ts", "to_offset", "shift_by", "to_datetime", "to_earliest",
          "to_latest", "to_current", "by_duration", "to_state_at", "execute", "all_topics",
          "backward_only", "force", "mode", "initial", "client_timeout", "actor", "reason"]


@st.composite
def plausible_command(draw: st.DrawFn) -> dict[str, Any]:
    """A command close to valid (so the log grows and rules run), with wild fields mixed in."""
    op = draw(st.sampled_from(["queue_append", "pull", "commit", "group_set", "reset",
                               "queue_truncate", "group_delete"]))
    cmd: dict[str, Any] = {"op": op, "group": draw(st.sampled_from(["g1", "g1", "g2"])),
                           "topic": draw(st.sampled_from(["t1", "t1", "t2"])),
                           "queue_id": draw(st.sampled_from([0, 0, 1])), "client": "c1",
                           "ts": 1_700_000_000_000 + draw(st.integers(0, 10**9))}
    if op == "queue_append":
        cmd["count"] = draw(st.integers(1, 500))
    elif op in ("commit", "queue_truncate"):
        cmd["offset" if op == "commit" else "min_offset"] = draw(st.integers(0, 600))
    elif op == "reset":
        mode = draw(st.sampled_from(["to_offset", "shift_by", "to_earliest", "to_datetime"]))
        cmd[mode] = {"to_offset": draw(st.integers(0, 600)), "shift_by": draw(st.integers(-50, 50)),
                     "to_earliest": True, "to_datetime": cmd["ts"] - 1000}[mode]
        cmd["execute"] = draw(st.booleans())
    if draw(st.integers(0, 2)) == 0:  # a third stay valid, the rest get wild fields
        for name in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=3)):
            cmd[name] = draw(wild_value)
        if draw(st.booleans()):
            cmd.pop(draw(st.sampled_from(sorted(cmd))), None)
    return cmd


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), huge_ints, st.floats(), odd_text),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),
    max_leaves=6,
)


@st.composite
def apply_line(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 9))
    if kind == 0:  # not JSON at all, or JSON that is not an object, or bytes that are not UTF-8
        raw = draw(st.one_of(st.binary(max_size=30), st.sampled_from(
            [b"{", b'{"op":', b"[]", b"NaN", b'{"op":"commit",}', b"\xff\xfe{}"])))
        return raw.replace(b"\n", b" ").replace(b"\r", b" ")
    if kind == 1:
        return json.dumps(draw(json_values)).encode()
    if kind == 2:  # an object of wild fields
        cmd = {name: draw(wild_value) for name in draw(st.lists(st.sampled_from(FIELDS),
                                                                max_size=5))}
        cmd["op"] = draw(st.sampled_from(OPS))
        return json.dumps(cmd).encode()
    return json.dumps(draw(plausible_command())).encode()  # NaN/Infinity stay invalid JSON


def _check_log(root: Path, *, view: bool = True) -> Any:
    """The log's invariants; with `view`, also that the DuckDB view equals a replay of it."""
    if view:
        events = assert_view_is_a_replay(root)
    else:
        with SegmentedLog.open(root, EVENT_SCHEMA, writer=False) as log:
            events = log.read()
        assert events.column("seq").to_pylist() == list(range(events.num_rows))
    for name in ("consumer_group", "topic", "client_id"):
        for value in events.column(name).to_pylist():
            assert value is None or NAME_PATTERN.fullmatch(value), (name, value)
    for value in events.column("queue_id").to_pylist():
        assert value is None or 0 <= value <= QUEUE_ID_MAX
    for name in ("offset", "prev_offset"):
        for value in events.column(name).to_pylist():
            assert value is None or value >= 0, (name, value)
    ts = events.column("ts").to_pylist()
    assert ts == sorted(ts), "ts went backwards"
    return events


def test_every_apply_line_gets_a_result_or_an_error(tmp_path: Path) -> None:
    """Every example applies to one ledger, so later lines meet what earlier ones wrote; after
    the last one the log still replays into its view."""
    fuzzed = tmp_path / "data"

    @FUZZ
    @given(lines=st.lists(apply_line(), min_size=1, max_size=8))
    def apply_lines(lines: list[bytes]) -> None:
        _apply_and_check(fuzzed, lines)

    apply_lines()
    _check_after_fuzzing(fuzzed)


def _apply_and_check(fuzzed: Path, lines: list[bytes]) -> None:
    r = Cli(fuzzed)("apply", "-", "--json", input=b"\n".join(lines) + b"\n")
    results = [json.loads(x) for x in r.stdout.splitlines()]
    every_line_failed = all("error" in x for x in results)  # then exit 1, and stderr says so
    assert r.exit_code == int(every_line_failed), (r.exit_code, r.stderr, r.exception)
    assert "Traceback" not in r.stderr
    assert r.stderr == ("every line failed: nothing was applied\n" if every_line_failed else "")
    assert [x["line"] for x in results] == list(range(1, len(lines) + 1))
    events = _check_log(fuzzed, view=False)
    for line, result in zip(lines, results, strict=True):
        if not line.strip():  # a blank line is no command and no error: its number alone
            assert set(result) == {"line"}, result
            continue
        if "error" in result:
            assert isinstance(result["error"], str) and "\n" not in result["error"]
            assert result["error"] and "Traceback" not in result["error"]
            continue
        cmd = json.loads(line)
        assert result["op"] == cmd["op"]
        if "seq" not in result:
            continue
        row = events.slice(result["seq"], 1).to_pylist()[0]
        assert row["kind"] == KIND_OF_OP[cmd["op"]], (cmd, result, row)
        if cmd["op"] in ("commit", "pull", "group_set", "group_delete", "reset"):
            assert row["consumer_group"] == cmd["group"]
        if cmd["op"] == "commit":
            assert (row["topic"], row["queue_id"], row["offset"]) == (
                cmd["topic"], cmd["queue_id"], cmd["offset"])


def test_names_follow_the_rule_of_the_design(tmp_path: Path) -> None:
    """1-249 characters of A-Z a-z 0-9 . _ - % | (Kafka's set plus RocketMQ's % and |)."""
    good = ["a", "x" * 249, "GID_app-1.v2%RETRY|x", "%DLQ%g", "0"]
    bad = ["", "x" * 250, "a b", "é", "a/b", "a:b", "a\nb", "名前", "a@b", "a\x00b"]
    lines = [{"op": "queue_append", "topic": name, "queue_id": 0, "ts": 1000} for name in good + bad]
    r = Cli(tmp_path / "data")("apply", "-", "--json",
                               input="".join(json.dumps(x) + "\n" for x in lines))
    results = [json.loads(x) for x in r.stdout.splitlines()]
    assert [("error" not in x) for x in results] == [True] * len(good) + [False] * len(bad)
    for x in results[len(good):]:
        assert "1-249 characters of A-Z a-z 0-9 . _ - % |" in x["error"]


# ---------------------------------------------------------------------- CLI options
VALID = {
    "name": ["g1", "t1", "c1"], "int": ["0", "1", "5", "20"],
    "time": ["now", "2026-11-20T10:00:00", "1763600000000"], "duration": ["PT1M", "P7D"],
}


def _value(draw: st.DrawFn, kind: str) -> str:
    if kind in VALID and draw(st.booleans()):  # often valid, so commands get past an option
        return draw(st.sampled_from(VALID[kind]))
    return draw(st.one_of(
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
        st.floats().map(lambda f: "nan" if math.isnan(f) else str(f)),
        odd_text.filter(lambda s: "\x00" not in s),
    ))


@st.composite
def cli_args(draw: st.DrawFn) -> list[str]:
    def v(kind: str = "text") -> str:
        return _value(draw, kind)

    n, i, t, d = "name", "int", "time", "duration"
    key = ["--group", v(n), "--topic", v(n), "--queue", v(i)]
    choices = [
        ["queue", "append", "--topic", v(n), "--queue", v(i), "--count", v(i)],
        ["queue", "append", "--topic", v(n), "--queue", v(i), "--store-time", v(t)],
        ["queue", "truncate", "--topic", v(n), "--queue", v(i), "--min-offset", v(i)],
        ["queue", "list", "--topic", v(n)],
        ["commit", *key, "--offset", v(i), "--client", v(n)],
        ["commit", *key, "--offset", v(i), "--generation", v(i)],
        ["pull", *key, "--client", v(n), "--max", v(i)],
        ["reset", "--group", v(n), "--topic", v(n), "--to-offset", v(i)],
        ["reset", "--group", v(n), "--all-topics", "--shift-by", v(i), "--execute"],
        ["reset", "--group", v(n), "--topic", v(n), "--to-datetime", v(t), "--execute"],
        ["reset", "--group", v(n), "--topic", v(n), "--by-duration", v(d)],
        ["progress", "--group", v(n)],
        ["progress", "--group", v(n), "--topic", v(n)],
        ["history", "--group", v(n), "--limit", v(i)],
        ["history", "--since", v(t), "--until", v(t)],
        ["history", "--kind", v(), "--queue", v(i)],
        ["at", v(t), "--group", v(n)],
        ["lookup", "--topic", v(n), "--datetime", v(t)],
        ["sql", v()],
        ["sql", "SELECT " + v(), "--format", v()],
        ["group", "set", "--group", v(n), "--mode", v(), "--initial", v()],
        ["group", "set", "--group", v(n), "--client-timeout", v(d)],
        ["group", "delete", "--group", v(n)],
        ["group", "list"],
        ["export", "--group", v(n)],
        ["retention", "--offsets-retention", v(d)],
        ["verify"],
        [v(), v()],
    ]
    args = draw(st.sampled_from(choices))
    if draw(st.booleans()):
        args = [*args, "--json"]
    return args


def test_every_cli_option_value_ends_in_a_result_or_one_error_line(tmp_path: Path) -> None:
    """Every example runs on one small ledger (whatever earlier examples did to it); after the
    last one its log still replays into its view."""
    cli_fuzzed = tmp_path / "data"
    with Ledger.open(cli_fuzzed) as led:
        led.queue_append("t1", 0, 100, store_ts=1_000_000)
        led.group_set("g1", initial="earliest")
        led.pull("g1", "t1", 0, client="c1")
        led.commit("g1", "t1", 0, 10, client="c1")

    @FUZZ
    @given(args=cli_args())
    def run_cli(args: list[str]) -> None:
        _run_and_check(cli_fuzzed, args)

    run_cli()
    _check_after_fuzzing(cli_fuzzed)


def _run_and_check(cli_fuzzed: Path, args: list[str]) -> None:
    r = Cli(cli_fuzzed)(*args)
    assert r.exit_code in (0, 1, 2), (args, r.exit_code, r.stderr, r.exception)
    assert r.exception is None or isinstance(r.exception, SystemExit), (args, r.exception)
    assert "Traceback" not in r.stdout + r.stderr
    if r.exit_code == 2:
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (args, r.stderr)


def _check_after_fuzzing(root: Path) -> None:
    """Nothing the fuzzing did corrupted the log, and the view is still a replay of it."""
    assert (root / "log").exists(), "the fuzzing wrote nothing"
    _check_log(root)
    assert Cli(root)("verify").exit_code == 0


@pytest.mark.parametrize(("args", "setup", "fragment"), [
    (["apply", "FILE"], lambda d: (d / "FILE").write_bytes(b'\xff\xfe{"op"\n{"op":"x"}\n'), None),
    (["apply", "FILE"], lambda d: (d / "FILE").mkdir(), "does not exist"),
    (["progress", "--group", "g"], lambda d: (d / "data").write_text("a file"), None),
    (["commit", "--group", "g", "--topic", "t", "--queue", "0", "--offset", "1"],
     lambda d: ((d / "data").mkdir(), (d / "data" / "settings.json").write_text("{oops")),
     "settings"),
    (["at", "99999999999999999"], lambda d: None, "out of range"),
    (["queue", "append", "--topic", "t", "--queue", "0", "--store-time",
      "99999-01-01T00:00:00"], lambda d: None, "99999"),
])
def test_real_processes_exit_with_one_line_and_no_traceback(
    tmp_path: Path, args: list[str], setup: Any, fragment: str | None,
) -> None:
    setup(tmp_path)
    argv = [a.replace("FILE", str(tmp_path / "FILE")) for a in args]
    r = subprocess.run([*_cli_command(), "--data-dir", str(tmp_path / "data"), *argv],
                       capture_output=True, text=True, cwd=str(ROOT), timeout=60)
    assert "Traceback" not in r.stderr + r.stdout
    assert r.returncode in (0, 1, 2), r.stderr
    if args[0] == "apply" and fragment is None:  # undecodable lines are per-line errors
        assert r.returncode == 1  # every line failed: exit 1, and stderr says so
        assert "every line failed" in r.stderr
        results = [json.loads(x) for x in r.stdout.splitlines()]
        assert len(results) == 2 and all("error" in x for x in results)
        return
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    if fragment:
        assert re.search(re.escape(fragment), lines[0]), lines[0]
