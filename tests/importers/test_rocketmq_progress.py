"""mqadmin consumerProgress output of RocketMQ 4.x and 5.x gives exact bounds and syncs."""

from __future__ import annotations

import pytest

from ledger.importers.rocketmq_progress import parse_rocketmq_progress
from tests.importers.helpers import Expect, fixture, refused

SRC = "rocketmq-progress:progress.txt"


expect = Expect(SRC)
bounds, sync = expect.bounds, expect.sync


def test_4_8_printed_rows_of_one_broker_when_a_broker_is_given():
    result = parse_rocketmq_progress(fixture("rocketmq_progress_4.8_printed.txt"), SRC,
                                     "go_client_dev", broker="RaftNode01")
    g = "go_client_dev"
    assert result.commands == [
        bounds("%RETRY%go_client_dev", 0, 0), bounds("TestTopic-6", 0, 6006),
        bounds("TestTopic-6", 1, 0),
        sync(g, "%RETRY%go_client_dev", 0, 0), sync(g, "TestTopic-6", 0, 6005),
        sync(g, "TestTopic-6", 1, 0)]
    assert result.skipped == {"log_line": 2, "other_broker": 3}
    assert result.records == 3 and result.groups == (g,)


def test_rows_of_several_brokers_without_a_broker_are_refused_naming_them():
    message = refused(parse_rocketmq_progress, fixture("rocketmq_progress_4.8_printed.txt"), SRC,
                      "go_client_dev")
    assert message.startswith("line 4: rows of 2 brokers (RaftNode00, RaftNode01)")


def test_a_broker_without_rows_is_refused_naming_the_brokers_there():
    message = refused(parse_rocketmq_progress, fixture("rocketmq_progress_4.8_printed.txt"), SRC,
                      "go_client_dev", broker="broker-a")
    assert message == ("broker 'broker-a' has no row; brokers in the output: RaftNode00, "
                       "RaftNode01")


def test_5_5_printed_with_inflight_and_na_times():
    result = parse_rocketmq_progress(fixture("rocketmq_progress_5.5_printed.txt"), SRC,
                                     "BadConsumerGroup")
    ends = {("TestTopic", 4): 1, ("TestTopic2", 2): 1}
    queues = [("%RETRY%BadConsumerGroup_TestTopic", 0), ("%RETRY%BadConsumerGroup_TestTopic2", 0)]
    queues += [(t, q) for t in ("TestTopic", "TestTopic2") for q in range(8)]
    retry_ends = {("%RETRY%BadConsumerGroup_TestTopic", 0): 3,
                  ("%RETRY%BadConsumerGroup_TestTopic2", 0): 3}
    end = {**ends, **retry_ends}
    assert result.commands == [bounds(t, q, end.get((t, q), 0)) for t, q in queues] + [
        sync("BadConsumerGroup", t, q, end.get((t, q), 0)) for t, q in queues]
    assert result.records == 18 and result.skipped == {}


def test_4x_without_client_ip_restores_the_retry_topic_cut_to_32_characters():
    group = "order_consumer_group_for_settlement"
    result = parse_rocketmq_progress(fixture("rocketmq_progress_4.x_no_client_ip.txt"), SRC, group)
    retry = "%RETRY%" + group
    assert result.commands == [
        bounds(retry, 0, 12), bounds("OrderTopic", 0, 1024), bounds("OrderTopic", 1, 998),
        sync(group, retry, 0, 12), sync(group, "OrderTopic", 0, 1000),
        sync(group, "OrderTopic", 1, 998)]


def test_5x_with_client_ip_and_inflight_takes_the_given_broker():
    result = parse_rocketmq_progress(fixture("rocketmq_progress_5.x_client_ip.txt"), SRC, "g",
                                     broker="broker-a")
    assert result.commands == [bounds("OrderTopic", 0, 5000), bounds("OrderTopic", 1, 4870),
                               sync("g", "OrderTopic", 0, 4990), sync("g", "OrderTopic", 1, 4870)]
    assert result.skipped == {"other_broker": 1}


HEADER_4X = ("#Topic                            #Broker Name                      #QID  "
             "#Broker Offset        #Consumer Offset      #Diff                 #LastTime\n")


