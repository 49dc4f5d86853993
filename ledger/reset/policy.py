"""Reset guardrails (RocketMQ: "strictly control reset permissions"): who may reset which
groups, how far back without --force, how often. Read from `reset-policy.toml` in the data
directory; no file means no restriction.

```toml
[[allow]]                       # an actor may reset a group if any rule matches both
actors = ["alice", "ops-*"]
groups = ["billing*"]

[limits]
max_rewind_messages = 1000000   # summed over the plan; more needs --force
max_rewind = "P1D"              # to-datetime / by-duration / to-state-at reaching further back
resets_per_group = 3            # executed resets per group within `window`
window = "PT1H"
```
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ledger.errors import InvalidInput
from ledger.fold.state import PlanItem
from ledger.reset.scenarios import Scenario
from ledger.timeparse import parse_duration

POLICY_FILE = "reset-policy.toml"


@dataclass(frozen=True, slots=True)
class ResetPolicy:
    allow: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] | None = None
    max_rewind_messages: int | None = None
    max_rewind_ms: int | None = None
    resets_per_group: int | None = None
    window_ms: int = 3_600_000

    @classmethod
    def load(cls, root: Path) -> ResetPolicy:
        path = root / POLICY_FILE
        if not path.exists():
            return cls()
        try:
            doc = tomllib.loads(path.read_text())
            _known_keys(doc, ("allow", "limits"), "")
            for rule in doc.get("allow", []):
                _known_keys(rule, ("actors", "groups"), "[[allow]] ")
            _known_keys(doc.get("limits", {}), _LIMIT_KEYS, "[limits] ")
            allow = None
            if "allow" in doc:
                allow = tuple(
                    (tuple(str(a) for a in r.get("actors", [])),
                     tuple(str(g) for g in r.get("groups", [])))
                    for r in doc["allow"])
            lim = doc.get("limits", {})
            return cls(
                allow=allow,
                max_rewind_messages=_opt_int(lim.get("max_rewind_messages")),
                max_rewind_ms=parse_duration(lim["max_rewind"]) if "max_rewind" in lim else None,
                resets_per_group=_opt_int(lim.get("resets_per_group")),
                window_ms=parse_duration(lim.get("window", "PT1H")),
            )
        except (tomllib.TOMLDecodeError, AttributeError, TypeError, ValueError, KeyError,
                InvalidInput) as e:
            raise InvalidInput(f"unreadable reset policy {path}: {e}") from None

    def refusal(
        self, *, actor: str | None, group: str, items: Sequence[PlanItem], scenario: Scenario,
        now_ms: int, recent_resets: int, force: bool,
    ) -> tuple[str, str] | None:
        """(rule, message) of the first rule refusing this reset, or None when allowed."""
        if self.allow is not None and not any(
            any(fnmatch.fnmatchcase(actor or "", a) for a in actors)
            and any(fnmatch.fnmatchcase(group, g) for g in groups)
            for actors, groups in self.allow
        ):
            return "permission", f"actor {actor!r} may not reset group {group!r} ({POLICY_FILE})"
        if self.resets_per_group is not None and recent_resets >= self.resets_per_group:
            return "rate", (f"group {group!r} had {recent_resets} resets in the last "
                            f"{self.window_ms} ms; the limit is {self.resets_per_group}")
        if force:
            return None
        rewind = sum(max(0, (i.from_offset or 0) - i.to_offset) for i in items
                     if i.from_offset is not None)
        refused = self.rewind_refusal(rewind, "reset", "use --force")
        if refused is not None:
            return refused
        back = rewind_ms(scenario, now_ms)
        if self.max_rewind_ms is not None and back is not None and back > self.max_rewind_ms:
            return "max_rewind", (f"reset goes back {back} ms, more than max_rewind "
                                  f"{self.max_rewind_ms} ms: use --force")
        return None


    def rewind_refusal(self, rewind: int, what: str, remedy: str) -> tuple[str, str] | None:
        """The max_rewind_messages rule, for a reset's plan and for a sync that moves an offset
        back (a sync is a reset a broker or a mirror sends: the same guardrail holds)."""
        if self.max_rewind_messages is not None and rewind > self.max_rewind_messages:
            return "max_rewind", (f"{what} rewinds {rewind} messages, more than "
                                  f"max_rewind_messages {self.max_rewind_messages}: {remedy}")
        return None


def rewind_ms(scenario: Scenario, now_ms: int) -> int | None:
    """How far back in time a time-based scenario reaches."""
    if scenario.mode in ("to_datetime", "to_state_at"):
        return now_ms - (scenario.value or 0)
    if scenario.mode == "by_duration":
        return scenario.value
    return None


_LIMIT_KEYS = ("max_rewind_messages", "max_rewind", "resets_per_group", "window")


def _known_keys(table: object, known: tuple[str, ...], where: str) -> None:
    """A misspelled key would silently disable a guardrail: refuse it, naming it."""
    if not isinstance(table, dict):
        raise InvalidInput(f"{where or 'the policy'} must be a table")
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise InvalidInput(f"unknown key {unknown[0]!r} in {where or 'the top level'}: use "
                           f"{', '.join(known)}")


def _opt_int(v: object) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"expected a non-negative integer, got {v!r}")
    return v
