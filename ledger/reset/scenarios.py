"""Reset planning (Kafka's --reset-offsets scenarios, RocketMQ's resetOffsetByTime): pure.

A plan is computed from the state and, for `to_state_at` and `from_file`, from targets the
caller looked up; it is immutable data that `Ledger` executes through the fold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ledger.errors import InvalidInput, RefusedError
from ledger.fold.state import Key, PlanItem, State

SCENARIOS: tuple[str, ...] = (
    "to_offset",
    "to_datetime",
    "to_earliest",
    "to_latest",
    "to_current",
    "shift_by",
    "by_duration",
    "to_state_at",
    "from_file",
)


@dataclass(frozen=True, slots=True)
class Scenario:
    """Exactly one reset mode and its argument (an offset, a time or duration in ms, or None)."""

    mode: str
    value: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in SCENARIOS:
            raise InvalidInput(f"unknown reset scenario {self.mode!r}: use one of {', '.join(SCENARIOS)}")


@dataclass(frozen=True, slots=True)
class Scope:
    """Which queues a reset covers: all topics of the group, topics (optionally some queues), or
    the keys of explicit targets (from-file)."""

    all_topics: bool = False
    topics: tuple[tuple[str, tuple[int, ...] | None], ...] = ()


def scope_keys(state: State, group: str, scope: Scope) -> list[Key]:
    """Kafka's scope rules: --all-topics = queues where the group has offsets; --topic T = every
    queue of T (known queues plus queues where the group has an offset). A topic with neither
    is unknown, an error naming it (Kafka: "Topic ... does not exist")."""
    if scope.all_topics:
        return state.group_keys(group)
    keys: set[Key] = set()
    own = state.group_keys(group)
    for topic, queue_ids in scope.topics:
        if queue_ids is not None:
            keys.update((group, topic, q) for q in queue_ids)
            continue
        found = {(group, t, q) for (t, q) in state.queues if t == topic}
        found.update(k for k in own if k[1] == topic)
        if not found:
            raise InvalidInput(
                f"unknown topic {topic!r}: no messages recorded there and group {group!r} has "
                "no offset there")
        keys.update(found)
    return sorted(keys)


@dataclass(frozen=True, slots=True)
class Clamped:
    """A target the queue's bounds moved (Kafka warns "New offset (N) is higher than latest
    offset ... Value will be set to M")."""

    topic: str
    queue_id: int
    requested: int
    to_offset: int

    def message(self) -> str:
        side = "above MaxOffset" if self.requested > self.to_offset else "below MinOffset"
        return (f"offset {self.requested} of {self.topic}:{self.queue_id} is {side} "
                f"{self.to_offset}: set to {self.to_offset}")


