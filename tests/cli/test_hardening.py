"""The classes of defect a hostile first hour found (issue 13), each fixed where its check lives
and proven through the CLI, with `verify` clean after."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from ledger import Ledger
from ledger.fold.events import EVENT_SCHEMA
from storage import SegmentedLog
from tests.cli.conftest import G, T
from tests.support.cli import Cli, assert_one_line_error
from tests.support.clock import T0, FakeClock
from tests.support.oracle import log_view, view_file
from tests.tools.crash_harness import _cli_command


def _verify_clean(cli: Cli) -> None:
    r = cli("verify", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["problems"] == [], r.stdout


# ---------------------------------------------------------------- 1. a zero is a value
@pytest.mark.parametrize(("args", "to"), [(["--to-offset", "0"], 0), (["--shift-by", "0"], 100)])
def test_a_zero_is_a_scenario_value(committed: Cli, args: list[str], to: int) -> None:
    out = committed.json("reset", "--group", G, "--topic", f"{T}:0", *args, "--execute")
    assert out["executed"] and out["plan"][0]["to_offset"] == to
    _verify_clean(committed)


def test_an_apply_line_with_to_offset_0_is_a_reset(committed: Cli) -> None:
    line = {"op": "reset", "group": G, "topic": T, "queue_id": 1, "to_offset": 0,
            "execute": True}
    r = committed("apply", "-", input=json.dumps(line) + "\n")
    [result] = [json.loads(x) for x in r.stdout.splitlines()]
    assert "error" not in result and result["plan"][0]["to_offset"] == 0


# ---------------------------------------------------------------- 2. an abort never leaves the view ahead
def test_an_unreadable_line_is_its_own_error_and_the_others_apply(cli: Cli) -> None:
    lines = [json.dumps({"op": "queue_append", "topic": T, "queue_id": 0}).encode(),
             b"[" * 100_000, b"{" * 100_000, b"\xef\xbb\xbf" + b"x" * 200_000,
             json.dumps({"op": "queue_append", "topic": T, "queue_id": 0}).encode()]
    r = cli("apply", "-", input=b"\n".join(lines) + b"\n")
    assert r.exit_code == 0 and "Traceback" not in r.stderr
    results = [json.loads(x) for x in r.stdout.splitlines()]
    assert [("error" in x) for x in results] == [False, True, True, True, False]
    assert cli.json("queue", "list")[0]["max_offset"] == 2
    _verify_clean(cli)


def test_sigint_in_the_middle_of_an_apply_leaves_the_view_behind_or_at_the_log(
        tmp_path: Path) -> None:
    root = tmp_path / "data"
    cli = Cli(root)
    cli.json("init", "--segment-events", "50000")
    with Ledger.open(root, apply_batch_commands=2048):
        pass
    feed = tmp_path / "feed.ndjson"
    with feed.open("w") as f:
        f.write(json.dumps({"op": "group_set", "group": G, "initial": "earliest"}) + "\n")
        for i in range(200_000):
            q = i % 8
            if i % 3 == 0:
                f.write(json.dumps({"op": "queue_append", "topic": T, "queue_id": q,
                                    "count": 4}) + "\n")
            f.write(json.dumps({"op": "commit", "group": G, "topic": T, "queue_id": q,
                                "offset": i // 8}) + "\n")
    proc = subprocess.Popen([*_cli_command(), "--data-dir", str(root), "apply", str(feed),
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    for _ in range(5000):  # some batches are durable before the interrupt
        if not proc.stdout.readline():
            break
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    # the view file as the interrupt left it, before any writer opens the directory
    with SegmentedLog.open(root, EVENT_SCHEMA, writer=False) as log:
        events = log.read()
    found = view_file(root / "view.duckdb")
    assert found is not None
    position, got = found
    assert position is not None and position <= events.num_rows
    assert got == log_view(events.slice(0, position))
    _verify_clean(cli)


# ---------------------------------------------------------------- 3. sql read-only by the engine
@pytest.mark.parametrize(("query", "fragment"), [
    ("WITH x AS (SELECT 1) DELETE FROM offsets", "not a DELETE statement"),
    ("WITH x AS (SELECT 1) UPDATE offsets SET committed_offset = 0 RETURNING *",
     "not an UPDATE statement"),
    ("SELECT * FROM read_csv('/etc/passwd')", "Permission Error"),
    ("SELECT * FROM read_text('/etc/passwd')", "Permission Error"),
    ("SELECT * FROM read_parquet('/etc/hostname')", "Permission Error"),
    ("INSTALL httpfs", "not an INSTALL statement"),
    ("/* c */ force install httpfs", "not a FORCE INSTALL statement"),
    ("LOAD httpfs", "not a LOAD statement"),
    ("ATTACH 'x.db'", "not an ATTACH statement"),
    ("CHECKPOINT", "not a CHECKPOINT statement"),
    ("SELECT 1; SELECT 2", "one read-only statement, got 2"),
    ("SELEC 1", "syntax error"),
])
def test_sql_is_read_only_by_the_engine(committed: Cli, query: str, fragment: str) -> None:
    before = committed.json("sql", "SELECT * FROM offsets ORDER BY ALL", "--format", "json")
    assert_one_line_error(committed("sql", query), 2, fragment)
    assert committed.json("sql", "SELECT * FROM offsets ORDER BY ALL",
                          "--format", "json") == before


def test_sql_through_the_python_api_on_a_writer_cannot_change_the_view(tmp_path: Path) -> None:
    with Ledger.open(tmp_path / "d", clock=FakeClock()) as led:
        led.queue_append(T, 0, 10)
        for query in ("DELETE FROM queues", "CREATE TABLE x AS SELECT 1",
                      "WITH q AS (SELECT 1) DELETE FROM queues"):
            with pytest.raises(Exception, match="read-only"):
                led.sql(query)
        assert led.sql("SELECT max_offset FROM queues").column(0).to_pylist() == [10]
        assert led.sql("SELECT count(*) FROM events").column(0).to_pylist() == [1]
        assert led.view.con.execute("SELECT count(*) FROM queues").fetchone() == (1,)


# ---------------------------------------------------------------- 4. one name check
@pytest.mark.parametrize("spec", ["a b:0", ":0", "ü:0", "t:x", "t:-1", "t:99999999999"])
def test_reset_topic_specs_follow_the_name_rule(committed: Cli, spec: str) -> None:
    before = committed.events()
    assert_one_line_error(committed("reset", "--group", G, "--topic", spec, "--to-offset", "1",
                           "--execute"), 2, "invalid --topic")
    assert committed.events() == before


# ---------------------------------------------------------------- 5. before the retained log
def test_at_and_to_state_at_before_the_retained_log_are_refused(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    root = tmp_path / "data"
    with Ledger.open(root, clock=clock, segment_events_max=3) as led:
        led.queue_append(T, 0, 100)
        led.group_set(G, initial="earliest")
        for offset in (10, 20, 30, 40):
            led.pull(G, T, 0, client="c1")
            led.commit(G, T, 0, offset, client="c1")
            clock.advance(60_000)
        clock.advance(3_600_000)
        led.commit(G, T, 0, 50, client="c1")
        assert led.retention(offsets_retention_ms=10**12,
                             log_retention_ms=1_800_000)["segments_deleted"] > 0
    cli = Cli(root)
    assert_one_line_error(cli("at", str(T0 + 30_000)), 2, "earliest time still answerable")
    assert_one_line_error(cli("reset", "--group", G, "--all-topics", "--to-state-at", str(T0 + 30_000)),
                 2, "earliest time still answerable")
    assert cli.json("at", "now")[0]["committed_offset"] == 50
    _verify_clean(cli)


# ---------------------------------------------------------------- 6. retention of synced offsets
def test_offset_retention_expires_offsets_made_by_sync_and_reset(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    with Ledger.open(tmp_path / "d", clock=clock) as led:
        led.queue_append(T, 0, 100)
        led.sync([("synced", T, 0, 40)], source="broker-a")
        led.submit([{"op": "reset", "group": "reset-only", "topic": T, "queue_id": 0,
                     "to_offset": 5, "execute": True}])
        clock.advance(8 * 24 * 3_600_000)
        assert led.retention()["offsets_expired"] == 2
        assert led.committed("synced", T, 0) is None and led.committed("reset-only", T, 0) is None


# ---------------------------------------------------------------- 7. resets of unknown queues
@pytest.mark.parametrize("args", [["--topic", f"{T}:7", "--to-offset", "5"],
                                  ["--from-file", "FILE"]])
def test_a_reset_of_a_queue_that_does_not_exist_is_refused(committed: Cli, tmp_path: Path,
                                                           args: list[str]) -> None:
    (tmp_path / "targets.csv").write_text(f"{T},9,5\n")
    args = [str(tmp_path / "targets.csv") if a == "FILE" else a for a in args]
    before = committed.events()
    assert_one_line_error(committed("reset", "--group", G, *args, "--execute"), 2, "unknown queue")
    assert committed.events() == before
    out = committed.json("reset", "--group", G, "--all-topics", "--to-latest", "--execute")
    assert [r["to_offset"] for r in out["plan"]] == [200, 200]


# ---------------------------------------------------------------- rough edges
def test_a_misspelled_policy_key_is_refused_not_ignored(committed: Cli) -> None:
    (committed.data / "reset-policy.toml").write_text("[limits]\nmax_rewind_mesages = 1\n")
    assert_one_line_error(committed("reset", "--group", G, "--all-topics", "--to-offset", "1",
                           "--execute"), 2, "unknown key 'max_rewind_mesages'")


def test_a_dry_run_says_the_policy_would_refuse_the_execute(committed: Cli) -> None:
    (committed.data / "reset-policy.toml").write_text('[limits]\nmax_rewind = "P1D"\n')
    r = committed("reset", "--group", G, "--all-topics", "--to-datetime", "1000000", "--json")
    assert r.exit_code == 0 and "would be refused" in json.loads(r.stdout)["policy"]
    assert "would be refused" in r.stderr


def test_epoch_seconds_are_refused_as_ambiguous(committed: Cli) -> None:
    assert_one_line_error(committed("reset", "--group", G, "--all-topics", "--to-datetime",
                           "1795219200"), 2, "looks like epoch seconds", "1795219200000")


def test_lag_is_null_where_bounds_are_unknown(cli: Cli) -> None:
    Ledger.open(cli.data).close()
    with Ledger.open(cli.data) as led:
        led.sync([(G, "elsewhere", 0, 40)], source="mirror")
    assert cli.json("progress", "--group", G)[0]["lag"] is None
    assert cli.json("group", "list")[0]["lag"] is None


def test_a_second_writer_gets_a_cli_message(committed: Cli) -> None:
    with Ledger.open(committed.data):
        r = committed("queue", "append", "--topic", T, "--queue", "0")
    assert_one_line_error(r, 2, "one writer per data directory", "reads need no lock")
    assert "writer=False" not in r.stderr


def test_a_bom_does_not_break_line_1(cli: Cli, tmp_path: Path) -> None:
    line = json.dumps({"op": "queue_append", "topic": T, "queue_id": 0})
    r = cli("apply", "-", input=b"\xef\xbb\xbf" + line.encode() + b"\n")
    assert "error" not in json.loads(r.stdout.splitlines()[0])
    csv = tmp_path / "offsets.csv"
    csv.write_bytes(b"\xef\xbb\xbf" + f"{G},{T},0,1\n".encode())
    assert cli.json("sync", "kafka-csv", str(csv))[0]["to_offset"] == 1


def test_version(cli: Cli) -> None:
    r = cli("--version")
    assert r.exit_code == 0 and r.stdout.startswith("offset-ledger ")


def test_apply_exits_1_when_every_line_failed(cli: Cli) -> None:
    r = cli("apply", "-", input="{}\nnot json\n")
    assert r.exit_code == 1 and "every line failed" in r.stderr
    assert len(r.stdout.splitlines()) == 2
