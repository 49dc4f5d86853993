"""offset-ledger lag: the document DESIGN.md specifies, the text table, the series, and one-line
errors for bad input."""

from __future__ import annotations

import pytest

from ledger import Ledger
from tests.support.cli import Cli, assert_one_line_error
from tests.support.clock import FakeClock

GROUP_KEYS = {"consumer_group", "status", "complete", "total_lag", "max_lag", "queues"}
QUEUE_KEYS = {"topic", "queue_id", "status", "committed_offset", "max_offset", "lag", "lag_ms",
              "complete", "window"}
S = 1000


@pytest.fixture
def lagging(cli: Cli) -> Cli:
    """Group app committing every second until 10 s: on orders:0 up to 100 (all of it), on
    orders:1 up to 99; 100 messages each, stored at 0."""
    lines = []
    for q in (0, 1):
        lines.append({"op": "queue_append", "topic": "orders", "queue_id": q, "count": 100,
                      "store_time": 0, "ts": S})
        lines += [{"op": "commit", "group": "app", "topic": "orders", "queue_id": q,
                   "offset": 10 * i - q, "ts": i * S} for i in range(1, 11)]
    with Ledger.open(cli.data, clock=FakeClock(0)) as led:
        assert all("error" not in r for r in led.apply(sorted(lines, key=lambda x: x["ts"])))
    return cli


def test_lag_json_is_the_designed_document(lagging: Cli) -> None:
    (group,) = lagging.json("lag", "--at", str(10 * S + 500), "--window", "3")
    assert set(group) == GROUP_KEYS
    assert (group["consumer_group"], group["status"], group["complete"]) == ("app", "OK", 1.0)
    q0, q1 = group["queues"]
    assert set(q0) == QUEUE_KEYS
    assert [(e["ts"], e["offset"], e["lag"]) for e in q0["window"]] == [
        (8 * S, 80, 20), (9 * S, 90, 10), (10 * S, 100, 0)]
    assert (q0["committed_offset"], q0["max_offset"], q0["lag"], q0["lag_ms"]) == (100, 100, 0, 0)
    assert (q1["committed_offset"], q1["lag"], q1["lag_ms"], q1["status"]) == (
        99, 1, 10 * S + 500, "OK")
    assert (group["total_lag"], group["max_lag"]) == (1, q1)


def test_lag_judges_the_past_and_now(lagging: Cli) -> None:
    at_5s = lagging.json("lag", "--at", str(5 * S), "--window", "3")[0]["queues"][0]
    assert (at_5s["committed_offset"], at_5s["lag"], at_5s["lag_ms"]) == (50, 50, 5 * S)
    # now is the wall clock, long after the last commit: orders:0 is caught up, orders:1 stopped
    (now,) = lagging.json("lag", "--group", "app")
    assert [q["status"] for q in now["queues"]] == ["OK", "STOP"]
    assert now["status"] == "ERR"


def test_lag_text_is_a_row_per_queue(lagging: Cli) -> None:
    r = lagging("lag", "--at", "1970-01-01T00:00:05Z", "--topic", "orders:1")
    assert r.exit_code == 0, r.stderr
    header, _, row = r.stdout.splitlines()
    assert header.split() == ["consumer_group", "group_status", "topic", "queue_id", "status",
                              "committed_offset", "max_offset", "lag", "lag_ms", "complete"]
    assert row.split()[:4] == ["app", "OK", "orders", "1"]


def test_lag_of_an_unknown_group_is_notfound(lagging: Cli) -> None:
    assert lagging.json("lag", "--group", "ghost") == [{
        "consumer_group": "ghost", "status": "NOTFOUND", "complete": 0.0, "total_lag": 0,
        "max_lag": None, "queues": []}]
    r = lagging("lag", "--group", "ghost")
    assert r.exit_code == 0 and "NOTFOUND" in r.stdout


def test_lag_series_json_and_text(lagging: Cli) -> None:
    doc = lagging.json("lag", "--since", "4000", "--until", "6000", "--every", "PT1S",
                       "--topic", "orders:0")
    assert doc == [{"consumer_group": "app", "topic": "orders", "queue_id": 0, "series": [
        {"ts": t * S, "committed_offset": 10 * t, "max_offset": 100, "lag": 100 - 10 * t,
         "lag_ms": t * S} for t in (4, 5, 6)]}]
    r = lagging("lag", "--since", "4000", "--until", "6000", "--every", "PT1S")
    assert r.exit_code == 0, r.stderr
    assert len(r.stdout.splitlines()) == 2 + 6
    assert "1970-01-01T00:00:04.000Z" in r.stdout
    rows = lagging.json("sql", "SELECT * FROM lag_series(4000, 6000, 1000) WHERE queue_id = 0")
    assert [(x["ts"], x["lag"], x["lag_ms"]) for x in rows] == [
        (p["ts"], p["lag"], p["lag_ms"]) for p in doc[0]["series"]]


@pytest.mark.parametrize(("args", "fragments"), [
    (["--window", "-1"], ["invalid window -1"]),
    (["--window", "0"], ["invalid window 0"]),
    (["--allowed-lag", "-5"], ["invalid allowed lag -5"]),
    (["--topic", "orders:x"], ["invalid --topic 'orders:x'"]),
    (["--topic", "bad topic"], ["invalid --topic 'bad topic'"]),
    (["--at", "yesterday"], ["at: invalid time 'yesterday'"]),
    (["--since", "0", "--until", "5000"], ["--since, --until and --every"]),
    (["--since", "0", "--until", "5000", "--every", "PT1S", "--at", "0"], ["no --at"]),
    (["--since", "9000", "--until", "5000", "--every", "PT1S"], ["invalid until 5000"]),
    (["--since", "0", "--until", "5000", "--every", "soon"], ["--every", "'soon'"]),
    (["--since", "0", "--until", "99999999", "--every", "PT0.001S"], ["too long"]),
])
def test_bad_lag_input_is_one_line_exit_2(lagging: Cli, args: list[str],
                                          fragments: list[str]) -> None:
    assert_one_line_error(lagging("lag", *args), 2, *fragments)
