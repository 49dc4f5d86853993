"""Records of `__consumer_offsets` as brokers write them: bytes in, typed records out.

Learnt from Kafka's message schemas (`OffsetCommitKey.json`, `OffsetCommitValue.json`,
`GroupMetadataKey.json`, `GroupMetadataValue.json`, `ConsumerProtocolAssignment.json`) and
Burrow's decoder. Big-endian; a STRING is an int16 length and UTF-8 bytes (-1: null), BYTES an
int32 length; flexible versions (value v4) write a COMPACT_STRING / COMPACT_BYTES as an unsigned
varint of length + 1 (0: null), arrays as a varint of count + 1, and end each struct with tagged
fields (a varint count, then per field a varint tag, a varint size and the bytes).

- key: int16 record type, then its fields. 0 and 1: an offset commit `group, topic,
  partition int32`; 2: group metadata `group`; 3 and above: KIP-848 records (the new group
  coordinator's), skipped.
- offset commit value: int16 version; v0 `offset int64, metadata, commitTimestamp int64`; v1
  adds `expireTimestamp int64`; v2 as v0; v3 `offset, leaderEpoch int32, metadata,
  commitTimestamp`; v4 as v3, flexible.
- group metadata value: int16 version; `protocolType, generation int32, protocol?, leader?,
  currentStateTimestamp int64 (v2+)`, members `memberId, groupInstanceId? (v3+), clientId,
  clientHost, rebalanceTimeout int32 (v1+), sessionTimeout int32, subscription BYTES,
  assignment BYTES`; v4 flexible.
- a null value: a tombstone (the offset, or for group metadata the group, was removed).

A member's assignment (protocol type `consumer`) is Kafka's ConsumerProtocolAssignment: int16
version, then `[topic STRING, [partition int32]]` and user data; versions above the known ones
are read with the known layout, as Kafka's clients do. Pure: no I/O, no ledger rules.
"""

from __future__ import annotations

import struct

import msgspec

OFFSET_COMMIT_TYPES = (0, 1)
GROUP_METADATA_TYPE = 2
VALUE_VERSION_MAX = 4
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_COMMIT_V3_HEAD = struct.Struct(">hqih")  # version, offset, leaderEpoch, metadata length


class UndecodableRecord(ValueError):
    """A record that is not what its version says: names the field where reading failed."""


class OffsetCommit(msgspec.Struct, frozen=True, gc=False):
    """A group committed `offset` (the next to consume) on a partition at `commit_ts` (ms)."""

    group: str
    topic: str
    partition: int
    offset: int
    commit_ts: int
    metadata: str | None = None
    leader_epoch: int | None = None
    expire_ts: int | None = None
    value_version: int = 0


class OffsetTombstone(msgspec.Struct, frozen=True, gc=False):
    """The offset of a group on a partition was removed (expired or deleted)."""

    group: str
    topic: str
    partition: int


class Member(msgspec.Struct, frozen=True, gc=False):
    """A group member as the coordinator stored it; `assignment` is the raw protocol bytes."""

    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int | None = None
    group_instance_id: str | None = None
    subscription: bytes = b""
    assignment: bytes = b""


class GroupMetadata(msgspec.Struct, frozen=True, gc=False):
    """A group's membership after a rebalance (or its Empty state): who the members are."""

    group: str
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: tuple[Member, ...]
    state_ts: int | None = None
    value_version: int = 0


class GroupTombstone(msgspec.Struct, frozen=True, gc=False):
    """The group was removed from the coordinator."""

    group: str


class Skipped(msgspec.Struct, frozen=True, gc=False):
    """A record the ledger has no use for (a KIP-848 record, a record without key)."""

    reason: str


Record = OffsetCommit | OffsetTombstone | GroupMetadata | GroupTombstone | Skipped


class _Reader:
    """A cursor over one key or value; every read names its field when the bytes run out."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def _take(self, n: int, field: str) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise UndecodableRecord(f"{field}: needs {n} byte(s) at byte {self.pos}, "
                                    f"{len(self.data) - self.pos} left")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def int16(self, field: str) -> int:
        return _I16.unpack(self._take(2, field))[0]

    def int32(self, field: str) -> int:
        return _I32.unpack(self._take(4, field))[0]

    def int64(self, field: str) -> int:
        return _I64.unpack(self._take(8, field))[0]

    def uvarint(self, field: str) -> int:
        shift = value = 0
        while True:
            b = self._take(1, field)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise UndecodableRecord(f"{field}: varint longer than 5 bytes")

    def _text(self, raw: bytes, field: str) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise UndecodableRecord(f"{field}: not UTF-8 ({e.reason} at byte {e.start})") from None

    def string(self, field: str, flexible: bool = False) -> str | None:
        n = self.uvarint(field) - 1 if flexible else self.int16(field)
        if n < 0:
            if n != -1:
                raise UndecodableRecord(f"{field}: negative length {n}")
            return None
        return self._text(self._take(n, field), field)

    def required(self, field: str, flexible: bool = False) -> str:
        value = self.string(field, flexible)
        if value is None:
            raise UndecodableRecord(f"{field}: null where a string is required")
        return value

    def bytes_(self, field: str, flexible: bool = False) -> bytes:
        n = self.uvarint(field) - 1 if flexible else self.int32(field)
        return b"" if n == -1 else self._take(n, field)

    def count(self, field: str, flexible: bool = False) -> int:
        n = self.uvarint(field) - 1 if flexible else self.int32(field)
        if n < -1:
            raise UndecodableRecord(f"{field}: negative count {n}")
        return max(n, 0)

    def tagged_fields(self, field: str) -> None:
        """Skip a struct's tagged fields (none is known in these schemas)."""
        for _ in range(self.uvarint(f"{field} tagged fields")):
            self.uvarint(f"{field} tag")
            self._take(self.uvarint(f"{field} tag size"), f"{field} tagged field")


