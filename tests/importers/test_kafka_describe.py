"""kafka-consumer-groups --describe output of each layout gives exact bounds and syncs."""

from __future__ import annotations

import pytest

from ledger.importers.kafka_describe import parse_kafka_describe
from tests.importers.helpers import Expect, fixture, refused

SRC = "kafka-describe:out.txt"


expect = Expect(SRC)
bounds, sync = expect.bounds, expect.sync


def test_docs_sample_without_group_column_takes_the_given_group():
    result = parse_kafka_describe(fixture("kafka_describe_2.0_docs.txt"), SRC, group="my-group")
    assert result.commands == [
        bounds("topic1", 0, 855809), bounds("topic2", 0, 803290), bounds("topic2", 1, 803288),
        bounds("topic3", 0, 395308), bounds("topic3", 1, 398817), bounds("topic3", 2, 398812),
        sync("my-group", "topic3", 0, 241019), sync("my-group", "topic2", 1, 520678),
        sync("my-group", "topic3", 1, 241018), sync("my-group", "topic1", 0, 854144),
        sync("my-group", "topic2", 0, 460537), sync("my-group", "topic3", 2, 243655)]
    assert result.records == 6 and result.groups == ("my-group",) and result.skipped == {}


def test_output_without_group_column_and_without_group_is_refused_saying_so():
    message = refused(parse_kafka_describe, fixture("kafka_describe_2.0_docs.txt"), SRC)
    assert message.startswith("line 1: this output has no GROUP column")
    assert "give the group" in message


def test_printed_rows_without_committed_offset_give_bounds_only():
    result = parse_kafka_describe(fixture("kafka_describe_group_column_printed.txt"), SRC)
    ends = {6: 0, 3: 0, 5: 0, 2: 0, 1: 0, 0: 0, 4: 8}
    assert result.commands == [bounds("test-events", q, ends[q]) for q in range(7)]
    assert result.skipped == {"no_committed_offset": 7}
    assert result.groups == ("console-consumer-27941",)


EXPECTED_ALL_GROUPS = [
    bounds("orders", 0, 1250), bounds("orders", 1, 900), bounds("orders", 2, 77),
    bounds("payments.settled.v2", 0, 40),
    sync("orders-service", "orders", 0, 1200), sync("orders-service", "orders", 2, 77),
    sync("audit.replay-with-a-long-group-name", "payments.settled.v2", 0, 31)]
NO_MEMBERS = "Consumer group 'audit.replay-with-a-long-group-name' has no active members."


def test_scala_all_groups_with_widths_per_group_notes_and_a_member_without_partition():
    result = parse_kafka_describe(fixture("kafka_describe_3.7_all_groups.txt"), SRC)
    assert result.commands == EXPECTED_ALL_GROUPS
    assert result.notes == (NO_MEMBERS,)
    assert result.skipped == {"member_without_partition": 1, "no_committed_offset": 1}
    assert result.records == 4


def test_java_3_8_layout_without_blank_lines_gives_the_same_commands():
    text = fixture("kafka_describe_3.8_all_groups.txt")
    assert not text.endswith("\n") and "consumer-orders-1\nConsumer group 'audit" in text
    result = parse_kafka_describe(text, SRC)
    assert result.commands == EXPECTED_ALL_GROUPS
    assert result.notes == (NO_MEMBERS,)


def test_4_0_verbose_leader_epoch_column_is_read_around():
    result = parse_kafka_describe(fixture("kafka_describe_4.0_verbose.txt"), SRC)
    assert result.commands == [
        bounds("orders", 0, 1250), bounds("orders", 1, 900), bounds("orders", 2, 77),
        bounds("payments.settled.v2", 0, 40),
        sync("orders-service", "orders", 0, 1200), sync("orders-service", "orders", 2, 77),
        sync("search-indexer", "orders", 0, 1100),
        sync("audit.replay-with-a-long-group-name", "payments.settled.v2", 0, 31)]
    assert result.notes == ("Warning: Consumer group 'search-indexer' is rebalancing.", NO_MEMBERS)


