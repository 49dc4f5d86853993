"""The fold: pure rules of DESIGN.md, no I/O.

`State.apply(kind, ...)` is the only mutator (state + event -> state); the `decide_*` methods
turn a command into events (or a refusal with a reason) and apply them as they go, so a replay
of the log through `apply` rebuilds exactly the state the commands built. Time is always passed
in (`now_ms`), never read.
"""

from __future__ import annotations

import bisect
import json
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field

from ledger.errors import InvalidInput
from ledger.fold.events import (
    Clamp,
    Delete,
    Event,
    EventBuffer,
    Expire,
    GroupConfig,
    Initial,
    QueueAppend,
    QueueTruncate,
    Reset,
    Sync,
)
from ledger.fold.position import NULL, Position, PositionTable
from ledger.limits import CLIENT_TIMEOUT_MS_DEFAULT, OFFSET_MAX

Key = tuple[str, str, int]  # (consumer_group, topic, queue_id)
QueueKey = tuple[str, int]  # (topic, queue_id)

CLUSTERING = "clustering"
BROADCAST = "broadcast"


@dataclass(slots=True)
class GroupSettings:
    """Per-group configuration, set by `group_config` events."""

    mode: str = CLUSTERING
    initial: str = "latest"  # latest | earliest | timestamp:<epoch ms>
    client_timeout_ms: int = CLIENT_TIMEOUT_MS_DEFAULT

    def to_json(self) -> str:
        return json.dumps(
            {"mode": self.mode, "initial": self.initial, "client_timeout_ms": self.client_timeout_ms},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> GroupSettings:
        d = json.loads(text)
        return cls(d["mode"], d["initial"], int(d["client_timeout_ms"]))


def _int64s() -> array:
    return array("q")


#: `QueueState.append_store_ts` of an append whose store time is unknown (an importer's bound:
#: the tool said where the queue ends, not when its messages were stored); null in events,
#: checkpoints and the view. The time lag of its messages is unknown (null), not time since.
STORE_TS_UNKNOWN = -1
#: The event columns `State.apply_columns` folds, in the order of `State.apply`'s arguments.
FOLDED_COLUMNS = ("kind", "ts", "consumer_group", "topic", "queue_id", "offset", "prev_offset",
                  "generation", "client_id", "store_ts", "detail")


@dataclass(slots=True)
class QueueState:
    """Bounds of a queue plus its time index: prefix-max store time -> first offset of that append.

    Every append is kept too (its first offset, ledger ts and store ts, in log order): the time
    lag of an offset is the store time of the append that wrote it, and MaxOffset at a past time
    is where the appends up to it ended (ledger/lag/document.py). Compact arrays: one append is 24 bytes."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_ts: int = 0
    index_store_ts: list[int] = field(default_factory=list)
    index_offset: list[int] = field(default_factory=list)
    append_offset: array = field(default_factory=_int64s)
    append_ts: array = field(default_factory=_int64s)
    append_store_ts: array = field(default_factory=_int64s)

    def offset_for_time(self, store_ts: int) -> int | None:
        """First message stored at or after `store_ts` (Kafka's ListOffsets); None when none."""
        i = bisect.bisect_left(self.index_store_ts, store_ts)
        if i == len(self.index_store_ts):
            return None
        return max(self.index_offset[i], self.min_offset)


@dataclass(frozen=True, slots=True)
class PullResult:
    next_offset: int
    generation: int
    count: int


@dataclass(frozen=True, slots=True)
class CommitResult:
    accepted: bool
    reason: str | None
    offset: int | None


@dataclass(frozen=True, slots=True)
class PlanItem:
    """One queue of a reset plan (the group's offset; broadcast clients follow it)."""

    consumer_group: str
    topic: str
    queue_id: int
    from_offset: int | None
    to_offset: int


def _clamp_detail(moves: dict[str, tuple[int, int]], cause: str) -> str:
    return json.dumps(
        {"fields": {k: [a, b] for k, (a, b) in moves.items()}, "cause": cause},
        separators=(",", ":"),
    )


class State:
    """Current state of a ledger, built only by `apply`."""

    __slots__ = (
        "queues", "groups", "positions", "clients", "table", "client_table", "last_ts",
        "events_applied", "dirty_keys", "dirty_rows", "dirty_queues", "dirty_groups",
        "_broadcast",
    )

    def __init__(self) -> None:
        self.queues: dict[QueueKey, QueueState] = {}
        self.groups: dict[str, GroupSettings] = {}
        # Row i of `table` is the i-th position of `positions` (keys are never removed).
        self.positions: dict[Key, Position] = {}
        self.table = PositionTable()
        self.clients: dict[Key, dict[str, Position]] = {}  # broadcast groups only
        self.client_table = PositionTable()  # their rows (a client's may go: no order)
        self.last_ts: int = 0
        self.events_applied: int = 0
        # What changed since the view last flushed (the view writes only touched rows): keys,
        # and rows of `table` (what the hot paths mark: no key to hash, its key is in the table).
        self.dirty_keys: set[Key] = set()
        self.dirty_rows: set[int] = set()
        self.dirty_queues: set[QueueKey] = set()
        self.dirty_groups: set[str] = set()
        self._broadcast: set[str] = set()  # groups in broadcast mode (a hot-path check)

    def dirty(self) -> bool:
        return bool(self.dirty_keys or self.dirty_rows or self.dirty_queues or self.dirty_groups)

    def clear_dirty(self) -> None:
        self.dirty_keys, self.dirty_rows = set(), set()
        self.dirty_queues, self.dirty_groups = set(), set()

    # ------------------------------------------------------------------ queries
    def group(self, name: str) -> GroupSettings:
        return self.groups.get(name) or GroupSettings()

    def is_broadcast(self, name: str) -> bool:
        return name in self._broadcast

    def set_group(self, name: str, settings: GroupSettings | None) -> None:
        """Set (or with None remove) a group's settings, keeping the broadcast set in step."""
        if settings is None:
            self.groups.pop(name, None)
        else:
            self.groups[name] = settings
        if settings is not None and settings.mode == BROADCAST:
            self._broadcast.add(name)
        else:
            self._broadcast.discard(name)

    def committed(self, key: Key, now_ms: int | None = None) -> int | None:
        """The group's committed offset; for broadcast groups the minimum over live clients."""
        pos = self.positions.get(key)
        base = pos.committed if pos is not None else None
        if not self.is_broadcast(key[0]):
            return base
        return self.broadcast_offset(key, now_ms if now_ms is not None else self.last_ts, base)

    def broadcast_offset(self, key: Key, now_ms: int, base: int | None) -> int | None:
        """Minimum over clients seen within the group's client timeout, else the group's own."""
        timeout = self.group(key[0]).client_timeout_ms
        live = [
            c.committed
            for c in self.clients.get(key, {}).values()
            if c.committed is not None and now_ms - c.last_active_ts <= timeout
        ]
        return min(live) if live else base

    def group_keys(self, group: str) -> list[Key]:
        """Keys where the group has an offset (its own or a broadcast client's)."""
        keys = {k for k, p in self.positions.items() if k[0] == group and p.committed is not None}
        keys |= {
            k for k, cs in self.clients.items()
            if k[0] == group and any(c.committed is not None for c in cs.values())
        }
        return sorted(keys)

    # ------------------------------------------------------------------ the fold
    def apply_event(self, e: Event) -> None:
        self.apply(
            e.KIND, e.ts, e.consumer_group, e.topic, e.queue_id, e.offset, e.prev_offset,
            e.generation, e.client_id, e.store_ts, e.detail,
        )

    def apply_columns(self, columns: dict[str, list]) -> None:
        """Fold a decoded table (column lists, as from `pa.Table.to_pydict()`: at least
        FOLDED_COLUMNS)."""
        apply = self.apply
        for row in zip(*(columns[name] for name in FOLDED_COLUMNS), strict=True):
            apply(*row)

    def apply(
        self,
        kind: str,
        ts: int,
        group: str | None,
        topic: str | None,
        queue_id: int | None,
        offset: int | None,
        prev_offset: int | None,
        generation: int | None,
        client: str | None,
        store_ts: int | None,
        detail: str | None,
    ) -> None:
        """state + event -> state. Every kind's effect lives here and only here."""
        self.events_applied += 1
        if ts > self.last_ts:
            self.last_ts = ts
        if kind == "reset_refused":
            return
        if kind == "queue_append" or kind == "queue_truncate":
            q = self.queues.get((topic, queue_id))  # type: ignore[arg-type]
            if q is None:
                q = self.queues[(topic, queue_id)] = QueueState()  # type: ignore[index]
            q.last_update_ts = ts
            self.dirty_queues.add((topic, queue_id))  # type: ignore[arg-type]
            if kind == "queue_append":
                q.max_offset = offset  # type: ignore[assignment]
                q.append_offset.append(prev_offset if prev_offset is not None else 0)
                q.append_ts.append(ts)
                q.append_store_ts.append(store_ts if store_ts is not None else STORE_TS_UNKNOWN)
                if store_ts is not None and (not q.index_store_ts or store_ts > q.index_store_ts[-1]):
                    q.index_store_ts.append(store_ts)
                    q.index_offset.append(prev_offset if prev_offset is not None else 0)
            else:
                q.min_offset = offset  # type: ignore[assignment]
            return
        if kind == "group_config" or (kind == "delete" and topic is None):
            self.dirty_groups.add(group)  # type: ignore[arg-type]
        if kind == "group_config":
            self.set_group(group, GroupSettings.from_json(detail))  # type: ignore[arg-type]
            return
        if kind == "delete" and topic is None:
            self.set_group(group, None)  # type: ignore[arg-type]
            return
        key = (group, topic, queue_id)
        self.dirty_keys.add(key)  # type: ignore[arg-type]
        broadcast_client = client is not None and self.is_broadcast(group)  # type: ignore[arg-type]
        if kind == "delete":
            self.clients.pop(key, None)  # type: ignore[arg-type]
        pos = self._position(key, client if broadcast_client else None)  # type: ignore[arg-type]
        pos.last_update_ts = ts
        if kind == "commit":
            pos.committed = offset
            pos.last_active_ts = ts
        elif kind == "pull":
            pos.pulled = offset
            pos.pending = False
            pos.last_client = client
            pos.last_pull_ts = ts
            pos.last_active_ts = ts
            if client is not None:
                pos.client_generations[client] = generation  # type: ignore[assignment]
            if broadcast_client:
                # rule 4: the next pull from any client clears the reset's marker, the
                # broadcast group's own too (rule 5 adds one per client), so an operator's
                # commit is fenced only until then
                base = self.positions.get(key)  # type: ignore[arg-type]
                if base is not None:
                    base.pending = False
        elif kind == "initial":
            pos.committed = pos.pulled = offset
            pos.expired = False
            pos.pending = False
            pos.last_active_ts = ts
        elif kind == "reset":
            pos.committed = pos.pulled = offset
            pos.generation = generation  # type: ignore[assignment]
            pos.pending = True
        elif kind == "sync":
            pos.committed = offset
            if offset is None:
                pos.pulled = None
        elif kind == "clamp":
            moves = json.loads(detail)["fields"]  # type: ignore[arg-type]
            if "committed" in moves:
                pos.committed = moves["committed"][1]
            if "pulled" in moves:
                pos.pulled = moves["pulled"][1]
        elif kind == "expire":
            pos.committed = pos.pulled = None
            pos.expired = True
        elif kind == "delete":
            pos.committed = pos.pulled = None
            pos.expired = False
            pos.generation = generation if generation is not None else pos.generation + 1
            pos.pending = True
            pos.last_client = None
            # the clients' last-pull generations stay: a client from before the delete is
            # fenced after a new pull clears the marker (rule 3), generations never go back
        else:
            raise ValueError(f"unknown event kind {kind!r}")

    def _position(self, key: Key, client: str | None) -> Position:
        if client is None:
            pos = self.positions.get(key)
            if pos is None:
                pos = self.new_position(key)
            return pos
        per_client = self.clients.get(key)
        if per_client is None:
            per_client = self.clients[key] = {}
        pos = per_client.get(client)
        if pos is None:
            pos = per_client[client] = Position(self.client_table, self.client_table.add())
        return pos

    def new_position(self, key: Key) -> Position:
        """The Position of a key never seen (with `new_positions`, the one way one enters
        `positions`)."""
        row = self.table.add()
        self.table.set_keys(row, (key,))
        pos = self.positions[key] = Position(self.table, row)
        return pos

    def new_positions(self, keys: list[Key]) -> list[Position]:
        """`new_position` of each of `keys`, in one step."""
        first = self.table.add(len(keys))
        self.table.set_keys(first, keys)
        made = [Position(self.table, row) for row in range(first, first + len(keys))]
        self.positions.update(zip(keys, made, strict=True))
        return made

    # ------------------------------------------------------------------ commands
    def emit(self, out: EventBuffer, e: Event) -> None:
        """Fold `e` and add it to the batch: the one way an event enters both."""
        self.apply_event(e)
        out.append(e)

    def _emit_values(
        self, out: EventBuffer, ts: int, kind: str, group: str, topic: str, queue_id: int,
        offset: int, prev_offset: int | None, generation: int, client: str | None,
        actor: str | None, detail: str | None,
    ) -> None:
        """`emit` for the hot kinds (commit, pull) without building a Struct per event;
        `prev_offset` is the position before (committed for a commit, pulled for a pull)."""
        out.rows.append((ts, kind, group, topic, queue_id, offset, prev_offset, generation, client,
                         actor, None, detail))
        self.apply(kind, ts, group, topic, queue_id, offset, None, generation, client, None, detail)

    def decide_queue_append(
        self, topic: str, queue_id: int, count: int, store_ts: int, now_ms: int, out: EventBuffer,
        actor: str = "system", detail: str | None = None,
    ) -> tuple[int, int]:
        q = self.queues.get((topic, queue_id))
        before = q.max_offset if q is not None else 0
        if before + count > OFFSET_MAX:  # an offset is an int64 in the log and the state
            raise InvalidInput(f"invalid count {count} for {topic}:{queue_id}: MaxOffset {before} "
                               f"+ {count} would pass the largest offset {OFFSET_MAX}")
        self.emit(out, QueueAppend(ts=now_ms, topic=topic, queue_id=queue_id,
                                    offset=before + count, prev_offset=before, actor=actor,
                                    store_ts=store_ts, detail=detail))
        q = self.queues[(topic, queue_id)]
        return q.min_offset, q.max_offset

    def decide_queue_truncate(
        self, topic: str, queue_id: int, min_offset: int, now_ms: int, out: EventBuffer,
        actor: str = "system", detail: str | None = None,
    ) -> tuple[int, int]:
        q = self.queues.get((topic, queue_id))
        if q is None:
            raise InvalidInput(f"unknown queue {topic}:{queue_id}: append messages before truncating")
        if min_offset > q.max_offset:
            raise InvalidInput(
                f"invalid min offset {min_offset} for {topic}:{queue_id}: above MaxOffset {q.max_offset}"
            )
        if min_offset > q.min_offset:
            self.emit(out, QueueTruncate(ts=now_ms, topic=topic, queue_id=queue_id,
                                          offset=min_offset, prev_offset=q.min_offset,
                                          actor=actor, detail=detail))
        return q.min_offset, q.max_offset

    def decide_queue_bounds(
        self, topic: str, queue_id: int, max_offset: int | None, min_offset: int | None,
        store_ts: int | None, now_ms: int, out: EventBuffer, actor: str, detail: str | None,
    ) -> tuple[int, int]:
        """Raise a queue's bounds to what a tool reported (never lower them): MaxOffset by a
        queue_append of the difference (its store time None when the tool gave none: unknown,
        never the time of the import), MinOffset by a queue_truncate."""
        q = self.queues.get((topic, queue_id))
        if q is None and max_offset is None:
            raise InvalidInput(f"unknown queue {topic}:{queue_id}: give its max_offset")
        lo, hi = (q.min_offset, q.max_offset) if q is not None else (0, 0)
        new_hi = hi if max_offset is None else max(hi, max_offset)
        if min_offset is not None and min_offset > new_hi:
            raise InvalidInput(f"invalid min_offset {min_offset} for {topic}:{queue_id}: above "
                               f"MaxOffset {new_hi}")
        if q is None or new_hi > hi:
            self.emit(out, QueueAppend(ts=now_ms, topic=topic, queue_id=queue_id, offset=new_hi,
                                        prev_offset=hi, actor=actor, store_ts=store_ts,
                                        detail=detail))
        if min_offset is not None and min_offset > lo:
            self.emit(out, QueueTruncate(ts=now_ms, topic=topic, queue_id=queue_id,
                                          offset=min_offset, prev_offset=lo, actor=actor,
                                          detail=detail))
        q = self.queues[(topic, queue_id)]
        return q.min_offset, q.max_offset

    def decide_group_set(
        self, group: str, now_ms: int, out: EventBuffer, *, mode: str | None = None,
        initial: str | None = None, client_timeout_ms: int | None = None, actor: str | None = None,
    ) -> GroupSettings:
        cur = self.group(group)
        new = GroupSettings(
            mode if mode is not None else cur.mode,
            initial if initial is not None else cur.initial,
            client_timeout_ms if client_timeout_ms is not None else cur.client_timeout_ms,
        )
        if group not in self.groups or new != cur:
            self.emit(out, GroupConfig(ts=now_ms, consumer_group=group, actor=actor,
                                        detail=new.to_json()))
        return self.groups[group]

    def _expire_if_idle(
        self, key: Key, pos: Position, client: str | None, now_ms: int, retention_ms: int,
        out: EventBuffer,
    ) -> None:
        if pos.expiry_due(now_ms, retention_ms):
            self.emit(out, Expire(ts=now_ms, consumer_group=key[0], topic=key[1],
                                   queue_id=key[2], prev_offset=pos.committed,
                                   generation=pos.generation, client_id=client, actor="system",
                                   detail=f"no commit or pull for {retention_ms} ms"))

    def _initial_offset(self, key: Key, pos: Position, now_ms: int) -> tuple[int, str]:
        q = self.queues.get((key[1], key[2]))
        lo, hi = (q.min_offset, q.max_offset) if q is not None else (0, 0)
        if pos.expired:
            return lo, "after expiry"
        if self.is_broadcast(key[0]):
            own = self.positions.get(key)
            base = self.broadcast_offset(key, now_ms, own.committed if own is not None else None)
            if base is not None:
                # rule 3 holds for a client's first pull too: into [MinOffset, MaxOffset]
                if q is not None and not lo <= base <= hi:
                    return min(max(base, lo), hi), "broadcast: from the group's offset, clamped"
                return base, "broadcast: from the group's offset"
        policy = self.group(key[0]).initial
        if policy == "earliest":
            return lo, "policy earliest"
        if policy.startswith("timestamp:"):
            t = int(policy.split(":", 1)[1])
            found = q.offset_for_time(t) if q is not None else None
            return (found if found is not None else hi), f"policy {policy}"
        return hi, "policy latest"

    def _clamp(
        self, key: Key, pos: Position, client: str | None, now_ms: int, out: EventBuffer
    ) -> None:
        q = self.queues.get((key[1], key[2]))
        if q is None:
            return  # bounds unknown (sync only): nothing is clamped
        moves: dict[str, tuple[int, int]] = {}
        causes = []
        for name in ("committed", "pulled"):
            v = getattr(pos, name)
            if v is None:
                continue
            if v < q.min_offset:
                moves[name] = (v, q.min_offset)
                causes.append(f"{name} below MinOffset {q.min_offset}")
            elif v > q.max_offset:
                moves[name] = (v, q.max_offset)
                causes.append(f"{name} above MaxOffset {q.max_offset}")
        if moves:
            to = moves.get("committed", (pos.committed, pos.committed))[1]
            self.emit(out, Clamp(ts=now_ms, consumer_group=key[0], topic=key[1], queue_id=key[2],
                                  offset=to, prev_offset=pos.committed, generation=pos.generation,
                                  client_id=client, actor="system",
                                  detail=_clamp_detail(moves, "; ".join(causes))))

    # -------------------------------------------------------------- the hot path
    # Commits and pulls of clustering groups on keys with no pending reset, no expiry due and
    # nothing to clamp are the bulk of every workload (DESIGN.md, performance notes). These two
    # methods decide and fold them in one step, writing the event columns directly; anything
    # else returns None and takes the general path. `apply` must have the same effect:
    # tests/ledger/test_fast_path.py replays both and compares.
    def fast_commit(
        self, group: str, topic: str, queue_id: int, offset: int, client: str | None,
        now_ms: int, retention_ms: int, out: EventBuffer, actor: str | None = None,
    ) -> int | None:
        key = (group, topic, queue_id)
        pos = self.positions.get(key)
        if pos is None or pos.pending or pos.expired or group in self._broadcast:
            return None
        committed = pos.committed
        if committed is None or offset < committed or now_ms - pos.last_active_ts > retention_ms:
            return None
        if client is not None and pos.client_generations.get(client, pos.generation) != pos.generation:
            return None
        q = self.queues.get((topic, queue_id))
        if q is not None and offset > q.max_offset:
            return None
        out.rows.append((now_ms, "commit", group, topic, queue_id, offset, committed,
                         pos.generation, client, actor or (None if client else "operator"), None,
                         None))
        pos.committed = offset
        pos.last_active_ts = pos.last_update_ts = now_ms
        self.dirty_rows.add(pos.row)
        self.events_applied += 1
        if now_ms > self.last_ts:
            self.last_ts = now_ms
        return offset

    def fast_pull(
        self, group: str, topic: str, queue_id: int, client: str, max_count: int, now_ms: int,
        retention_ms: int, out: EventBuffer, actor: str | None = None,
    ) -> tuple[int, int, int] | None:
        key = (group, topic, queue_id)
        pos = self.positions.get(key)
        if pos is None or pos.pending or group in self._broadcast:
            return None
        committed, pulled = pos.committed, pos.pulled
        q = self.queues.get((topic, queue_id))
        if (committed is None or pulled is None or q is None
                or now_ms - pos.last_active_ts > retention_ms
                or not (q.min_offset <= committed <= q.max_offset)
                or not (q.min_offset <= pulled <= q.max_offset)):
            return None
        if pos.last_client == client and now_ms - pos.last_pull_ts <= self.group(group).client_timeout_ms:
            next_offset = pulled if pulled > committed else committed
        else:
            next_offset = committed
        count = q.max_offset - next_offset
        if count > max_count:
            count = max_count
        generation = pos.generation
        out.rows.append((now_ms, "pull", group, topic, queue_id, next_offset + count, pulled,
                         generation, client, actor, None,
                         f"redeliver from {next_offset}" if next_offset < pulled else None))
        pos.pulled = next_offset + count
        pos.last_client = client
        pos.last_pull_ts = pos.last_active_ts = pos.last_update_ts = now_ms
        pos.client_generations[client] = generation
        self.dirty_rows.add(pos.row)
        self.events_applied += 1
        if now_ms > self.last_ts:
            self.last_ts = now_ms
        return next_offset, generation, count

    def decide_pull(
        self, group: str, topic: str, queue_id: int, client: str | None, max_count: int,
        now_ms: int, retention_ms: int, out: EventBuffer, actor: str | None = None,
    ) -> PullResult:
        key = (group, topic, queue_id)
        broadcast = self.is_broadcast(group)
        if broadcast and client is None:
            raise InvalidInput(f"pull on broadcast group {group!r} needs a client")
        bclient = client if broadcast else None
        pos = self._position(key, bclient)
        self._expire_if_idle(key, pos, bclient, now_ms, retention_ms, out)
        timeout = self.group(group).client_timeout_ms
        if pos.committed is None:
            start, why = self._initial_offset(key, pos, now_ms)
            self.emit(out, Initial(ts=now_ms, consumer_group=group, topic=topic,
                                    queue_id=queue_id, offset=start, generation=pos.generation,
                                    client_id=client, actor=actor or (None if client else "system"),
                                    detail=why))
            next_offset = start
        else:
            self._clamp(key, pos, bclient, now_ms, out)
            committed = pos.committed
            if pos.pending or pos.pulled is None:
                next_offset = committed
            elif client is not None and pos.last_client == client and (
                now_ms - pos.last_pull_ts <= timeout
            ):
                next_offset = max(pos.pulled, committed)
            else:
                next_offset = committed
        q = self.queues.get((topic, queue_id))
        count = 0 if q is None else max(0, min(max_count, q.max_offset - next_offset))
        detail = None
        if pos.pulled is not None and next_offset < pos.pulled and not pos.pending:
            detail = f"redeliver from {next_offset}"
        self._emit_values(out, now_ms, "pull", group, topic, queue_id, next_offset + count,
                          pos.pulled, pos.generation, client, actor, detail)
        return PullResult(next_offset, pos.generation, count)

    def decide_commit(
        self, group: str, topic: str, queue_id: int, offset: int, client: str | None,
        generation: int | None, now_ms: int, retention_ms: int, out: EventBuffer,
        actor: str | None = None, owner_only: bool = False,
    ) -> CommitResult:
        key = (group, topic, queue_id)
        broadcast = self.is_broadcast(group)
        bclient = client if broadcast else None
        # read, not created: a refused commit leaves the state as it was (rule 2), no empty
        # client position behind (a later reset would write an event for it)
        found = (self.clients.get(key, {}).get(bclient) if bclient is not None
                 else self.positions.get(key))
        pos = found if found is not None else Position.detached()
        if owner_only and (client is None or pos.last_client != client):
            return CommitResult(False, "fenced", pos.committed)  # another client pulled since
        effective = generation
        if effective is None and client is not None:
            effective = pos.client_generations.get(client)
            if effective is None and broadcast and pos.last_pull_ts >= 0:
                effective = pos.generation
        if pos.pending and (effective is None or effective < pos.generation):
            return CommitResult(False, "fenced", pos.committed)
        if effective is not None and effective < pos.generation:
            return CommitResult(False, "fenced", pos.committed)
        if effective is not None and effective > pos.generation:
            return CommitResult(False, "invalid", pos.committed)
        q = self.queues.get((topic, queue_id))
        if q is not None and offset > q.max_offset:
            return CommitResult(False, "invalid", pos.committed)
        expired_now = pos.expiry_due(now_ms, retention_ms)
        if not expired_now and pos.committed is not None and offset < pos.committed:
            return CommitResult(False, "stale", pos.committed)
        pos = self._position(key, bclient)
        self._expire_if_idle(key, pos, bclient, now_ms, retention_ms, out)
        self._emit_values(out, now_ms, "commit", group, topic, queue_id, offset, pos.committed,
                          pos.generation, client, actor or (None if client else "operator"), None)
        return CommitResult(True, None, pos.committed)

    def decide_expire_all(self, now_ms: int, retention_ms: int, out: EventBuffer) -> int:
        """Offset retention over every key (the `retention` command)."""
        before = len(out)
        for key, pos in list(self.positions.items()):
            self._expire_if_idle(key, pos, None, now_ms, retention_ms, out)
        for key, per_client in list(self.clients.items()):
            for client, pos in list(per_client.items()):
                self._expire_if_idle(key, pos, client, now_ms, retention_ms, out)
        return len(out) - before

    def decide_delete_group(self, group: str, actor: str | None, now_ms: int,
                            out: EventBuffer, source: str | None = None) -> int:
        """Remove the group: a delete per queue where it has an offset and its settings. A
        source's delete (a Kafka group tombstone, which the broker writes after removing the
        offsets) also closes the queues whose offset the source removed (expired), so the
        group's end is recorded on each of its queues."""
        keys = self.group_keys(group)
        if source is not None:
            keys = sorted(set(keys) | {k for k, p in self.positions.items()
                                       if k[0] == group and p.expired})
        detail = "group deleted" if source is None else f"group deleted at {source}"
        for key in keys:
            pos = self.positions.get(key) or Position.detached()
            self.emit(out, Delete(ts=now_ms, consumer_group=group, topic=key[1],
                                   queue_id=key[2], prev_offset=pos.committed,
                                   generation=pos.generation + 1, actor=actor,
                                   detail=detail))
        if group in self.groups:
            self.emit(out, Delete(ts=now_ms, consumer_group=group, actor=actor,
                                   detail="group config deleted"))
        return len(keys)

    def decide_sync(
        self, group: str, topic: str, queue_id: int, offset: int | None, source: str,
        now_ms: int, out: EventBuffer, actor: str | None = None, client: str | None = None,
    ) -> int | None:
        """Overwrite an offset from a snapshot; an unchanged key appends nothing. A null offset
        is the source's removal of it (a Kafka tombstone: retention or a delete), recorded as
        an expire. `client`: who the source says owns the queue (kept on the event; not on a
        broadcast group's, whose client ids key the clients' own offsets). Returns the offset
        before."""
        key = (group, topic, queue_id)
        pos = self.positions.get(key)
        before = pos.committed if pos is not None else None
        if before == offset:
            return before
        generation = pos.generation if pos is not None else 0
        if offset is None:
            self.emit(out, Expire(ts=now_ms, consumer_group=group, topic=topic,
                                   queue_id=queue_id, prev_offset=before, generation=generation,
                                   actor=actor or f"sync:{source}",
                                   detail=f"removed at {source}"))
            return before
        self.emit(out, Sync(ts=now_ms, consumer_group=group, topic=topic, queue_id=queue_id,
                             offset=offset, prev_offset=before, generation=generation,
                             client_id=None if self.is_broadcast(group) else client,
                             actor=actor or f"sync:{source}", detail=f"sync from {source}"))
        return before

    def decide_reset(
        self, plan: Iterable[PlanItem], actor: str | None, detail: str, now_ms: int,
        out: EventBuffer,
    ) -> None:
        """Apply a reset plan: committed = target, generation + 1, pending marker; on a
        broadcast group, per client too (rule 5). A clustering group's client offsets left from
        an earlier broadcast mode are not reset: a reset event naming a client folds into the
        group's own position there, and would set its generation back to the client's."""
        for item in plan:
            key = (item.consumer_group, item.topic, item.queue_id)
            pos = self.positions.get(key) or Position.detached()
            self.emit(out, Reset(ts=now_ms, consumer_group=key[0], topic=key[1], queue_id=key[2],
                                  offset=item.to_offset, prev_offset=item.from_offset,
                                  generation=pos.generation + 1, actor=actor, detail=detail))
            if not self.is_broadcast(key[0]):
                continue
            for client, cpos in sorted(self.clients.get(key, {}).items()):
                self.emit(out, Reset(ts=now_ms, consumer_group=key[0], topic=key[1],
                                      queue_id=key[2], offset=item.to_offset,
                                      prev_offset=cpos.committed, generation=cpos.generation + 1,
                                      client_id=client, actor=actor, detail=detail))


def snapshot_rows(
    state: State, now_ms: int, group: str | None = None
) -> list[tuple[str, str, int, int, int]]:
    """(group, topic, queue_id, committed, generation) for every key with an offset, sorted;
    broadcast groups take the minimum over clients active within their client timeout. The
    clustering groups' offsets are read a column at a time (row i is the i-th position)."""
    table = state.table
    broadcast = state._broadcast
    out = []
    for key, committed, generation in zip(state.positions, table.committed[:table.size].tolist(),
                                          table.generation[:table.size].tolist(), strict=True):
        if committed != NULL and (group is None or key[0] == group) and key[0] not in broadcast:
            out.append((key[0], key[1], key[2], committed, generation))
    if broadcast:
        keys = {k for k in (*state.positions, *state.clients)
                if k[0] in broadcast and (group is None or k[0] == group)}
        for key in keys:
            base = state.positions.get(key)
            per_client = state.clients.get(key, {})
            offset = state.broadcast_offset(key, now_ms, base.committed if base else None)
            gens = [c.generation for c in per_client.values()]
            generation = base.generation if base is not None else (max(gens) if gens else 0)
            if offset is not None:
                out.append((key[0], key[1], key[2], offset, generation))
    out.sort()
    return out
