"""Bytes of `__consumer_offsets` records, written from Kafka's message schemas
(OffsetCommitKey/Value.json, GroupMetadataKey/Value.json, ConsumerProtocolAssignment.json) by
hand, apart from the decoder in ledger/importers/kafka_records.py: the tests produce these into
the mock cluster, and the byte fixtures of every version come from here (their README says so).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _compact_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return _uvarint(len(raw) + 1) + raw


def _bytes(b: bytes, flexible: bool) -> bytes:
    return (_uvarint(len(b) + 1) if flexible else struct.pack(">i", len(b))) + b


def offset_key(group: str, topic: str, partition: int, key_version: int = 1) -> bytes:
    return struct.pack(">h", key_version) + _string(group) + _string(topic) + struct.pack(
        ">i", partition)


def group_key(group: str) -> bytes:
    return struct.pack(">h", 2) + _string(group)


def offset_value(offset: int, commit_ts: int, version: int = 3, *, metadata: str = "",
                 leader_epoch: int = -1, expire_ts: int = -1) -> bytes:
    out = struct.pack(">hq", version, offset)
    if version >= 3:
        out += struct.pack(">i", leader_epoch)
    out += _compact_string(metadata) if version >= 4 else _string(metadata)
    out += struct.pack(">q", commit_ts)
    if version == 1:
        out += struct.pack(">q", expire_ts)
    if version >= 4:
        out += b"\x00"  # no tagged fields
    return out


def assignment(partitions: Sequence[tuple[str, int]], version: int = 0) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    out = struct.pack(">hi", version, len(by_topic))
    for topic, ps in by_topic.items():
        out += _string(topic) + struct.pack(">i", len(ps)) + b"".join(
            struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)  # no user data


@dataclass(frozen=True)
class MemberSpec:
    member_id: str
    client_id: str
    client_host: str = "/127.0.0.1"
    partitions: tuple[tuple[str, int], ...] = ()
    group_instance_id: str | None = None
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000


def group_value(members: Sequence[MemberSpec], *, version: int = 3, generation: int = 1,
                protocol_type: str = "consumer", protocol: str | None = "range",
                leader: str | None = None, state_ts: int = 1_700_000_000_000) -> bytes:
    flex = version >= 4
    s = _compact_string if flex else _string
    out = struct.pack(">h", version) + s(protocol_type) + struct.pack(">i", generation)
    out += s(protocol) + s(leader if leader is not None else
                           (members[0].member_id if members else None))
    if version >= 2:
        out += struct.pack(">q", state_ts)
    out += _uvarint(len(members) + 1) if flex else struct.pack(">i", len(members))
    for m in members:
        out += s(m.member_id)
        if version >= 3:
            out += s(m.group_instance_id)
        out += s(m.client_id) + s(m.client_host)
        if version >= 1:
            out += struct.pack(">i", m.rebalance_timeout_ms)
        out += struct.pack(">i", m.session_timeout_ms)
        out += _bytes(b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff", flex)  # empty subscription
        out += _bytes(assignment(m.partitions), flex)
        if flex:
            out += b"\x00"
    if flex:
        out += b"\x00"
    return out