def test_a_group_given_with_a_group_column_takes_only_that_group():
    result = parse_kafka_describe(fixture("kafka_describe_3.7_all_groups.txt"), SRC,
                                  group="orders-service")
    assert result.commands == EXPECTED_ALL_GROUPS[:3] + EXPECTED_ALL_GROUPS[4:6]
    assert result.skipped["other_group"] == 2


def test_the_highest_end_offset_of_a_queue_described_twice_wins():
    text = ("GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID\n"
            "a     t     0         5              10             5   -           -    -\n"
            "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID\n"
            "b     t     0         7              12             5   -           -    -\n")
    result = parse_kafka_describe(text, SRC)
    assert result.commands == [bounds("t", 0, 12), sync("a", "t", 0, 5), sync("b", "t", 0, 7)]


def test_an_error_and_its_stack_trace_become_a_note():
    text = ("\nError: Executing consumer group command failed due to timed out\n"
            "java.util.concurrent.ExecutionException: org.apache.kafka.common.errors."
            "TimeoutException: timed out\n"
            "\tat java.base/java.util.concurrent.CompletableFuture.reportGet(Unknown Source)\n"
            "Caused by: org.apache.kafka.common.errors.TimeoutException: timed out\n"
            "\t... 5 more\n")
    result = parse_kafka_describe(text, SRC)
    assert result.commands == []
    assert result.notes == ("Error: Executing consumer group command failed due to timed out",)
    assert result.skipped == {"stack_trace": 4}


HEADER = ("GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG         "
          "    CONSUMER-ID     HOST            CLIENT-ID\n")


@pytest.mark.parametrize(("body", "wanted"), [
    ("g               t               0          5               10              4          "
     "     -               -               -\n", "line 2: LAG 4 is not LOG-END-OFFSET - "
     "CURRENT-OFFSET (10 - 5)"),
    ("g               t               0          5               100             9",
     "line 2: LAG 9 is not LOG-END-OFFSET - CURRENT-OFFSET (100 - 5)"),
    ("g               t               0          5               1", "line 2: row has 4 columns"),
    ("g               t               0          5", "line 2: row has 3 columns"),
    ("g               t               x          5               10              5          "
     "     -               -               -\n", "line 2: partition 'x' is not an integer"),
    ("my group        t               0          5               10              5          "
     "     -               -               -\n", "line 2: GROUP cell 'my group' holds blanks"),
    ("g               t/x             0          5               10              5          "
     "     -               -               -\n", "line 2: invalid topic 't/x'"),
    ("g      t  0  5  10  5  -  -  -\n", "line 2: GROUP cell 'g      t  0  5' holds blanks"),
])
def test_malformed_or_cut_rows_are_refused_naming_the_line(body, wanted):
    assert wanted in refused(parse_kafka_describe, HEADER + body, SRC)


def test_a_cut_file_without_header_is_refused():
    message = refused(parse_kafka_describe, "", SRC)
    assert message.startswith("line 1: no kafka-consumer-groups --describe header line")


def test_rows_before_any_header_are_refused():
    message = refused(parse_kafka_describe, "g t 0 5 10 5 - - -\n" + HEADER, SRC)
    assert message.startswith("line 1: not a kafka-consumer-groups --describe line")


@pytest.mark.parametrize(("header", "view"), [
    ("GROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS", "--members"),
    ("GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE    #MEMBERS",
     "--state"),
    ("GROUP                          TOPIC                          PARTITION  NEW-OFFSET",
     "--reset-offsets"),
])
def test_other_views_of_the_tool_are_refused_naming_them(header, view):
    message = refused(parse_kafka_describe, "\n" + header + "\n", SRC)
    assert message.startswith("line 2: this is the header of `kafka-consumer-groups")
    assert view in message


def test_an_unknown_line_between_rows_is_refused():
    text = HEADER + "g               t               0          5               10              5\n"
    message = refused(parse_kafka_describe, text + "something else\n", SRC)
    assert message.startswith("line 3: row does not line up")
