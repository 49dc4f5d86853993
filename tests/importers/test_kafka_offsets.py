"""__consumer_offsets dumps (text and JSON forms of each version) give exact syncs in ts order."""

from __future__ import annotations

import json

import pytest

from ledger.importers.kafka_offsets import parse_kafka_offsets
from tests.importers.helpers import Expect, fixture, refused

SRC = "kafka-offsets:dump.txt"


sync = Expect(SRC).sync


def test_2x_text_form_printed_gives_one_sync_per_commit_at_its_commit_time():
    result = parse_kafka_offsets(fixture("kafka_offsets_2.x_text_printed.txt"), SRC)
    assert result.commands == [
        sync("java-consumer-topic1", "topic1", 0, 1142, 1547146285084),
        sync("java-consumer-topic1", "topic1", 0, 1146, 1547146286082),
        sync("java-consumer-topic1", "topic1", 0, 1150, 1547146287084),
        sync("g01", "test", 0, 0, 1672913436699), sync("g01", "test", 1, 0, 1672913436699),
        sync("g01", "test", 2, 1, 1672913436699)]
    assert result.records == 6 and result.groups == ("java-consumer-topic1", "g01")


def test_pre_2_1_text_form_printed():
    result = parse_kafka_offsets(fixture("kafka_offsets_pre2.1_text_printed.txt"), SRC)
    assert result.commands == [sync("mygroup1", "mytopic1", 11, 55166421, 1502060076305),
                               sync("mygroup1", "mytopic1", 13, 55037927, 1502060076305),
                               sync("mygroup2", "mytopic2", 0, 126, 1502060076343)]


def test_4_0_json_of_every_value_version_and_a_tombstone_from_the_formatter_tests():
    result = parse_kafka_offsets(fixture("kafka_offsets_4.0_formatter_tests.json.txt"), SRC)
    assert result.commands == [sync("group-id", "foo", 1, 100, 1234)] * 7 + [
        sync("group-id", "foo", 1, None, 1234)]
    assert result.records == 8 and result.skipped == {}


def test_3_9_json_run_together_with_metadata_holding_a_record_start():
    result = parse_kafka_offsets(fixture("kafka_offsets_3.9.json.txt"), SRC)
    # cdr 3: 40 at ...100, then 44 committed at an earlier ...050 (clock stepped back): it keeps
    # its place after 40, at 40's time; the tombstone after them takes the newest time before it.
    assert result.commands == [sync("billing", "sms", 0, 9, 1726000000000),
                               sync("billing", "cdr", 3, 40, 1726000000100),
                               sync("billing", "cdr", 3, 44, 1726000000100),
                               sync("billing", "cdr", 3, None, 1726000000100)]
    assert result.skipped == {"console_consumer_summary": 1}
    assert len(result.notes) == 1 and result.notes[0].startswith("1 record(s) had a commit")


def test_commits_of_interleaved_partitions_come_out_sorted_by_commit_time_stable():
    def commit(key: str, offset: int, ts: int, epoch: str = ".empty", expire: str = "None") -> str:
        return (f"[{key}]::OffsetAndMetadata(offset={offset}, leaderEpoch=Optional{epoch}, "
                f"metadata=, commitTimestamp={ts}, expireTimestamp={expire})\n")

    text = (commit("a,t,0", 5, 300) + "[a,t,0]::NULL\n"
            + commit("b,t,1", 1, 100, epoch="[2]", expire="Some(900)") + commit("c,t,2", 2, 300)
            + commit("b,t,1", 3, 200, expire="-1"))
    result = parse_kafka_offsets(text, SRC)
    assert result.commands == [sync("b", "t", 1, 1, 100), sync("b", "t", 1, 3, 200),
                               sync("a", "t", 0, 5, 300), sync("a", "t", 0, None, 300),
                               sync("c", "t", 2, 2, 300)]


def test_text_metadata_with_commas_and_brackets_and_a_group_with_commas_in_the_key():
    text = ("[g,orders,7]::OffsetAndMetadata(offset=12, leaderEpoch=Optional[1], metadata=a, "
            "commitTimestamp=5, b), commitTimestamp=1000, expireTimestamp=None)\n"
            "[g,orders,8]::[OffsetMetadata[3,x],CommitTime 9],CommitTime 2000,ExpirationTime 3]\n"
            "[g,orders,9]::OffsetAndMetadata(offset=4, leaderEpoch=OptionalInt.empty, metadata=, "
            "commitTimestampMs=3000, expireTimestampMs=OptionalLong.empty, recordOffset=77)\n")
    result = parse_kafka_offsets(text, SRC)
    assert result.commands == [sync("g", "orders", 7, 12, 1000), sync("g", "orders", 8, 3, 2000),
                               sync("g", "orders", 9, 4, 3000)]
    # Kafka takes any string as a group id: one the ledger cannot name is skipped and named
    skipped = parse_kafka_offsets("[a,b,c,orders,0]::NULL\n", SRC)
    assert skipped.commands == [] and skipped.skipped == {
        "group_name_outside_the_ledger_alphabet": 1}
    assert "'a,b,c'" in skipped.notes[0]


