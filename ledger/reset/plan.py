"""Planning a reset from what the caller gave (a `Reset` command, or the Python API's scenario
and scope): the scope's queues, the targets (`to_state_at` reads the group's own past state,
`from_csv` parses Kafka's CSV), `reset.plan_reset`, and the checks of a reviewed plan before it
is executed (optimistic: refused when any queue moved since it was planned).
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.commands.command import PlanRow, Reset, scenario_field, scope_topics
from ledger.errors import InvalidInput, RefusedError
from ledger.fold.state import Key, PlanItem
from ledger.importers.kafka_csv import parse_kafka_csv
from ledger.reads.state_at import state_at
from ledger.reset.scenarios import Scenario, Scope, plan_reset, scope_keys
from ledger.store.writer import Writer
from ledger.timeparse import parse_duration, parse_time


@dataclass(frozen=True, slots=True)
class Planned:
    """A computed plan: its items, the queues left out (to-state-at: no offset then) and the
    groups of a CSV's rows that are not this reset's."""

    items: tuple[PlanItem, ...]
    skipped: tuple[tuple[str, int], ...] = ()
    ignored_groups: tuple[str, ...] = ()

    @property
    def messages_replayed(self) -> int:
        """Messages consumed again (targets behind the current offsets)."""
        return sum(max(0, i.from_offset - i.to_offset) for i in self.items
                   if i.from_offset is not None)

    @property
    def messages_skipped(self) -> int:
        """Messages never consumed (targets ahead of the current offsets)."""
        return sum(max(0, i.to_offset - i.from_offset) for i in self.items
                   if i.from_offset is not None)


def scenario_of(cmd: Reset, now_ms: int) -> Scenario:
    """The command's one scenario as a Scenario (times resolved against the command's time)."""
    field = scenario_field(cmd)
    raw = getattr(cmd, field)
    if field == "from_csv":
        return Scenario("from_file")
    if field in ("to_earliest", "to_latest", "to_current"):
        return Scenario(field)
    if field in ("to_datetime", "to_state_at"):
        return Scenario(field, parse_time(raw, now_ms))
    if field == "by_duration":
        return Scenario(field, parse_duration(raw) if isinstance(raw, str) else raw)
    return Scenario(field, raw)


def plan_command(writer: Writer, cmd: Reset, now_ms: int) -> Planned:
    """The plan a `Reset` command asks for (its scope, scenario and options)."""
    scenario = scenario_of(cmd, now_ms)
    targets = None
    ignored: tuple[str, ...] = ()
    scope = None
    if cmd.from_csv is not None:
        rows = parse_kafka_csv(cmd.from_csv, cmd.group)
        targets = {(g, t, q): o for g, t, q, o in rows}
        ignored = tuple(sorted({g for g, *_ in rows if g != cmd.group}))
    elif cmd.all_topics:
        scope = Scope(all_topics=True)
    elif cmd.topics:
        scope = Scope(topics=scope_topics(cmd.topics))
    elif cmd.topic is not None:
        scope = Scope(topics=((cmd.topic, None if cmd.queue_id is None else (cmd.queue_id,)),))
    planned = plan(writer, cmd.group, scenario, scope=scope, targets=targets,
                   backward_only=cmd.backward_only, now_ms=now_ms)
    return Planned(planned.items, planned.skipped, ignored)


def plan(writer: Writer, group: str, scenario: Scenario, *, scope: Scope | None,
         targets: dict[Key, int] | None, backward_only: bool, now_ms: int) -> Planned:
    """Target per queue of the scope (or of the targets, for from-file)."""
    state = writer.state
    skipped: list[tuple[str, int]] = []
    if scenario.mode == "from_file":
        if targets is None:
            raise InvalidInput("reset --from-file needs targets")
        keys = sorted(k for k in targets if k[0] == group)
    else:
        if scope is None:
            raise InvalidInput("reset needs a scope: --topic T, --topic T:0,1 or --all-topics")
        keys = scope_keys(state, group, scope)
    if scenario.mode == "to_state_at":
        assert scenario.value is not None
        at = state_at(writer, ts=scenario.value, group=group)
        past = {(r["consumer_group"], r["topic"], r["queue_id"]): r["committed_offset"]
                for r in at.to_pylist()}
        skipped = [(k[1], k[2]) for k in keys if k not in past]
        targets = past
    items = plan_reset(state, group, keys, scenario, now_ms, backward_only=backward_only,
                       targets=targets)
    return Planned(tuple(items), tuple(skipped))


def reviewed(writer: Writer, group: str, rows: list[PlanRow], now_ms: int, *,
             backward_only: bool = False) -> Planned:
    """A reviewed plan, executed as it is: refused naming the queue and both values when a
    queue's committed offset is no longer the from_offset it was planned on (iceberg's
    optimistic commit); targets are clamped to the queue's bounds and then kept from moving
    forward with `backward_only`, as at planning (`reset.plan_reset`): so a backward-only
    row that stays where it is (to_offset = from_offset, below a MinOffset) stays there."""
    state = writer.state
    items = []
    for row in rows:
        key = (group, row.topic, row.queue_id)
        now_offset = state.committed(key, now_ms)
        if now_offset != row.from_offset:
            raise RefusedError(
                "stale_plan", f"stale plan: queue {row.topic}:{row.queue_id} of group {group!r} "
                f"was planned from offset {_shown(row.from_offset)} and is now at "
                f"{_shown(now_offset)}: plan the reset again")
        q = state.queues.get((row.topic, row.queue_id))
        target = row.to_offset
        if q is not None:
            target = min(max(target, q.min_offset), q.max_offset)
            if backward_only and now_offset is not None and target > now_offset:
                target = now_offset
        elif now_offset is None:
            raise InvalidInput(f"unknown queue {row.topic}:{row.queue_id}: no messages recorded "
                               f"there and group {group!r} has no offset there")
        items.append(PlanItem(group, row.topic, row.queue_id, now_offset, target))
    return Planned(tuple(items))


def _shown(offset: int | None) -> str:
    return "none" if offset is None else str(offset)
