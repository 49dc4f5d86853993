"""Issue 21, part B, through the CLI: reviewed plans from files, plan rows, the earliest time
after log retention, invented time lag, and the rough edges of input (duplicate keys and queues,
clamped targets, unknown topics, time ranges, blank lines, binary input, names Kafka allows and
the ledger does not). Each bad input is one line naming the value, and `verify` is clean after."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ledger import Ledger
from tests.cli.conftest import G, T
from tests.support.cli import Cli, assert_one_line_error
from tests.support.clock import T0, FakeClock

FIXTURES = Path(__file__).resolve().parent.parent / "importers" / "fixtures"


def _verify_clean(cli: Cli) -> None:
    r = cli("verify", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["problems"] == [], r.stdout


def _committed_offsets(cli: Cli) -> list[int]:
    return [r["committed_offset"] for r in cli.json("progress", "--group", G)]


# ---------------------------------------------------------------- reviewed plans from files
def _export_plan(cli: Cli, path: Path, *args: str) -> dict:
    r = cli("reset", "--group", G, "--topic", T, *args, "--export-plan")
    assert r.exit_code == 0, r.stderr
    path.write_text(r.stdout)
    return json.loads(r.stdout)


def test_a_plan_exported_for_review_is_refused_when_stale(committed: Cli, tmp_path: Path) -> None:
    """`--export` prints Kafka's CSV (targets only); `--export-plan` the plan with its
    from-offsets, which `--from-file` executes as reviewed, or refuses naming the queue and
    both values (exit 1) once a queue moved, exactly as POST .../reset with a plan does."""
    plan = tmp_path / "plan.json"
    doc = _export_plan(committed, plan, "--shift-by", "-40")
    assert doc == {"consumer_group": G, "scenario": {"mode": "shift_by", "value": -40},
                   "plan": [{"topic": T, "queue_id": q, "from_offset": 100, "to_offset": 60}
                            for q in (0, 1)]}
    csv = committed("reset", "--group", G, "--topic", T, "--shift-by", "-40", "--export")
    assert csv.stdout == f"{T},0,60\n{T},1,60\n"  # Kafka's form, unchanged
    assert committed("commit", "--group", G, "--topic", T, "--queue", "1", "--offset",
                     "150").exit_code == 0
    before = committed.events()
    stale = committed("reset", "--group", G, "--from-file", str(plan), "--execute")
    assert_one_line_error(stale, 1, "stale plan", f"queue {T}:1", "planned from offset 100",
                          "is now at 150")
    assert committed.events() == before and _committed_offsets(committed) == [100, 150]
    fresh = tmp_path / "fresh.json"
    _export_plan(committed, fresh, "--shift-by", "-40")
    done = committed.json("reset", "--group", G, "--from-file", str(fresh), "--execute",
                          "--reason", "reviewed")
    assert done["executed"] and _committed_offsets(committed) == [60, 110]
    [event, *_] = committed.json("history", "--group", G, "--kind", "reset")
    assert json.loads(event["detail"]) == {"mode": "shift_by", "value": -40, "reason": "reviewed"}
    _verify_clean(committed)


def test_a_plan_file_names_its_scenario_and_group(committed: Cli, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    _export_plan(committed, plan, "--to-offset", "20")
    before = committed.events()
    assert_one_line_error(committed("reset", "--group", G, "--from-file", str(plan),
                                    "--to-offset", "30", "--execute"),
                          2, "--from-file holds a plan with its scenario", "--to-offset")
    assert_one_line_error(committed("reset", "--group", "other", "--from-file", str(plan),
                                    "--execute"), 2, f"the plan file is for group {G!r}")
    assert committed.events() == before
    _verify_clean(committed)


# ---------------------------------------------------------------- plan rows
def _rewrite(plan: Path, change: object) -> Path:
    doc = json.loads(plan.read_text())
    change(doc)  # type: ignore[operator]
    out = plan.with_name("changed.json")
    out.write_text(json.dumps(doc))
    return out


def test_a_queue_twice_in_a_plan_is_refused(committed: Cli, tmp_path: Path) -> None:
    _export_plan(committed, tmp_path / "plan.json", "--shift-by", "-5")
    plan = _rewrite(tmp_path / "plan.json",
                    lambda d: d["plan"].append({**d["plan"][0], "to_offset": 90}))
    before = committed.events()
    assert_one_line_error(committed("reset", "--group", G, "--from-file", str(plan),
                                    "--execute"), 2, f"duplicate queue {T}:0 in the plan")
    assert committed.events() == before
    _verify_clean(committed)


def test_a_plan_row_that_its_scenario_cannot_give_is_refused(committed: Cli,
                                                             tmp_path: Path) -> None:
    """History showed 1000 -> 920 recorded as `shift_by -5`: a row whose target the scenario
    it names cannot have given is refused, never recorded as that scenario."""
    _export_plan(committed, tmp_path / "plan.json", "--shift-by", "-5")
    plan = _rewrite(tmp_path / "plan.json", lambda d: d["plan"][0].update(to_offset=20))
    before = committed.events()
    assert_one_line_error(
        committed("reset", "--group", G, "--from-file", str(plan), "--execute"), 2,
        f"plan row {T}:0 disagrees with its scenario shift_by -5", "to_offset 20",
        "the scenario gives 95 from offset 100")
    assert committed.events() == before and _committed_offsets(committed) == [100, 100]
    _verify_clean(committed)


def test_a_queue_twice_in_a_kafka_csv_is_refused(committed: Cli, tmp_path: Path) -> None:
    csv = tmp_path / "plan.csv"
    csv.write_text(f"{T},0,10\n{T},1,20\n{T},0,30\n")
    before = committed.events()
    for args in (["reset", "--group", G, "--from-file", str(csv), "--execute"],
                 ["sync", "kafka-csv", str(csv), "--group", G]):
        assert_one_line_error(committed(*args), 2, "line 3", f"duplicate queue {T}:0",
                              "line 1 gives it too")
    assert committed.events() == before
    _verify_clean(committed)


def test_a_target_above_max_offset_is_clamped_with_a_warning(committed: Cli,
                                                             tmp_path: Path) -> None:
    """Kafka warns "New offset (5000) is higher than latest offset ... Value will be set to";
    the plan says so too (`clamped`)."""
    csv = tmp_path / "plan.csv"
    csv.write_text(f"{T},0,5000\n")
    r = committed("reset", "--group", G, "--from-file", str(csv), "--json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["plan"][0]["to_offset"] == 200
    assert doc["clamped"] == [{"topic": T, "queue_id": 0, "requested": 5000, "to_offset": 200,
                               "warning": f"offset 5000 of {T}:0 is above MaxOffset 200: set "
                                          "to 200"}]
    assert f"warning: offset 5000 of {T}:0 is above MaxOffset 200: set to 200" in r.stderr


def test_a_reset_of_an_unknown_topic_is_an_error(committed: Cli) -> None:
    before = committed.events()
    assert_one_line_error(committed("reset", "--group", G, "--topic", "nosuch", "--to-earliest",
                                    "--execute"), 2, "unknown topic 'nosuch'")
    assert committed.events() == before
    _verify_clean(committed)


# ---------------------------------------------------------------- the earliest answerable time
def _retained(root: Path) -> None:
    """Events a second apart on segments of 5; log retention then retires the first segments,
    and the first checkpoint after the log start is not at it."""
    clock = FakeClock(T0)
    with Ledger.open(root, clock=clock, segment_events_max=5) as led:
        led.queue_append(T, 0, 1000)
        led.group_set(G, initial="earliest")
        for i in range(1, 30):
            clock.advance(1000)
            assert led.commit(G, T, 0, i * 10).accepted
        clock.advance(10_000)
        assert led.retention(log_retention_ms=15_000)["segments_deleted"] > 0


def _named_ms(stderr: str) -> int:
    m = re.search(r"\((\d+) ms\)", stderr)
    assert m is not None, stderr
    return int(m.group(1))


@pytest.mark.parametrize("command", [["at", "{t}", "--group", G],
                                     ["lag", "--group", G, "--at", "{t}"],
                                     ["history", "--group", G, "--since", "{t}"]])
def test_the_earliest_answerable_time_is_named_and_answers(tmp_path: Path,
                                                           command: list[str]) -> None:
    """After log retention the error names a time, and that time answers: a millisecond
    before it is refused again."""
    root = tmp_path / "data"
    _retained(root)
    cli = Cli(root)

    def run(t: int | str) -> object:
        return cli(*[a.format(t=t) for a in command], "--json")

    earliest = _named_ms(assert_one_line_error(run(T0), 2, "log retention"))  # type: ignore[arg-type]
    assert earliest > T0
    answered = run(earliest)
    assert answered.exit_code == 0, answered.stderr  # type: ignore[attr-defined]
    assert _named_ms(assert_one_line_error(run(earliest - 1), 2, "log retention")) == earliest  # type: ignore[arg-type]
    _verify_clean(cli)


# ---------------------------------------------------------------- invented time lag
def test_an_imported_log_end_offset_has_no_store_time(cli: Cli) -> None:
    """`sync kafka-describe` learns where each queue ends, not when its messages were stored:
    the time lag stays unknown (null) instead of "time since the import", and one import does
    not make every lagging partition STOP."""
    r = cli("sync", "kafka-describe", str(FIXTURES / "kafka_describe_3.7_all_groups.txt"))
    assert r.exit_code == 0, r.stderr
    lagging = [q for g in cli.json("lag") for q in g["queues"] if q["lag"]]
    assert lagging and all(q["lag_ms"] is None and q["status"] != "STOP" for q in lagging)
    group = next(g["consumer_group"] for g in cli.json("lag") if g["total_lag"])
    assert all(r["lag_ms"] is None for r in cli.json("progress", "--group", group) if r["lag"])
    appends = cli.json("sql", "SELECT store_ts FROM appends")
    assert appends and all(a["store_ts"] is None for a in appends)
    _verify_clean(cli)


# ---------------------------------------------------------------- time ranges
@pytest.mark.parametrize("command", [["history"], ["lag", "--every", "PT1M"]])
def test_a_range_that_ends_before_it_starts_is_refused_alike(committed: Cli,
                                                             command: list[str]) -> None:
    r = committed(*command, "--since", "now", "--until", "1999-01-01")
    assert_one_line_error(r, 2, "invalid until 915148800000 (1999-01-01T00:00:00.000Z): "
                                "before since")


# ---------------------------------------------------------------- input of apply and importers
def test_a_blank_line_is_no_error(committed: Cli) -> None:
    """One result per input line (DESIGN): a blank line answers `{"line": N}`, no error."""
    line = json.dumps({"op": "queue_append", "topic": T, "queue_id": 0})
    r = committed("apply", "-", input=f"\n{line}\n   \n")
    assert r.exit_code == 0
    assert [json.loads(x) for x in r.stdout.splitlines()][0::2] == [{"line": 1}, {"line": 3}]
    assert "applied 3 line(s), 0 with an error" in r.stderr
    only_blank = committed("apply", "-", input="\n\n")
    assert only_blank.exit_code == 0 and only_blank.stdout.splitlines() == ['{"line":1}',
                                                                          '{"line":2}']


def test_a_key_given_twice_in_a_command_line_is_refused(committed: Cli) -> None:
    before = committed.events()
    good = json.dumps({"op": "commit", "group": G, "topic": T, "queue_id": 0, "offset": 110})
    twice = good.replace('"offset": 110', '"offset": 120, "offset": 190')
    r = committed("apply", "-", input=f"{twice}\n{good}\n")
    results = [json.loads(x) for x in r.stdout.splitlines()]
    assert results[0]["error"] == "duplicate key 'offset' in the command: give each field once"
    assert "error" not in results[1] and committed.events() == before + 1
    _verify_clean(committed)


def test_binary_input_names_the_line(committed: Cli, tmp_path: Path) -> None:
    line = json.dumps({"op": "queue_append", "topic": T, "queue_id": 0}).encode()
    r = committed("apply", "-", input=line + b"\n" + b'{"op":"queue_append","topic":"t\xff"}\n')
    results = [json.loads(x) for x in r.stdout.splitlines()]
    assert results[1]["error"].startswith("line 2, column 32: byte 0xff is not UTF-8 text")
    binary = tmp_path / "dump.bin"
    binary.write_bytes(b"GROUP TOPIC PARTITION\n\x89PNG\r\n\x1a\n\x00\x00")
    before = committed.events()
    for args in (["sync", "kafka-describe"], ["import", "kafka-offsets"], ["sync", "rocketmq"],
                 ["sync", "rocketmq-progress", "--group", G]):
        assert_one_line_error(committed(*args[:2], str(binary), *args[2:]), 2,
                              "line 2, column 1: byte 0x89 is not UTF-8 text")
    assert committed.events() == before
    _verify_clean(committed)


def test_a_consumer_offset_json_with_a_key_or_queue_twice_is_refused(committed: Cli,
                                                                    tmp_path: Path) -> None:
    before = committed.events()
    for text, fragment in (('{"offsetTable":{"t@g":{0:12,0:90}}}', "key '0' twice"),
                           ('{"offsetTable":{"t@g":{0:12},"t@g":{0:90}}}', "key 't@g' twice"),
                           ('{"offsetTable":{"t@g":{0:12,00:90}}}', "queue t:0 of group 'g' is "
                                                                    "given twice")):
        path = tmp_path / "consumerOffset.json"
        path.write_text(text)
        assert_one_line_error(committed("sync", "rocketmq", str(path)), 2, fragment)
    assert committed.events() == before
    _verify_clean(committed)


def test_kafka_offsets_of_a_group_the_ledger_cannot_name_are_skipped_and_named(
        cli: Cli, tmp_path: Path) -> None:
    """Kafka takes any string as a group id; the ledger's names are 1-249 of A-Z a-z 0-9 . _ -
    % |: such records are skipped, counted and named on stderr, the others imported."""
    def record(group: str, partition: int, offset: int, ts: int) -> str:
        return (f"[{group},orders,{partition}]::OffsetAndMetadata(offset={offset}, "
                "leaderEpoch=Optional.empty, metadata=, "
                f"commitTimestamp={ts}, expireTimestamp=None)")
    dump = tmp_path / "offsets.txt"
    dump.write_text("\n".join([record("billing", 0, 10, 1_600_000_000_000),
                               record("spark:driver-1", 0, 12, 1_600_000_001_000),
                               record("spark:driver-1", 1, 13, 1_600_000_002_000),
                               record("billing", 0, 20, 1_600_000_003_000)]) + "\n")
    r = cli("import", "kafka-offsets", str(dump), "--json")
    assert r.exit_code == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["changed"] == 2
    assert summary["skipped"] == {"group_name_outside_the_ledger_alphabet": 2}
    assert "skipped 2 record(s) of 1 group(s) whose names the ledger cannot hold" in r.stderr
    assert "'spark:driver-1'" in r.stderr
    assert cli.json("progress", "--group", "billing")[0]["committed_offset"] == 20
    _verify_clean(cli)


def test_a_type_error_in_a_json_offsets_record_says_what_is_wrong(cli: Cli,
                                                                  tmp_path: Path) -> None:
    dump = tmp_path / "offsets.json"
    dump.write_text('{"key":{"version":1,"data":{"group":"g","topic":"t","partition":0}},'
                    '"value":{"version":3,"data":{"offset":"7","leaderEpoch":0,"metadata":"",'
                    '"commitTimestamp":1600000000000}}}\n')
    line = assert_one_line_error(cli("import", "kafka-offsets", str(dump)), 2, "line 1",
                                 "field value.data.offset is a string, where the offsets "
                                 "formatter writes an integer or null")
    assert "cut short" not in line