def plan_reset(
    state: State,
    group: str,
    keys: list[Key],
    scenario: Scenario,
    now_ms: int,
    *,
    backward_only: bool = False,
    targets: dict[Key, int] | None = None,
    clamped: list[Clamped] | None = None,
) -> list[PlanItem]:
    """Target per queue, clamped to [MinOffset, MaxOffset] where the bounds are known (each
    target so moved is added to `clamped`)."""
    plan: list[PlanItem] = []
    for key in keys:
        _, topic, queue_id = key
        q = state.queues.get((topic, queue_id))
        current = state.committed(key, now_ms)
        mode, value = scenario.mode, scenario.value
        name = f"{topic}:{queue_id}"
        if q is None and current is None:
            raise InvalidInput(
                f"unknown queue {name}: no messages recorded there and group {group!r} has no "
                "offset there (append messages or import the queue's bounds first)")
        if q is None and mode in ("to_earliest", "to_latest", "to_datetime", "by_duration"):
            raise RefusedError(
                "unknown_bounds",
                f"queue {name} has unknown bounds (an offset is known there, no messages): "
                f"{mode} cannot be planned",
            )
        if mode == "to_offset":
            target = value
        elif mode == "to_earliest":
            target = q.min_offset  # type: ignore[union-attr]
        elif mode == "to_latest":
            target = q.max_offset  # type: ignore[union-attr]
        elif mode == "to_current":
            if current is None and q is None:
                raise RefusedError("unknown_bounds", f"queue {name} has no offset and unknown bounds")
            target = current if current is not None else q.max_offset  # type: ignore[union-attr]
        elif mode == "shift_by":
            if current is None:
                raise InvalidInput(
                    f"cannot shift-by on {name}: group {group!r} has no committed offset there")
            target = current + value  # type: ignore[operator]
        elif mode in ("to_datetime", "by_duration"):
            t = value if mode == "to_datetime" else now_ms - value  # type: ignore[operator]
            found = q.offset_for_time(t)  # type: ignore[union-attr]
            target = found if found is not None else q.max_offset  # type: ignore[union-attr]
        else:  # to_state_at, from_file
            if targets is None or key not in targets:
                continue
            target = targets[key]
        requested = max(target, 0)  # type: ignore[type-var]
        if q is not None:
            target = min(max(requested, q.min_offset), q.max_offset)
            if clamped is not None and target != requested:
                clamped.append(Clamped(topic, queue_id, requested, target))
        target = max(target, 0)  # type: ignore[type-var]
        if backward_only and current is not None and target > current:
            target = current
        plan.append(PlanItem(group, topic, queue_id, current, target))
    return plan


def target_range(
    state: State, key: Key, scenario: Scenario, from_offset: int | None, now_ms: int, *,
    backward_only: bool = False, targets: dict[Key, int] | None = None,
) -> tuple[int, int] | None:
    """The targets `scenario` can have given the queue `key` when its offset was `from_offset`
    (the offset it holds now: a reviewed plan is checked for staleness first), or None when
    the scenario plans nothing there. Queue bounds only grow and every scenario's target grows
    with them, so the highest is the target planned now; the lowest is the target under the
    tightest bounds that `from_offset` allows (MinOffset 0, MaxOffset `from_offset`). A plan
    row outside that range was not planned with this scenario."""
    items = plan_reset(state, key[0], [key], scenario, now_ms, backward_only=backward_only,
                       targets=targets)
    if not items:
        return None
    high = items[0].to_offset
    q = state.queues.get((key[1], key[2]))
    mode, value = scenario.mode, scenario.value
    if q is None:  # bounds unknown, now as then: nothing was clamped
        return high, high
    if mode == "to_offset":
        requested = value
    elif mode == "shift_by":
        requested = None if from_offset is None else from_offset + value  # type: ignore[operator]
    elif mode == "to_current":
        requested = from_offset
    elif mode in ("to_state_at", "from_file"):
        requested = targets[key] if targets is not None else None
    elif mode == "to_latest":
        requested = from_offset  # MaxOffset, which was at least the committed offset
    elif mode == "to_datetime" and from_offset is not None and high > q.min_offset:
        # the first message at or after T then, or MaxOffset (at least the offset) if none was
        requested = min(high, from_offset)
    else:  # to_earliest, by_duration, to_datetime on MinOffset: as low as the bounds then
        requested = 0
    low = 0 if requested is None else max(requested, 0)
    if from_offset is not None:
        low = min(low, from_offset)
    return min(low, high), high


def scenario_doc(scenario: Scenario, backward_only: bool) -> dict[str, Any]:
    """The scenario as data: a reset's result and a plan file carry it, events' detail too."""
    doc: dict[str, Any] = {"mode": scenario.mode}
    if scenario.value is not None:
        doc["value"] = scenario.value
    if backward_only:
        doc["backward_only"] = True
    return doc


def reset_detail(scenario: Scenario, reason: str | None, backward_only: bool) -> str:
    """The `detail` of reset events: mode, argument and reason, as JSON for auditors and SQL."""
    d = scenario_doc(scenario, backward_only)
    if reason:
        d["reason"] = reason
    return json.dumps(d, separators=(",", ":"))
