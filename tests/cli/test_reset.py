"""reset: Kafka's scenarios on a group committed at 100 on queues of MaxOffset 200."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import G, T
from tests.support.cli import Cli, assert_one_line_error


def _plan(cli: Cli, *args: str, code: int = 0) -> dict:
    return cli.json("reset", "--group", G, *args, code=code)


@pytest.mark.parametrize(("scenario", "target"), [
    (["--to-earliest"], 0),
    (["--to-latest"], 200),
    (["--to-current"], 100),
    (["--to-offset", "42"], 42),
    (["--to-offset", "999"], 200),
    (["--shift-by", "50"], 150),
    (["--shift-by", "-150"], 0),
    (["--shift-by", "150"], 200),
    (["--to-datetime", "1970-01-01T00:25:00"], 100),  # first message stored at or after 1500 s
    (["--to-datetime", "1000000"], 0),
])
def test_scenarios_plan_clamped_targets(committed: Cli, scenario: list[str], target: int) -> None:
    before = committed.events()
    out = _plan(committed, "--topic", f"{T}:0", *scenario)
    assert out["executed"] is False
    assert out["plan"] == [{"consumer_group": G, "topic": T, "queue_id": 0,
                            "from_offset": 100, "to_offset": target}]
    assert out["messages_replayed"] == max(100 - target, 0)
    assert out["messages_skipped"] == max(target - 100, 0)
    assert committed.events() == before  # a dry run changes nothing


def test_dry_run_is_the_default_and_says_so(committed: Cli) -> None:
    r = committed("reset", "--group", G, "--topic", T, "--to-earliest")
    assert r.exit_code == 0
    assert "dry run" in r.stderr
    assert "200 message(s) to replay" in r.stderr
    assert committed.json("progress", "--group", G)[0]["committed_offset"] == 100


def test_topic_with_queue_list_resets_only_those_queues(committed: Cli) -> None:
    out = _plan(committed, "--topic", f"{T}:1", "--to-earliest", "--execute",
                "--actor", "alice", "--reason", "replay")
    assert out["executed"] is True
    assert [(p["queue_id"], p["to_offset"]) for p in out["plan"]] == [(1, 0)]
    rows = {r["queue_id"]: r for r in committed.json("progress", "--group", G)}
    assert (rows[0]["committed_offset"], rows[0]["generation"]) == (100, 0)
    assert (rows[1]["committed_offset"], rows[1]["generation"]) == (0, 1)
    ev = committed.json("history", "--group", G, "--kind", "reset")
    assert [(e["queue_id"], e["prev_offset"], e["offset"], e["actor"]) for e in ev] == [
        (1, 100, 0, "alice")]
    assert json.loads(ev[0]["detail"])["reason"] == "replay"


def test_actor_defaults_to_user(committed: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "bob")
    _plan(committed, "--all-topics", "--to-latest", "--execute")
    assert {e["actor"] for e in committed.json("history", "--kind", "reset")} == {"bob"}


def test_all_topics_covers_queues_with_offsets(committed: Cli) -> None:
    out = _plan(committed, "--all-topics", "--shift-by", "-10")
    assert [(p["queue_id"], p["to_offset"]) for p in out["plan"]] == [(0, 90), (1, 90)]


def test_backward_only_keeps_forward_moves_in_place(committed: Cli) -> None:
    out = _plan(committed, "--topic", T, "--to-latest", "--backward-only")
    assert [p["to_offset"] for p in out["plan"]] == [100, 100]


def test_export_then_from_file_gives_the_same_plan(committed: Cli, tmp_path) -> None:
    r = committed("reset", "--group", G, "--topic", T, "--shift-by", "-30", "--export")
    assert r.exit_code == 0
    assert r.stdout == f"{T},0,70\n{T},1,70\n"
    csv = tmp_path / "plan.csv"
    csv.write_text(r.stdout)
    by_file = _plan(committed, "--from-file", str(csv))
    by_shift = _plan(committed, "--topic", T, "--shift-by", "-30")
    assert by_file["plan"] == by_shift["plan"]
    executed = _plan(committed, "--from-file", str(csv), "--execute")
    assert executed["executed"] is True
    assert committed("export", "--group", G).stdout == f"{T},0,70\n{T},1,70\n"


def test_export_of_committed_offsets_reimports(committed: Cli, tmp_path) -> None:
    assert committed.json("export", "--group", G) == [
        {"consumer_group": G, "topic": T, "queue_id": q, "offset": 100} for q in (0, 1)]
    csv = tmp_path / "now.csv"
    csv.write_text(committed("export", "--group", G).stdout)
    _plan(committed, "--all-topics", "--to-earliest", "--execute")
    out = _plan(committed, "--from-file", str(csv), "--execute")
    assert [(p["from_offset"], p["to_offset"]) for p in out["plan"]] == [(0, 100), (0, 100)]


def test_to_state_at_leaves_out_queues_without_an_offset_then(committed: Cli) -> None:
    committed.json("queue", "append", "--topic", T, "--queue", "2", "--count", "10")
    now = committed.json("history", "--limit", "1")[0]["ts"]
    committed.json("pull", "--group", G, "--topic", T, "--queue", "2", "--client", "c1")
    r = committed("reset", "--group", G, "--topic", T, "--to-state-at", now, "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [(p["queue_id"], p["to_offset"]) for p in out["plan"]] == [(0, 100), (1, 100)]
    assert out["skipped_queues"] == [{"topic": T, "queue_id": 2}]
    assert "left out 1 queue(s)" in r.stderr and f"{T}:2" in r.stderr


def test_empty_scope_prints_an_empty_plan(committed: Cli) -> None:
    out = committed.json("reset", "--group", "nobody", "--all-topics", "--to-earliest")
    assert out["plan"] == [] and out["executed"] is False


def test_shift_by_without_committed_offset_is_an_error(committed: Cli) -> None:
    committed.json("queue", "append", "--topic", T, "--queue", "2", "--count", "10")
    assert_one_line_error(committed("reset", "--group", G, "--topic", T, "--shift-by", "1", "--json"), 2,
                 f"{T}:2")


def test_to_earliest_on_a_queue_with_unknown_bounds_is_refused(committed: Cli,
                                                               tmp_path) -> None:
    csv = tmp_path / "s.csv"
    csv.write_text("g,synced,0,5\n")
    committed.json("sync", "kafka-csv", str(csv))
    before = committed.events()
    r = committed("reset", "--group", G, "--topic", "synced", "--to-earliest", "--execute",
                  "--json")
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert (out["executed"], out["refused"]) == (False, "unknown_bounds")
    assert "synced:0" in r.stderr
    assert committed.events() == before


@pytest.mark.parametrize(("args", "fragment"), [
    (["--topic", T, "--to-earliest", "--to-latest"], "got to_earliest, to_latest"),
    (["--topic", T], "got none"),
    (["--topic", T, "--to-earliest", "--dry-run", "--execute"], "--dry-run or --execute"),
    (["--to-earliest"], "needs a scope"),
    (["--topic", T, "--all-topics", "--to-earliest"], "--topic or --all-topics"),
    (["--topic", f"{T}:x", "--to-earliest"], f"'{T}:x'"),
    (["--topic", T, "--to-offset", "-5"], "-5"),
    (["--topic", T, "--to-offset", "five"], "'five'"),
    (["--topic", T, "--to-datetime", "yesterday"], "'yesterday'"),
    (["--topic", T, "--by-duration", "1 hour"], "'1 hour'"),
    (["--from-file", "/nonexistent.csv"], "/nonexistent.csv"),
    (["--topic", T, "--to-earliest", "--export", "--json"], "--export or --json"),
])
def test_bad_reset_usage_is_one_line_exit_2(committed: Cli, args: list[str],
                                            fragment: str) -> None:
    before = committed.events()
    assert_one_line_error(committed("reset", "--group", G, *args, "--execute"
                           if "--dry-run" not in args else "--json"), 2, fragment)
    assert committed.events() == before


def test_a_reset_refused_by_policy_prints_its_plan_exits_1_and_is_recorded(committed: Cli) -> None:
    (committed.data / "reset-policy.toml").write_text(
        "[limits]\nmax_rewind_messages = 50\n")
    r = committed("reset", "--group", G, "--topic", T, "--to-earliest", "--execute",
                  "--actor", "alice", "--json")
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert (out["executed"], out["refused"], out["messages_replayed"]) == (False, "policy", 200)
    assert "--force" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert [e["actor"] for e in committed.json("history", "--kind", "reset_refused")] == ["alice"]
    assert committed.json("progress", "--group", G)[0]["committed_offset"] == 100
    forced = _plan(committed, "--topic", T, "--to-earliest", "--execute", "--force")
    assert forced["executed"] is True
    assert committed.json("progress", "--group", G)[0]["committed_offset"] == 0
