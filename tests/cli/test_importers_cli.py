"""The importers through the CLI: what each tool printed fills the ledger (offsets and bounds, so
lag is known), a re-import records nothing, and bad input appends nothing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.importers.helpers import FIXTURES
from tests.support.cli import Cli, assert_one_line_error


def _copy(tmp_path: Path, name: str) -> str:
    target = tmp_path / name
    shutil.copy(FIXTURES / name, target)
    return str(target)


def test_kafka_describe_sets_offsets_and_bounds_and_a_reimport_records_nothing(
        cli: Cli, tmp_path: Path) -> None:
    path = _copy(tmp_path, "kafka_describe_3.8_all_groups.txt")
    out = cli.json("sync", "kafka-describe", path)
    assert out["errors"] == 0 and out["changed"] > 0 and out["bounds_raised"] > 0
    assert "orders-service" in out["groups"]
    rows = {(r["topic"], r["queue_id"]): r for r in cli.json("progress", "--group",
                                                              "orders-service")}
    assert (rows[("orders", 0)]["committed_offset"], rows[("orders", 0)]["max_offset"],
            rows[("orders", 0)]["lag"]) == (1200, 1250, 50)
    assert ("orders", 1) not in rows  # `-`: no offset, only bounds
    assert {r["queue_id"]: r["max_offset"] for r in cli.json("queue", "list", "--topic",
                                                             "orders")}[1] == 900
    history = cli.json("history", "--group", "orders-service", "--kind", "sync")
    assert all(e["actor"] == "sync:kafka-describe:kafka_describe_3.8_all_groups.txt"
               for e in history)
    before = cli.events()
    again = cli.json("sync", "kafka-describe", path)
    assert (again["changed"], again["bounds_raised"]) == (0, 0)
    assert cli.events() == before


def test_kafka_describe_without_group_column_needs_the_group(cli: Cli, tmp_path: Path) -> None:
    path = _copy(tmp_path, "kafka_describe_2.0_docs.txt")
    r = cli("sync", "kafka-describe", path)
    assert r.exit_code == 2 and "give the group it describes" in r.stderr
    assert not (cli.data / "log").exists()
    out = cli.json("sync", "kafka-describe", path, "--group", "my-group")
    assert out["changed"] > 0


def test_kafka_offsets_import_gives_history_at_commit_times(cli: Cli, tmp_path: Path) -> None:
    path = _copy(tmp_path, "kafka_offsets_2.x_text_printed.txt")
    out = cli.json("import", "kafka-offsets", path)
    assert out["errors"] == 0 and out["records"] >= 3 and out["recorded_late"] == 0
    history = cli.json("history", "--group", "java-consumer-topic1", "--kind", "sync")
    assert [(e["offset"], e["ts_ms"]) for e in history[:3]] == [
        (1142, 1547146285084), (1146, 1547146286082), (1150, 1547146287084)]
    at = cli.json("at", "1547146286500", "--group", "java-consumer-topic1")
    assert [r["committed_offset"] for r in at] == [1146]
    before = cli.events()
    assert cli.json("import", "kafka-offsets", path)["changed"] == 0
    assert cli.events() == before


def test_an_import_older_than_the_ledger_is_recorded_at_the_ledger_time_and_says_so(
        cli: Cli, tmp_path: Path) -> None:
    cli.json("queue", "append", "--topic", "t", "--queue", "0")  # ledger time: now
    path = _copy(tmp_path, "kafka_offsets_2.x_text_printed.txt")
    r = cli("import", "kafka-offsets", path, "--json")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert out["recorded_late"] == out["commands"]
    assert "never goes backwards" in r.stderr


def test_rocketmq_progress_refuses_several_brokers_without_broker(cli: Cli,
                                                                  tmp_path: Path) -> None:
    path = _copy(tmp_path, "rocketmq_progress_4.8_printed.txt")
    assert_one_line_error(cli("sync", "rocketmq-progress", path, "--group", "go_client_dev"), 2,
                 "RaftNode00", "RaftNode01")
    assert not (cli.data / "log").exists()
    out = cli.json("sync", "rocketmq-progress", path, "--group", "go_client_dev",
                   "--broker", "RaftNode00")
    assert out["errors"] == 0
    rows = {(r["topic"], r["queue_id"]): r for r in cli.json("progress", "--group",
                                                              "go_client_dev")}
    assert (rows[("TestTopic-6", 0)]["committed_offset"], rows[("TestTopic-6", 0)]["lag"]) == (
        6005, 1)


@pytest.mark.parametrize(("command", "fixture", "cut", "extra"), [
    (("sync", "kafka-describe"), "kafka_describe_3.7_all_groups.txt", 3, ()),
    (("import", "kafka-offsets"), "kafka_offsets_2.x_text_printed.txt", 2, ()),
    (("sync", "rocketmq-progress"), "rocketmq_progress_5.5_printed.txt", 4,
     ("--group", "please_rename_unique_group_name_4")),
])
def test_malformed_input_is_exit_2_naming_the_line_and_appends_nothing(
        cli: Cli, tmp_path: Path, command: tuple[str, str], fixture: str, cut: int,
        extra: tuple[str, ...]) -> None:
    cli.json("queue", "append", "--topic", "t", "--queue", "0")
    before = cli.events()
    lines = (FIXTURES / fixture).read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.txt"
    bad.write_text("".join(lines[:cut]) + "this is not what the tool prints\n"
                   + "".join(lines[cut:]))
    r = cli(*command, str(bad), *extra)
    assert r.exit_code == 2, r.stderr
    assert "line " in r.stderr and "Traceback" not in r.stderr
    assert cli.events() == before


def test_sync_commands_go_through_apply_too(cli: Cli) -> None:
    """The importers' commands are ordinary commands: an apply file (or /v1/commands) of them."""
    lines = [{"op": "queue_bounds", "topic": "t", "queue_id": 0, "max_offset": 50,
              "source": "mirror"},
             {"op": "sync", "group": "g", "topic": "t", "queue_id": 0, "offset": 20,
              "source": "mirror"},
             {"op": "sync", "group": "g", "topic": "t", "queue_id": 0, "offset": None,
              "source": "mirror"}]
    r = cli("apply", "-", input="".join(json.dumps(x) + "\n" for x in lines))
    results = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x.get("error") for x in results] == [None, None, None]
    assert results[1]["changed"] and (results[2]["from_offset"], results[2]["to_offset"]) == (
        20, None)
    assert cli.json("progress", "--group", "g") == []
    assert cli.json("queue", "list") == [{"topic": "t", "queue_id": 0, "min_offset": 0,
                                          "max_offset": 50}]


