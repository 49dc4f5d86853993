"""Which shard holds a group: Kafka's own placement of a group in `__consumer_offsets`
(`GroupMetadataManager.partitionFor`: `Utils.abs(groupId.hashCode) % partitionCount`), so that a
followed Kafka offsets partition maps to one shard when the counts agree.

`java_string_hash` is Java's `String.hashCode`: `s[0]*31^(n-1) + ... + s[n-1]` over the UTF-16
code units, in 32-bit two's complement. Kafka's `Utils.abs` maps `Integer.MIN_VALUE` (the hash
of "polygenelubricants", for one) to 0 where `Math.abs` would leave it negative.
"""

from __future__ import annotations

from functools import lru_cache

INT32_MIN = -(2**31)
_MASK = 2**32 - 1


def java_string_hash(text: str) -> int:
    """Java's `String.hashCode` of `text` (a signed 32-bit int)."""
    h = 0
    if text.isascii():  # one code unit per character: the common case, and names are ASCII
        for unit in text.encode("ascii"):
            h = (31 * h + unit) & _MASK
    else:
        data = text.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return h - 2**32 if h > 2**31 - 1 else h


def kafka_abs(n: int) -> int:
    """Kafka's `Utils.abs`: |n|, except Integer.MIN_VALUE -> 0."""
    return 0 if n == INT32_MIN else abs(n)


@lru_cache(maxsize=1 << 16)
def shard_of(group: str, shards: int) -> int:
    """The index of the shard that holds `group` among `shards` shards."""
    if shards < 1:
        raise ValueError(f"a cluster needs at least one shard, not {shards}")
    return kafka_abs(java_string_hash(group)) % shards
