"""`lag --summary`: one row per group (what the console's groups page and `GET /v1/lag` show),
the same judgement as `lag --json` without the windows; and its lag-at-last-commits points."""

from __future__ import annotations

import time

from ledger import Ledger
from ledger.demo import demo_commands, demo_start
from ledger.reads.documents import COMMIT_LAG_POINTS_MAX, commit_lag
from tests.cli.conftest import Cli


def test_lag_summary_is_the_lag_document_without_its_windows(cli: Cli) -> None:
    now = int(time.time() * 1000)
    with Ledger.open(cli.data) as led:
        assert not [r for r in led.apply(demo_commands(demo_start(now))) if "error" in r]
    full = {g["consumer_group"]: g for g in cli.json("lag", "--at", now)}
    summary = cli.json("lag", "--summary", "--at", now)
    assert [g["consumer_group"] for g in summary] == ["analytics", "billing", "shipping"]
    for g in summary:
        whole = full[g["consumer_group"]]
        assert (g["status"], g["total_lag"], g["queues"]) == (
            whole["status"], whole["total_lag"], len(whole["queues"]))
        assert g["max_lag_ms"] == max(q["lag_ms"] for q in whole["queues"])
        assert g["last_commit_ms"] == max(q["window"][-1]["ts"] for q in whole["queues"])
    assert summary[2]["statuses"] == {"STOP": 4}
    table = cli("lag", "--summary")
    assert table.exit_code == 0
    assert table.stdout.splitlines()[0].split() == [
        "consumer_group", "status", "complete", "total_lag", "max_lag_ms", "last_commit", "queues"]


def window(*entries: tuple[int, int]) -> dict:
    return {"window": [{"ts": ts, "offset": 0, "lag": lag} for ts, lag in entries]}


def test_commit_lag_sums_each_queues_lag_at_its_latest_commit() -> None:
    queues = [window((10, 5), (30, 7), (50, 2)), window((20, 100), (40, 90)), {"window": []}]
    # from 20 on, when both queues have an entry: 5 + 100, then 7 + 100, 7 + 90, 2 + 90
    assert commit_lag(queues) == [[20, 105], [30, 107], [40, 97], [50, 92]]
    assert commit_lag([{"window": []}]) == []


def test_commit_lag_keeps_at_most_its_points_first_and_last_among_them() -> None:
    points = commit_lag([window(*[(ts, ts * 2) for ts in range(1000)])])
    assert len(points) == COMMIT_LAG_POINTS_MAX
    assert points[0] == [0, 0] and points[-1] == [999, 1998]
