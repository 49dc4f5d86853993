"""Records of `__consumer_offsets` -> the commands one batch of the follower sends. Pure.

Each offset commit becomes a `sync` at its commitTimestamp (source `kafka:<cluster>`) naming the
client that owns the partition since the group's last rebalance (its group metadata record);
an offset tombstone a `sync` to null (recorded as an expire); a group tombstone a `group_delete`
from the source. A batch's commands are sorted by time (stable), so the records of the offsets
topic's partitions interleave as they happened; a group's records (all in one partition, in
order) never pass each other: each takes at least the time of the group's record before it.

The follower's position per offsets-topic partition rides in the same batch, as the committed
offset of the group `offset-ledger.follow.<cluster>` on `(<offsets topic>, partition)`: the
follower is a consumer of the offsets topic, and the ledger records consumers. So the position
is durable with the events it produced (one append), survives kill -9, is carried by the
checkpoints and the view like any offset, and `lag` of that group is the follower's own lag.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ledger.errors import InvalidInput
from ledger.importers.kafka_records import (
    GroupMetadata,
    GroupTombstone,
    OffsetCommit,
    OffsetTombstone,
    Skipped,
    UndecodableRecord,
    decode_record,
    owners,
)
from ledger.limits import OFFSET_MAX, QUEUE_ID_MAX, ahead_of_clock, check_name

FOLLOW_GROUP_PREFIX = "offset-ledger.follow."
OFFSETS_TOPIC_DEFAULT = "__consumer_offsets"


def follow_group(cluster: str) -> str:
    """The group whose offsets are the follower's positions in the offsets topic."""
    check_name(cluster, "cluster")
    return check_name(FOLLOW_GROUP_PREFIX + cluster, "cluster")


def source_of(cluster: str) -> str:
    return f"kafka:{check_name(cluster, 'cluster')}"


@dataclass
class FollowCounts:
    """What the follower read and what became of it, for its status line and summary."""

    records: int = 0
    commits: int = 0
    offset_tombstones: int = 0
    group_metadata: int = 0
    group_tombstones: int = 0
    undecodable: int = 0
    future: int = 0
    filtered: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"records": self.records, "commits": self.commits,
                "offset_tombstones": self.offset_tombstones,
                "group_metadata": self.group_metadata, "group_tombstones": self.group_tombstones,
                "undecodable": self.undecodable, "future": self.future,
                "filtered": self.filtered, "skipped": dict(sorted(self.skipped.items()))}


