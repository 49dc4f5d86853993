"""The pure part of the follower: records -> one batch's commands (time order, owners from
group metadata, tombstones, the follower's positions in the same batch)."""

from __future__ import annotations

from ledger.follow.translate import Translator, bounds_commands
from tests.support import kafka_encode as enc

NOW = 1_795_000_000_000


def _translator(**kw: object) -> tuple[Translator, list[str]]:
    logged: list[str] = []
    return Translator(cluster="prod", clock=lambda: NOW, log=logged.append, **kw), logged


def test_a_batch_is_in_time_order_and_ends_with_the_positions_it_reached() -> None:
    tr, _ = _translator()
    tr.add(0, 7, enc.offset_key("a", "t", 0), enc.offset_value(5, NOW - 300), NOW - 290)
    tr.add(1, 3, enc.offset_key("b", "t", 1), enc.offset_value(9, NOW - 400), NOW - 390)
    tr.add(0, 8, enc.offset_key("a", "t", 0), enc.offset_value(6, NOW - 350), NOW - 280)
    commands, positions = tr.take()
    assert [(c["group"], c["offset"], c.get("ts")) for c in commands] == [
        ("b", 9, NOW - 400),
        ("a", 5, NOW - 300),
        ("a", 6, NOW - 300),  # a group's record never passes the one before it
        ("offset-ledger.follow.prod", 9, NOW - 300),
        ("offset-ledger.follow.prod", 4, NOW - 300)]
    assert positions == {0: 9, 1: 4}
    assert [c["queue_id"] for c in commands[-2:]] == [0, 1]
    assert {c["topic"] for c in commands[-2:]} == {"__consumer_offsets"}
    assert tr.take() == ([], {})


def test_owners_come_from_the_last_rebalance_and_go_with_the_group() -> None:
    tr, _ = _translator()
    members = [enc.MemberSpec("m1", "c1", partitions=(("t", 0),)),
               enc.MemberSpec("m2", "c2", partitions=(("t", 1),))]
    tr.add(0, 0, enc.group_key("g"), enc.group_value(members), NOW - 100)
    tr.add(0, 1, enc.offset_key("g", "t", 1), enc.offset_value(3, NOW - 90), NOW - 90)
    tr.add(0, 2, enc.offset_key("g", "t", 0), None, NOW - 80)
    tr.add(0, 3, enc.group_key("g"), None, NOW - 70)
    tr.add(0, 4, enc.offset_key("g", "t", 1), enc.offset_value(4, NOW - 60), NOW - 60)
    commands, _ = tr.take()
    assert [(c["op"], c.get("offset"), c.get("client")) for c in commands[:-1]] == [
        ("sync", 3, "c2"), ("sync", None, None), ("group_delete", None, None),
        ("sync", 4, None)]
    assert commands[1]["ts"] == NOW - 80  # a tombstone's time is its record's
    assert (tr.counts.group_metadata, tr.counts.offset_tombstones,
            tr.counts.group_tombstones) == (1, 1, 1)


def test_other_groups_and_unusable_names_are_skipped_but_the_position_moves() -> None:
    tr, logged = _translator(groups="billing*")
    tr.add(2, 0, enc.offset_key("other", "t", 0), enc.offset_value(1, NOW), NOW)
    tr.add(2, 1, enc.offset_key("billing one", "t", 0), enc.offset_value(1, NOW), NOW)
    commands, positions = tr.take()
    assert [c["group"] for c in commands] == ["offset-ledger.follow.prod"]
    assert positions == {2: 2}
    assert (tr.counts.filtered, tr.counts.undecodable) == (1, 1)
    assert "__consumer_offsets:2 offset 1: record skipped: invalid group" in logged[0]


def test_a_watermark_poll_raises_bounds_at_the_newest_message_time() -> None:
    assert bounds_commands({("t", 1): (4, 10, NOW - 5), ("t", 0): (0, 0, None)}, "kafka:prod") == [
        {"op": "queue_bounds", "topic": "t", "queue_id": 0, "max_offset": 0, "min_offset": 0,
         "source": "kafka:prod"},
        {"op": "queue_bounds", "topic": "t", "queue_id": 1, "max_offset": 10, "min_offset": 4,
         "source": "kafka:prod", "store_time": NOW - 5}]
