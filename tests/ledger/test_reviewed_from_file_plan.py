"""A plan reviewed from a Kafka CSV is executed as it was shown: the CSV names the scenario
(`from_file`, recorded in the reset's detail) and the plan is the scope, as for any other
scenario; the console executes every reviewed plan this way."""

from __future__ import annotations

import json

from ledger import Ledger

CSV = "t,0,30\n"


def test_a_reviewed_from_file_plan_runs_as_planned(ledger: Ledger) -> None:
    ledger.queue_append("t", 0, 100)
    ledger.group_set("g", initial="earliest")
    ledger.pull("g", "t", 0, client="c")
    assert ledger.commit("g", "t", 0, 80, client="c").accepted
    dry = ledger.run_reset({"op": "reset", "group": "g", "from_csv": CSV})
    rows = [{k: r[k] for k in ("topic", "queue_id", "from_offset", "to_offset")}
            for r in dry.plan]
    assert rows == [{"topic": "t", "queue_id": 0, "from_offset": 80, "to_offset": 30}]
    done = ledger.run_reset({"op": "reset", "group": "g", "from_csv": CSV, "plan": rows,
                             "execute": True, "reason": "INC-1"})
    assert done.executed and ledger.committed("g", "t", 0) == 30
    [event] = ledger.history(group="g", kind="reset").to_pylist()
    assert json.loads(event["detail"]) == {"mode": "from_file", "reason": "INC-1"}
