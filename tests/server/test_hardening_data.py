"""Issue 21, part B, over HTTP: plan rows and duplicate JSON keys against a real serve process;
each refused with a 400 naming the bad value, appending nothing, the log verified after."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.server.conftest import Server, raw
from tests.support.cli import Cli

JSON = {"Content-Type": "application/json"}
G, T = "plans", "orders"


@pytest.fixture(scope="module")
def served(module_server: Server) -> Iterator[Server]:
    """Group `plans` committed at 100 on orders:0 and orders:1 (MaxOffset 200)."""
    for q in (0, 1):
        assert raw(module_server, "POST", "/v1/queues/append",
                   json.dumps({"topic": T, "queue_id": q, "count": 200}).encode(), JSON)[0] == 200
        assert raw(module_server, "POST", "/v1/commit", json.dumps(
            {"group": G, "topic": T, "queue_id": q, "offset": 100}).encode(), JSON)[0] == 200
    yield module_server


def _reset(server: Server, body: dict) -> tuple[int, object]:
    return raw(server, "POST", f"/v1/groups/{G}/reset", json.dumps(body).encode(), JSON)


def _refused_with_nothing_appended(server: Server, status: int, body: object,
                                   *fragments: str) -> None:
    assert status == 400, body
    assert isinstance(body, dict) and all(f in body["error"] for f in fragments), body


def _log_clean(server: Server) -> None:
    r = Cli(server.data)("verify", "--json")  # lock free: the log, not the view the server holds
    assert json.loads(r.stdout)["problems"] == [], r.stdout


def test_a_queue_twice_in_a_reviewed_plan_is_a_400(served: Server) -> None:
    status, dry = _reset(served, {"topic": T, "shift_by": -5})
    assert status == 200
    rows = [{k: r[k] for k in ("topic", "queue_id", "from_offset", "to_offset")}
            for r in dry["plan"]]  # type: ignore[index]
    before = served.next_seq()
    status, body = _reset(served, {"shift_by": -5, "plan": [*rows, {**rows[0], "to_offset": 50}],
                                   "execute": True, "reason": "twice"})
    _refused_with_nothing_appended(served, status, body, f"duplicate queue {T}:0 in the plan")
    assert served.next_seq() == before
    _log_clean(served)


def test_a_plan_row_its_scenario_cannot_give_is_a_400(served: Server) -> None:
    """A row 100 -> 20 named `shift_by -5` was recorded as that scenario: refused now."""
    before = served.next_seq()
    status, body = _reset(served, {"shift_by": -5, "execute": True, "reason": "forged", "plan": [
        {"topic": T, "queue_id": 0, "from_offset": 100, "to_offset": 20}]})
    _refused_with_nothing_appended(served, status, body,
                                   f"plan row {T}:0 disagrees with its scenario shift_by -5",
                                   "to_offset 20", "gives 95 from offset 100")
    assert served.next_seq() == before
    status, body = _reset(served, {"shift_by": -5, "execute": True, "reason": "as planned",
                                   "plan": [{"topic": T, "queue_id": 0, "from_offset": 100,
                                             "to_offset": 95}]})
    assert status == 200 and body["executed"], body  # type: ignore[index]
    _log_clean(served)


def test_a_key_twice_in_a_json_body_is_a_400(served: Server) -> None:
    before = served.next_seq()
    body = (f'{{"group":"{G}","topic":"{T}","queue_id":1,"offset":150,"offset":199}}').encode()
    status, answer = raw(served, "POST", "/v1/commit", body, JSON)
    _refused_with_nothing_appended(served, status, answer, "duplicate key 'offset'")
    status, answer = raw(served, "PUT", "/v1/groups/twice", b'{"mode":"broadcast",'
                         b'"mode":"clustering"}', JSON)
    _refused_with_nothing_appended(served, status, answer, "duplicate key 'mode'")
    status, results = raw(served, "POST", "/v1/commands", (
        f'[{{"op":"commit","group":"{G}","topic":"{T}","queue_id":1,"offset":150,'
        f'"offset":199}}]').encode(), JSON)
    assert status == 200 and results[0]["error"].startswith("duplicate key 'offset'"), results  # type: ignore[index]
    assert served.next_seq() == before
    _log_clean(served)