def row_4x(topic: str, broker: str, qid: int, end: int, committed: int, diff: int) -> str:
    return f"{topic:<32}  {broker:<32}  {qid:<4}  {end:<20}  {committed:<20}  {diff:<20}  N/A\n"


def test_a_topic_that_fills_its_column_is_refused_as_possibly_cut():
    topic = "a_topic_name_of_exactly_32_chars"
    assert len(topic) == 32
    text = HEADER_4X + row_4x(topic, "broker-a", 0, 5, 5, 0) + "\nDiff Total: 0\n"
    message = refused(parse_rocketmq_progress, text, SRC, "g")
    assert message.startswith(f"line 2: topic '{topic}' fills the 32-character column")


def test_a_broker_name_cut_to_its_column_matches_the_broker_it_begins():
    broker = "broker-with-a-very-long-name-in-dc-east"
    text = (HEADER_4X + row_4x("T", broker[:32], 0, 5, 3, 2) + row_4x("T", "other", 0, 9, 9, 0)
            + "\nConsume TPS: 0.0\nDiff Total: 2\n")
    result = parse_rocketmq_progress(text, SRC, "g", broker=broker)
    assert result.commands == [bounds("T", 0, 5), sync("g", "T", 0, 3)]


def test_a_negative_consumer_offset_gives_bounds_only():
    text = HEADER_4X + row_4x("T", "b", 0, 5, -1, 6) + "\nDiff Total: 6\n"
    result = parse_rocketmq_progress(text, SRC, "g")
    assert result.commands == [bounds("T", 0, 5)]
    assert result.skipped == {"no_consumer_offset": 1}


@pytest.mark.parametrize(("text", "wanted"), [
    (HEADER_4X + row_4x("T", "b", 0, 5, 3, 1) + "\nDiff Total: 1\n",
     "line 2: #Diff 1 is not #Broker Offset - #Consumer Offset (5 - 3)"),
    (HEADER_4X + row_4x("T", "b", 0, 5, 3, 2) + row_4x("T", "b", 1, 9, 3, 6),
     "line 3: no `Diff Total:` summary line after the rows: the output is cut short"),
    (HEADER_4X + row_4x("T", "b", 0, 5, 3, 2) + "\nDiff Total: 8\n",
     "line 4: Diff Total 8 is not the sum of the rows' #Diff (2): rows are missing"),
    (HEADER_4X + "T                                 b                                 0     5",
     "line 2: row has 4 columns, expected 6 before #LastTime"),
    (HEADER_4X + row_4x("T", "b", 0, 5, 3, 2).replace("N/A", "N/A extra") + "\nDiff Total: 2\n",
     "line 2: #LastTime 'N/A extra' is not a time"),
    (HEADER_4X + row_4x("T", "b", 0, 5, 3, 2) + "\nDiff Total: 2\n" + row_4x("T", "b", 1, 1, 1, 0),
     "line 5: a row after the summary lines"),
    ("T  b  0  5  3  2  N/A\n", "line 1: not a consumerProgress line"),
    ("", "line 1: no `mqadmin consumerProgress` header"),
    (HEADER_4X + row_4x("T", "b", 0, 5, 3, 2).replace("T ", "T;") + "\nDiff Total: 2\n",
     "line 2: invalid topic 'T;'"),
    ("#Group                            #Count  #Version                 #Type  #Model  #TPS  "
     "#Diff Total\n", "line 1: this is `mqadmin brokerConsumeStats` (or consumerProgress without"),
    (HEADER_4X.replace("#QID", "#Queue"), "line 1: unknown consumerProgress header"),
])
def test_malformed_and_cut_outputs_are_refused_naming_the_line(text, wanted):
    assert wanted in refused(parse_rocketmq_progress, text, SRC, "g")


def test_inflight_total_is_checked_against_the_rows():
    text = fixture("rocketmq_progress_5.x_client_ip.txt").replace(
        "Consume Inflight Total: 18", "Consume Inflight Total: 17")
    message = refused(parse_rocketmq_progress, text, SRC, "g", broker="broker-a")
    assert message.startswith("line 8: Consume Inflight Total 17 is not the sum")