def record(key: object, value: object) -> str:
    return json.dumps({"key": key, "value": value}, separators=(",", ":"))


def test_json_records_the_ledger_has_no_use_for_are_skipped_and_counted():
    commit = {"version": 3, "data": {"offset": 8, "leaderEpoch": 1, "metadata": "",
                                     "commitTimestamp": 50}}
    lines = [
        record({"type": 2, "data": {"group": "g"}}, {"version": 4, "data": {"protocolType": ""}}),
        record({"version": 2, "data": {"group": "g"}}, None),
        record(None, commit),
        record({"version": "10", "data": "unknown"}, {"version": "10", "data": "unknown"}),
        record({"type": 17, "data": {"groupId": "g", "topicId": "x"}}, None),
        record({"version": 1, "data": {"group": "g", "topic": "t", "partition": 0}},
               {"version": 9, "data": "unknown"}),
        record({"version": "1", "data": {"group": "g", "topic": "t", "partition": 0}}, commit),
    ]
    result = parse_kafka_offsets("\n".join(lines) + "\n", SRC)
    assert result.commands == [sync("g", "t", 0, 8, 50)]
    assert result.skipped == {"group_metadata": 2, "null_key": 1, "unknown_record": 2,
                              "unknown_value": 1}


def test_noise_lines_of_the_console_consumer_are_skipped():
    text = ("[2024-01-02 03:04:05,678] WARN [Consumer clientId=console-consumer] Error while "
            "fetching metadata (org.apache.kafka.clients.NetworkClient)\n"
            "[g,t,0]::NULL\nProcessed a total of 1 messages\n")
    result = parse_kafka_offsets(text, SRC)
    assert result.skipped == {"console_consumer_summary": 1, "log_line": 1}
    assert result.commands == [{"op": "sync", "group": "g", "topic": "t", "queue_id": 0,
                                "offset": None, "source": SRC}]


@pytest.mark.parametrize(("text", "wanted"), [
    ('{"key":{"type":1,"data":{"group":"g","topic":"t","partition":0}},"value":{"vers',
     "line 1: record 1 of the line is not an offsets formatter record (Input data was truncated)"),
    ('{"key":{"type":1,"data":{"group":"g","topic":"t","partition":0}},"value":null}'
     '{"key":{"type":1,"data":{"group":"g","topic":"t"', "line 1: record 2 of the line is not"),
    ("[g,t,0]::NULL\n[g,t,1]::OffsetAndMetadata(offset=4, leaderEpoch=Optional.empty, meta",
     "line 2: value is neither OffsetAndMetadata"),
    ("[g,t,0]::NULL\n[g,t]::NULL\n", "line 2: key is not [group,topic,partition]"),
    ("[g,t,0]::NULL\n\ngarbage\n", "line 3: not a record of the offsets formatter"),
    ('{"key":{"type":1,"data":{"group":"g","topic":"t","partition":0}},"value":{"version":3,'
     '"data":{"metadata":""}}}', "line 1: value data has no integer offset"),
    ('{"key":{"type":1,"data":{"group":"g","topic":"t t","partition":0}},"value":null}',
     "line 1: invalid topic 't t'"),
    ("[g,t,2147483648]::NULL", "line 1: partition 2147483648 is out of range"),
])
def test_malformed_and_cut_records_are_refused_naming_the_line(text, wanted):
    assert wanted in refused(parse_kafka_offsets, text, SRC)


@pytest.mark.parametrize("form", ["text", "json"])
def test_the_bench_dump_parses_into_one_sync_per_record_in_time_order(form):
    from bench.kafka_offsets_dump import TOMBSTONE_EVERY, generate_dump

    result = parse_kafka_offsets(generate_dump(3000, form), SRC)
    assert result.records == 3000
    assert sum(c["offset"] is None for c in result.commands) == 3000 // TOMBSTONE_EVERY
    times = [c["ts"] for c in result.commands]
    assert times == sorted(times)
