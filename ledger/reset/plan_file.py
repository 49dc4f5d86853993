"""The reviewed plan as a file: what `reset ... --export-plan` prints and `reset --from-file`
executes as it was reviewed, refused when stale exactly as over HTTP.

Kafka's CSV (`--export`) carries only targets, so a plan reviewed as CSV cannot tell that its
queues moved since; this JSON carries each queue's from_offset and the scenario it was planned
with (so that a row the scenario cannot have given is refused too):

    {"consumer_group": "billing", "scenario": {"mode": "shift_by", "value": -5},
     "plan": [{"topic": "orders", "queue_id": 0, "from_offset": 1000, "to_offset": 995}]}
"""

from __future__ import annotations

from typing import Any

import msgspec

from ledger.commands.command import PlanRow, Reset
from ledger.commands.strict_json import decode_strict
from ledger.errors import InvalidInput
from ledger.reset.scenarios import SCENARIOS, Scenario

FLAG_MODES = ("to_earliest", "to_latest", "to_current")


class PlanScenario(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The scenario a plan was made with, as `reset_detail` records it."""

    mode: str
    value: int | None = None
    backward_only: bool = False


class PlanFile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    consumer_group: str
    scenario: PlanScenario
    plan: list[PlanRow]


def scenario_fields(scenario: Scenario) -> dict[str, Any]:
    """The `Reset` fields that name `scenario` (a from-file plan names it by an empty CSV: the
    plan's rows are its targets)."""
    if scenario.mode == "from_file":
        return {"from_csv": ""}
    if scenario.mode in FLAG_MODES:
        return {scenario.mode: True}
    return {scenario.mode: scenario.value}


def plan_file_text(result: dict[str, Any]) -> str:
    """A reset's result (`reset --json`) as the plan file `reset --from-file` takes back."""
    doc = {"consumer_group": result["consumer_group"], "scenario": result["scenario"],
           "plan": [{k: row[k] for k in ("topic", "queue_id", "from_offset", "to_offset")}
                    for row in result["plan"]]}
    return msgspec.json.encode(doc).decode() + "\n"


def reset_with_file(options: dict[str, Any], text: str | None) -> Reset:
    """The `Reset` that the CLI's options and the content of `--from-file` (if given) ask for;
    an option that the plan file already says (its scenario) is refused, not overridden."""
    fields = dict(options)
    if text is not None:
        for name, value in from_file_fields(text, options["group"]).items():
            if name == "backward_only":
                fields[name] = bool(fields.get(name)) or value
                continue
            if fields.get(name) not in (None, False):
                raise InvalidInput(f"--from-file holds a plan with its scenario: drop "
                                   f"--{name.replace('_', '-')}")
            fields[name] = value
    return Reset(**fields)


def from_file_fields(text: str, group: str) -> dict[str, Any]:
    """What `reset --from-file` holds, as `Reset` fields: a reviewed plan (a JSON object, as
    `--export-plan` prints it: executed as it is, refused when stale) or Kafka's CSV (targets,
    planned now: nothing says what they were reviewed against)."""
    if text.lstrip("\ufeff \t\r\n").startswith("{"):
        return plan_file_fields(text, group)
    return {"from_csv": text}


def plan_file_fields(text: str, group: str) -> dict[str, Any]:
    """The `Reset` fields (plan, scenario, backward_only) of a plan file for `group`; a file that
    is not one, or that is for another group, is bad input naming what is wrong."""
    data = decode_strict(text.encode().removeprefix(b"\xef\xbb\xbf"), "the plan file")
    try:
        planned = msgspec.convert(data, PlanFile)
    except msgspec.ValidationError as e:
        raise InvalidInput(f"not a reviewed plan (reset --export-plan): {e}") from None
    if planned.consumer_group != group:
        raise InvalidInput(f"the plan file is for group {planned.consumer_group!r}, not "
                           f"{group!r}")
    mode = planned.scenario.mode
    if mode not in SCENARIOS:
        raise InvalidInput(f"the plan file's scenario {mode!r} is unknown: use one of "
                           f"{', '.join(SCENARIOS)}")
    if (planned.scenario.value is None) != (mode in FLAG_MODES or mode == "from_file"):
        raise InvalidInput(f"the plan file's scenario {mode} "
                           + ("takes no value" if planned.scenario.value is not None
                              else "needs a value"))
    return {"plan": planned.plan, "backward_only": planned.scenario.backward_only,
            **scenario_fields(Scenario(mode, planned.scenario.value))}