def test_watch_records_each_rewrite_and_stops_cleanly_on_sigterm(cli: Cli, tmp_path: Path) -> None:
    """A real `sync rocketmq --watch` process following a file another process rewrites: the
    history holds each distinct snapshot once; SIGTERM ends it with exit 0."""
    import signal
    import subprocess
    import time

    from tests.tools.crash_harness import _cli_command

    path = tmp_path / "consumerOffset.json"

    def write(offset: int) -> None:
        tmp = path.with_name("consumerOffset.json.tmp")
        tmp.write_text(f'{{"offsetTable":{{"t@g":{{0:{offset},1:{offset * 2}}}}},'
                       f'"dataVersion":{{"counter":{offset}}}}}')
        os.replace(tmp, path)

    def synced() -> list[int]:
        r = cli("history", "--group", "g", "--queue", "0", "--kind", "sync", "--json")
        return [e["offset"] for e in json.loads(r.stdout)] if r.exit_code == 0 else []

    write(1)
    watch = subprocess.Popen([*_cli_command(), "--data-dir", str(cli.data), "sync", "rocketmq",
                              str(path), "--watch", "--interval", "PT0.05S", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for offset in (1, 5, 9):
            if offset != 1:
                write(offset)
            deadline = time.monotonic() + 60
            while offset not in synced():
                assert time.monotonic() < deadline and watch.poll() is None, watch.stderr
                time.sleep(0.05)
        watch.send_signal(signal.SIGTERM)
        out, err = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            watch.kill()
    assert watch.returncode == 0, err
    assert synced() == [1, 5, 9]
    stats = json.loads(out)
    assert stats["snapshots"] == 3 and stats["reads"] >= 3
    assert "offset(s) changed" in err and "Traceback" not in err