def decode_record(key: bytes | None, value: bytes | None) -> Record:
    """One record of the offsets topic; raises UndecodableRecord naming what is wrong."""
    if not key:
        return Skipped("null_key")
    fast = _offset_key(key)
    if fast is not None:
        group, topic, partition = fast
        if value is None:
            return OffsetTombstone(group, topic, partition)
        return _offset_value(value, group, topic, partition)
    r = _Reader(key)
    kind = r.int16("key type")
    if kind in OFFSET_COMMIT_TYPES:
        group, topic = r.required("key group"), r.required("key topic")
        partition = r.int32("key partition")
        if value is None:
            return OffsetTombstone(group, topic, partition)
        return _offset_value(value, group, topic, partition)
    if kind == GROUP_METADATA_TYPE:
        group = r.required("key group")
        if value is None:
            return GroupTombstone(group)
        return _group_value(value, group)
    if kind < 0:
        raise UndecodableRecord(f"key type {kind} is negative")
    return Skipped("kip848_record")


def _offset_key(key: bytes) -> tuple[str, str, int] | None:
    """An offset commit key in a few slices (the bulk of the topic); None: the general path
    (another type, or bytes that are not a whole key: it names the field)."""
    if len(key) < 8 or key[0] != 0 or key[1] > 1:
        return None
    n = _I16.unpack_from(key, 2)[0]
    end = 4 + n
    if n < 0 or len(key) < end + 6:
        return None
    m = _I16.unpack_from(key, end)[0]
    tail = end + 2 + m
    if m < 0 or len(key) < tail + 4:
        return None
    try:
        return (key[4:end].decode("utf-8"), key[end + 2:tail].decode("utf-8"),
                _I32.unpack_from(key, tail)[0])
    except UnicodeDecodeError:
        return None


def _offset_value(value: bytes, group: str, topic: str, partition: int) -> OffsetCommit:
    if len(value) >= _COMMIT_V3_HEAD.size:  # the common case in one unpack: v3, metadata inline
        version, offset, epoch, n = _COMMIT_V3_HEAD.unpack_from(value)
        end = _COMMIT_V3_HEAD.size + n
        if version == 3 and n >= 0 and len(value) >= end + 8:
            try:
                metadata = value[_COMMIT_V3_HEAD.size:end].decode("utf-8")
            except UnicodeDecodeError:
                pass  # the general path names the field
            else:
                return OffsetCommit(group, topic, partition, offset, _I64.unpack_from(value, end)[0],
                                    metadata, epoch, None, 3)
    r = _Reader(value)
    version = r.int16("value version")
    if not 0 <= version <= VALUE_VERSION_MAX:
        raise UndecodableRecord(f"offset commit value version {version} is unknown "
                                f"(0-{VALUE_VERSION_MAX})")
    flexible = version >= 4
    offset = r.int64("offset")
    epoch = r.int32("leaderEpoch") if version >= 3 else None
    metadata = r.string("metadata", flexible)
    commit_ts = r.int64("commitTimestamp")
    expire_ts = r.int64("expireTimestamp") if version == 1 else None
    if flexible:
        r.tagged_fields("offset commit value")
    return OffsetCommit(group, topic, partition, offset, commit_ts, metadata, epoch, expire_ts,
                        version)


def _group_value(value: bytes, group: str) -> GroupMetadata:
    r = _Reader(value)
    version = r.int16("value version")
    if not 0 <= version <= VALUE_VERSION_MAX:
        raise UndecodableRecord(f"group metadata value version {version} is unknown "
                                f"(0-{VALUE_VERSION_MAX})")
    flex = version >= 4
    protocol_type = r.required("protocolType", flex)
    generation = r.int32("generation")
    protocol = r.string("protocol", flex)
    leader = r.string("leader", flex)
    state_ts = r.int64("currentStateTimestamp") if version >= 2 else None
    members = []
    for i in range(r.count("members", flex)):
        f = f"member {i}"
        member_id = r.required(f"{f} memberId", flex)
        instance = r.string(f"{f} groupInstanceId", flex) if version >= 3 else None
        client_id = r.required(f"{f} clientId", flex)
        client_host = r.required(f"{f} clientHost", flex)
        rebalance = r.int32(f"{f} rebalanceTimeout") if version >= 1 else None
        session = r.int32(f"{f} sessionTimeout")
        subscription = r.bytes_(f"{f} subscription", flex)
        assignment = r.bytes_(f"{f} assignment", flex)
        if flex:
            r.tagged_fields(f)
        members.append(Member(member_id, client_id, client_host, session, rebalance, instance,
                              subscription, assignment))
    if flex:
        r.tagged_fields("group metadata value")
    return GroupMetadata(group, protocol_type, generation, protocol, leader, tuple(members),
                         state_ts, version)


def assigned_partitions(assignment: bytes) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of a consumer-protocol assignment; [] for none."""
    if not assignment:
        return []
    r = _Reader(assignment)
    r.int16("assignment version")
    out = []
    for _ in range(r.count("assignment topics")):
        topic = r.required("assignment topic")
        for _ in range(r.count("assignment partitions")):
            out.append((topic, r.int32("assignment partition")))
    return out


def owners(metadata: GroupMetadata) -> dict[tuple[str, int], str]:
    """Which client id owns each partition after this rebalance (consumer groups only: other
    protocol types, Kafka Connect's for one, assign no partitions). Raises UndecodableRecord
    when an assignment is not the consumer protocol's."""
    if metadata.protocol_type != "consumer":
        return {}
    return {tp: m.client_id for m in metadata.members for tp in assigned_partitions(m.assignment)}
