"""A group's shard is Kafka's placement of the group in `__consumer_offsets`:
`Utils.abs(groupId.hashCode) % partitions`. The expected values were printed by Java 17's
`String.hashCode` (and Kafka's `Utils.abs`) on this machine; "my-group" -> 12 and
"kafka-txn-0" -> 30 of 50 partitions are also what Strimzi's `kafka-cp` helper prints."""

from __future__ import annotations

from collections import Counter

import pytest

from ledger.cluster import java_string_hash, kafka_abs, shard_of

# (text, String.hashCode(), abs % 50, abs % 4, abs % 3), from java H.java
JAVA = [
    ("", 0, 0, 0, 0),
    ("a", 97, 47, 1, 1),
    ("my-group", -1906497762, 12, 2, 0),
    ("kafka-txn-0", -1469191130, 30, 2, 2),
    ("billing", -109829509, 9, 1, 1),
    ("polygenelubricants", -2147483648, 0, 0, 0),
    ("GydZG_", -2147483648, 0, 0, 0),
    ("orders-consumer", -1204742690, 40, 2, 2),
    ("g17", 100557, 7, 1, 0),
    ("abcdefghijklmnopqrstuvwxyz0123456789", 1478768498, 48, 2, 2),
    ("%RETRY%billing", -1052580551, 1, 3, 2),
    ("CID_ONS|x", 551613935, 35, 3, 2),
    ("\U0001F600", 1772899, 49, 3, 1),  # a surrogate pair: two UTF-16 code units
    ("z" * 52, -1531216768, 18, 0, 1),  # overflows int32 many times
]


@pytest.mark.parametrize(("text", "hashed", "of50", "of4", "of3"), JAVA)
def test_the_shard_of_a_group_is_kafkas_partition_of_it(text: str, hashed: int, of50: int,
                                                        of4: int, of3: int) -> None:
    assert java_string_hash(text) == hashed
    assert (shard_of(text, 50), shard_of(text, 4), shard_of(text, 3)) == (of50, of4, of3)


def test_kafka_abs_maps_the_smallest_int_to_zero() -> None:
    assert kafka_abs(-(2**31)) == 0
    assert kafka_abs(-5) == 5
    assert kafka_abs(7) == 7


def test_groups_spread_over_the_shards() -> None:
    counts = Counter(shard_of(f"group-{i}", 4) for i in range(4000))
    assert set(counts) == {0, 1, 2, 3}
    assert max(counts.values()) < 1.1 * min(counts.values())


def test_a_cluster_needs_a_shard() -> None:
    with pytest.raises(ValueError, match="at least one shard"):
        shard_of("g", 0)