class Translator:
    """Decodes records as they arrive and hands out each batch's commands (`take`)."""

    def __init__(self, *, cluster: str, offsets_topic: str = OFFSETS_TOPIC_DEFAULT,
                 groups: str | None = None, clock: Callable[[], int],
                 log: Callable[[str], None] = lambda line: None) -> None:
        self.source = source_of(cluster)
        self.group = follow_group(cluster)
        self.offsets_topic = check_name(offsets_topic, "offsets topic")
        self.groups_glob = groups
        self.clock = clock
        self.log = log
        self.counts = FollowCounts()
        self.owners: dict[str, dict[tuple[str, int], str]] = {}
        #: Queues a followed group commits on: the follower polls their bounds.
        self.followed: set[tuple[str, int]] = set()
        self.groups_seen: set[str] = set()
        self._items: list[tuple[int, int, dict[str, Any]]] = []
        self._group_ts: dict[str, int] = {}
        self._positions: dict[int, int] = {}
        self._newest_record_ts: int | None = None
        self._clock_seen = clock()  # read again only for a time ahead of it
        #: The newest record time read so far (never reset): how recent the follower is.
        self.latest_record_ts: int | None = None

    # ------------------------------------------------------------------ records
    def learn(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> None:
        """A record before the resumed position (read again after a restart): only what the
        follower keeps in memory is rebuilt from it (owners, followed queues), nothing is sent."""
        try:
            record = decode_record(key, value)
        except UndecodableRecord:
            return
        if isinstance(record, Skipped) or not self._followed(record.group):
            return
        if isinstance(record, GroupMetadata):
            self._set_owners(record, partition, offset, quiet=True)
        elif isinstance(record, GroupTombstone):
            self.owners.pop(record.group, None)
        elif isinstance(record, OffsetCommit) and _queue_ok(record.topic, record.partition):
            self.followed.add((record.topic, record.partition))

    def add(self, partition: int, offset: int, key: bytes | None, value: bytes | None,
            record_ts: int | None) -> None:
        """One record read at (partition, offset); `record_ts` is the record's own time (a
        tombstone's only time), None when the broker gave none."""
        self._positions[partition] = offset + 1
        self.counts.records += 1
        if (record_ts is not None and record_ts > 0
                and (self._newest_record_ts is None or record_ts > self._newest_record_ts)
                and not ahead_of_clock(record_ts, self.clock())):
            self._newest_record_ts = record_ts
            if self.latest_record_ts is None or record_ts > self.latest_record_ts:
                self.latest_record_ts = record_ts
        where = _Where(self.offsets_topic, partition, offset)
        try:
            record = decode_record(key, value)
        except UndecodableRecord as e:
            self.counts.undecodable += 1
            self.log(f"{where}: undecodable record skipped: {e}")
            return
        if isinstance(record, Skipped):
            self.counts.skipped[record.reason] += 1
            return
        if not self._followed(record.group):
            self.counts.filtered += 1
            return
        if isinstance(record, GroupMetadata):
            self.counts.group_metadata += 1
            self._set_owners(record, partition, offset, quiet=False)
            return
        try:
            check_name(record.group, "group")
            if not isinstance(record, GroupTombstone):
                check_name(record.topic, "topic")
        except InvalidInput as e:
            self.counts.undecodable += 1
            self.log(f"{where}: record skipped: {e}")
            return
        if isinstance(record, GroupTombstone):
            if self._queue(record.group, record_ts, where,
                           {"op": "group_delete", "group": record.group, "source": self.source}):
                self.counts.group_tombstones += 1
                self.owners.pop(record.group, None)
            return
        if not _queue_ok(record.topic, record.partition):
            self.counts.undecodable += 1
            self.log(f"{where}: record skipped: partition {record.partition} out of range")
            return
        cmd: dict[str, Any] = {"op": "sync", "group": record.group, "topic": record.topic,
                               "queue_id": record.partition, "offset": None,
                               "source": self.source}
        if isinstance(record, OffsetTombstone):
            at = record_ts
        else:
            assert isinstance(record, OffsetCommit)
            if not 0 <= record.offset <= OFFSET_MAX:
                self.counts.skipped["negative_offset"] += 1
                return
            cmd["offset"] = record.offset
            owner = self.owners.get(record.group, {}).get((record.topic, record.partition))
            if owner is not None:
                cmd["client"] = owner
            at = record.commit_ts
        if not self._queue(record.group, at, where, cmd):
            return
        if isinstance(record, OffsetTombstone):
            self.counts.offset_tombstones += 1
        else:
            self.counts.commits += 1
        self.groups_seen.add(record.group)
        self.followed.add((record.topic, record.partition))

    def _followed(self, group: str) -> bool:
        return self.groups_glob is None or fnmatch.fnmatchcase(group, self.groups_glob)

    def _set_owners(self, record: GroupMetadata, partition: int, offset: int,
                    quiet: bool) -> None:
        try:
            self.owners[record.group] = {tp: client for tp, client in owners(record).items()
                                         if _name_ok(client)}
        except UndecodableRecord as e:
            self.owners.pop(record.group, None)
            if not quiet:
                self.counts.undecodable += 1
                self.log(f"{self.offsets_topic}:{partition} offset {offset}: assignment of group "
                         f"{record.group!r} undecodable, owners unknown: {e}")

    def _queue(self, group: str, at: int | None, where: _Where, cmd: dict[str, Any]) -> bool:
        """Keep a command with its time: never before the group's previous record's time, and
        a time beyond the ledger's clock is skipped and counted (it must not move the clock)."""
        if at is not None and at > 0:
            if at > self._clock_seen and ahead_of_clock(at, self._clock_seen):
                self._clock_seen = self.clock()
            if ahead_of_clock(at, self._clock_seen):
                self.counts.future += 1
                self.log(f"{where}: time {at} is ahead of the clock: record skipped")
                return False
            at = max(at, self._group_ts.get(group, at))
        else:
            at = self._group_ts.get(group) or self._newest_record_ts
        if at is not None:
            self._group_ts[group] = at
            cmd["ts"] = at
        self._items.append((at if at is not None else -1, len(self._items), cmd))
        return True

    # ------------------------------------------------------------------ batches
    def pending(self) -> bool:
        return bool(self._positions)

    def take(self) -> tuple[list[dict[str, Any]], dict[int, int]]:
        """The batch's commands in time order, then the follower's new positions (as syncs of
        its group, at the batch's newest time); and the positions by partition."""
        items = sorted(self._items)
        commands = [cmd for _, _, cmd in items]
        newest = max((ts for ts, _, _ in items if ts >= 0), default=self._newest_record_ts)
        positions = dict(sorted(self._positions.items()))
        for partition, position in positions.items():
            cmd = {"op": "sync", "group": self.group, "topic": self.offsets_topic,
                   "queue_id": partition, "offset": position, "source": self.source}
            if newest is not None:
                cmd["ts"] = newest
            commands.append(cmd)
        self._items, self._group_ts, self._positions = [], {}, {}
        self._newest_record_ts = None
        return commands, positions


class _Where:
    """Where a record was read, made text only for a line about it."""

    __slots__ = ("topic", "partition", "offset")

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset

    def __str__(self) -> str:
        return f"{self.topic}:{self.partition} offset {self.offset}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def bounds_commands(bounds: dict[tuple[str, int], tuple[int, int, int | None]],
                    source: str) -> list[dict[str, Any]]:
    """A watermark poll as commands: per queue its (earliest, latest, newest message's time):
    MaxOffset raised by a queue_append stored at that time, MinOffset by a queue_truncate."""
    out = []
    for (topic, partition), (low, high, newest_ts) in sorted(bounds.items()):
        cmd: dict[str, Any] = {"op": "queue_bounds", "topic": topic, "queue_id": partition,
                               "max_offset": high, "min_offset": min(low, high),
                               "source": source}
        if newest_ts is not None and newest_ts > 0:
            cmd["store_time"] = newest_ts
        out.append(cmd)
    return out


def _queue_ok(topic: str, partition: int) -> bool:
    return 0 <= partition <= QUEUE_ID_MAX and _name_ok(topic)


def _name_ok(name: str) -> bool:
    try:
        check_name(name, "name")
    except InvalidInput:
        return False
    return True
