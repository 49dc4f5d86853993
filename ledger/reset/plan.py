"""Planning a reset from what the caller gave (a `Reset` command, or the Python API's scenario
and scope): the scope's queues, the targets (`to_state_at` reads the group's own past state,
`from_csv` parses Kafka's CSV), `reset.plan_reset`, and the checks of a reviewed plan before it
is executed (optimistic: refused when any queue moved since it was planned).
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.commands.command import PlanRow, Reset, scenario_field, scope_topics
from ledger.errors import InvalidInput, RefusedError
from ledger.fold.state import Key, PlanItem, State
from ledger.importers.kafka_csv import parse_kafka_csv
from ledger.reads.state_at import state_at
from ledger.reset.scenarios import (
    Clamped,
    Scenario,
    Scope,
    plan_reset,
    scope_keys,
    target_range,
)
from ledger.store.writer import Writer
from ledger.timeparse import parse_duration, parse_time


@dataclass(frozen=True, slots=True)
class Planned:
    """A computed plan: its items, the queues left out (to-state-at: no offset then) and the
    groups of a CSV's rows that are not this reset's."""

    items: tuple[PlanItem, ...]
    skipped: tuple[tuple[str, int], ...] = ()
    ignored_groups: tuple[str, ...] = ()
    clamped: tuple[Clamped, ...] = ()  # targets the queue's bounds moved

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
        targets, ignored = _csv_targets(cmd.from_csv, cmd.group)
    elif cmd.all_topics:
        scope = Scope(all_topics=True)
    elif cmd.topics:
        scope = Scope(topics=scope_topics(cmd.topics))
    elif cmd.topic is not None:
        scope = Scope(topics=((cmd.topic, None if cmd.queue_id is None else (cmd.queue_id,)),))
    planned = plan(writer, cmd.group, scenario, scope=scope, targets=targets,
                   backward_only=cmd.backward_only, now_ms=now_ms)
    return Planned(planned.items, planned.skipped, ignored, planned.clamped)


def _csv_targets(text: str, group: str) -> tuple[dict[Key, int], tuple[str, ...]]:
    """A Kafka CSV's targets, and the other groups it names (ignored: not this reset's)."""
    rows = parse_kafka_csv(text, group)
    targets = {(g, t, q): o for g, t, q, o in rows}
    return targets, tuple(sorted({g for g, *_ in rows if g != group}))


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
        targets = _past_offsets(writer, group, scenario)
        skipped = [(k[1], k[2]) for k in keys if k not in targets]
    clamped: list[Clamped] = []
    items = plan_reset(state, group, keys, scenario, now_ms, backward_only=backward_only,
                       targets=targets, clamped=clamped)
    return Planned(tuple(items), tuple(skipped), clamped=tuple(clamped))


def _past_offsets(writer: Writer, group: str, scenario: Scenario) -> dict[Key, int]:
    """to-state-at's targets: the group's committed offsets at the scenario's time."""
    assert scenario.value is not None
    at = state_at(writer, ts=scenario.value, group=group)
    return {(r["consumer_group"], r["topic"], r["queue_id"]): r["committed_offset"]
            for r in at.to_pylist()}


def reviewed(writer: Writer, cmd: Reset, now_ms: int) -> Planned:
    """A reviewed plan (`cmd.plan`), executed as it is: refused naming the queue and both
    values when a queue's committed offset is no longer the from_offset it was planned on
    (iceberg's optimistic commit); a row whose target the scenario it names cannot have given
    (`reset.target_range`) is bad input, never recorded as that scenario. Targets are clamped
    to the queue's bounds and then kept from moving forward with `backward_only`, as at
    planning (`reset.plan_reset`): so a backward-only row that stays where it is (to_offset =
    from_offset, below a MinOffset) stays there."""
    state, group, backward_only = writer.state, cmd.group, cmd.backward_only
    scenario = scenario_of(cmd, now_ms)
    targets = None  # from-file without its CSV: the rows are the file's targets
    if scenario.mode == "from_file" and cmd.from_csv:
        targets = _csv_targets(cmd.from_csv, group)[0]
    elif scenario.mode == "to_state_at":
        targets = _past_offsets(writer, group, scenario)
    items = []
    for row in cmd.plan or ():
        key = (group, row.topic, row.queue_id)
        now_offset = state.committed(key, now_ms)
        if now_offset != row.from_offset:
            raise RefusedError(
                "stale_plan", f"stale plan: queue {row.topic}:{row.queue_id} of group {group!r} "
                f"was planned from offset {_shown(row.from_offset)} and is now at "
                f"{_shown(now_offset)}: plan the reset again")
        if scenario.mode != "from_file" or targets is not None:
            _check_agrees(state, key, scenario, row, now_ms, backward_only, targets)
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


def _check_agrees(state: State, key: Key, scenario: Scenario, row: PlanRow, now_ms: int,
                  backward_only: bool, targets: dict[Key, int] | None) -> None:
    """A plan row's target is one its scenario can have given, or the row is refused."""
    if state.queues.get(key[1:]) is None and state.committed(key, now_ms) is None:
        return  # an unknown queue: refused below, naming it
    found = target_range(state, key, scenario, row.from_offset, now_ms,
                         backward_only=backward_only, targets=targets)
    name = f"{row.topic}:{row.queue_id}"
    shown = scenario.mode if scenario.value is None else f"{scenario.mode} {scenario.value}"
    if found is None:
        raise InvalidInput(f"plan row {name} disagrees with its scenario {shown}: the scenario "
                           "plans nothing for that queue")
    low, high = found
    if not low <= row.to_offset <= high:
        gives = str(high) if low == high else f"{low}..{high}"
        raise InvalidInput(
            f"plan row {name} disagrees with its scenario {shown}: to_offset {row.to_offset}, "
            f"where the scenario gives {gives} from offset {_shown(row.from_offset)}")


def _shown(offset: int | None) -> str:
    return "none" if offset is None else str(offset)
