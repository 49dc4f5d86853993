"""init, queue, group, pull and commit: exit codes, exact JSON keys and values."""

from __future__ import annotations

import json

from ledger import Ledger
from tests.cli.conftest import G, T
from tests.support.cli import Cli, assert_one_line_error


def test_init_persists_settings(cli: Cli) -> None:
    out = cli.json("init", "--segment-events", "500", "--segment-age", "PT10M",
                   "--durability", "batch")
    assert out["segment_events_max"] == 500
    assert out["segment_age_ms_max"] == 600_000
    assert out["durability"] == "batch"
    assert out["data_dir"] == str(cli.data)
    with Ledger.open(cli.data) as led:
        assert led.settings.segment_events_max == 500
        assert led.settings.durability == "batch"


def test_init_with_a_bad_durability_creates_nothing(cli: Cli) -> None:
    assert_one_line_error(cli("init", "--durability", "sometimes"), 2, "'sometimes'")
    assert not cli.data.exists()


def test_queue_append_truncate_and_list(cli: Cli) -> None:
    assert cli.json("queue", "append", "--topic", T, "--queue", "0", "--count", "200") == {
        "topic": T, "queue_id": 0, "min_offset": 0, "max_offset": 200, "seq": 0}
    assert cli.json("queue", "truncate", "--topic", T, "--queue", "0", "--min-offset", "50") == {
        "topic": T, "queue_id": 0, "min_offset": 50, "max_offset": 200, "seq": 1}
    cli.json("queue", "append", "--topic", "other", "--queue", "3",
             "--store-time", "2026-11-20T10:00:00.123+08:00")
    assert cli.json("queue", "list", "--topic", T) == [
        {"topic": T, "queue_id": 0, "min_offset": 50, "max_offset": 200}]
    assert len(cli.json("queue", "list")) == 2


def test_group_set_list_delete(committed: Cli) -> None:
    out = committed.json("group", "set", "--group", "b", "--mode", "broadcast",
                         "--initial", "timestamp:2026-11-20T10:00:00", "--client-timeout", "PT1M")
    assert out == {"consumer_group": "b", "mode": "broadcast", "seq": 11,
                   "initial": "timestamp:1795168800000", "client_timeout_ms": 60_000}
    rows = committed.json("group", "list")
    assert [r["consumer_group"] for r in rows] == ["b", G]
    assert set(rows[0]) == {"consumer_group", "mode", "queues", "lag", "last_update"}
    g = rows[1]
    assert (g["mode"], g["queues"], g["lag"]) == ("clustering", 2, 200)
    assert g["last_update"].endswith("Z")
    out = committed.json("group", "delete", "--group", G)
    assert (out["consumer_group"], out["queues_deleted"]) == (G, 2)
    deletes = committed.json("history", "--group", G, "--topic", T, "--kind", "delete")
    assert [(e["queue_id"], e["prev_offset"], e["offset"]) for e in deletes] == [
        (0, 100, None), (1, 100, None)]
    assert committed.json("progress", "--group", G) == []


def test_group_set_rejects_a_bad_mode(committed: Cli) -> None:
    before = committed.events()
    assert_one_line_error(committed("group", "set", "--group", G, "--mode", "fanout"), 2, "'fanout'")
    assert committed.events() == before


def test_pull_then_commit(committed: Cli) -> None:
    assert committed.json("pull", "--group", G, "--topic", T, "--queue", "0", "--client", "c1",
                          "--max", "10") == {"next_offset": 100, "generation": 0, "count": 10,
                                             "seq": 11}
    assert committed.json("commit", "--group", G, "--topic", T, "--queue", "0", "--offset", "110",
                          "--client", "c1") == {"accepted": True, "reason": None, "offset": 110,
                                                "seq": 12}


def test_refused_commit_prints_its_result_and_exits_1(committed: Cli) -> None:
    before = committed.events()
    r = committed("commit", "--group", G, "--topic", T, "--queue", "0", "--offset", "90",
                  "--client", "c1", "--json")
    assert r.exit_code == 1
    assert json.loads(r.stdout) == {"accepted": False, "reason": "stale", "offset": 100,
                                    "error": "commit refused: stale"}
    assert "stale" in r.stderr
    assert committed.events() == before


def test_commit_above_max_offset_is_refused_as_invalid(committed: Cli) -> None:
    out = committed.json("commit", "--group", G, "--topic", T, "--queue", "0", "--offset", "201",
                         code=1)
    assert (out["accepted"], out["reason"]) == (False, "invalid")


def test_text_output_is_a_table(committed: Cli) -> None:
    r = committed("progress", "--group", G)
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[0].split()[:5] == ["topic", "queue_id", "min_offset", "max_offset",
                                    "committed_offset"]
    assert lines[2].split()[:5] == [T, "0", "0", "200", "100"]
