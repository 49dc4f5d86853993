"""Reset planning (Kafka's --reset-offsets scenarios, RocketMQ's resetOffsetByTime): pure.

A plan is computed from the state and, for `to_state_at` and `from_file`, from targets the
caller looked up; it is immutable data that `Ledger` executes through the fold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

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
    queue of T (known queues plus queues where the group has an offset)."""
    if scope.all_topics:
        return state.group_keys(group)
    keys: set[Key] = set()
    own = state.group_keys(group)
    for topic, queue_ids in scope.topics:
        if queue_ids is not None:
            keys.update((group, topic, q) for q in queue_ids)
            continue
        keys.update((group, t, q) for (t, q) in state.queues if t == topic)
        keys.update(k for k in own if k[1] == topic)
    return sorted(keys)


def plan_reset(
    state: State,
    group: str,
    keys: list[Key],
    scenario: Scenario,
    now_ms: int,
    *,
    backward_only: bool = False,
    targets: dict[Key, int] | None = None,
) -> list[PlanItem]:
    """Target per queue, clamped to [MinOffset, MaxOffset] where the bounds are known."""
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
        if q is not None:
            target = min(max(target, q.min_offset), q.max_offset)  # type: ignore[type-var]
        target = max(target, 0)  # type: ignore[type-var]
        if backward_only and current is not None and target > current:
            target = current
        plan.append(PlanItem(group, topic, queue_id, current, target))
    return plan


def reset_detail(scenario: Scenario, reason: str | None, backward_only: bool) -> str:
    """The `detail` of reset events: mode, argument and reason, as JSON for auditors and SQL."""
    d: dict[str, object] = {"mode": scenario.mode}
    if scenario.value is not None:
        d["value"] = scenario.value
    if backward_only:
        d["backward_only"] = True
    if reason:
        d["reason"] = reason
    return json.dumps(d, separators=(",", ":"))
