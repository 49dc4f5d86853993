"""progress, history, at, lookup, sql, export: the read commands and their JSON keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger import Ledger
from ledger.timeparse import iso
from tests.cli.conftest import G, T
from tests.support.cli import Cli, assert_one_line_error

PROGRESS_KEYS = {"topic", "queue_id", "min_offset", "max_offset", "committed_offset",
                 "pulled_offset", "lag", "inflight", "ready", "generation", "last_update"}
EVENT_KEYS = {"seq", "ts", "ts_ms", "kind", "consumer_group", "topic", "queue_id", "offset",
              "prev_offset", "generation", "client_id", "actor", "store_ts", "store_ts_ms",
              "detail"}
SCRIPT = Path(sys.executable).parent / "offset-ledger"


def test_progress_per_queue(committed: Cli) -> None:
    rows = committed.json("progress", "--group", G)
    assert len(rows) == 2
    assert set(rows[0]) >= PROGRESS_KEYS
    r = rows[0]
    assert (r["topic"], r["queue_id"], r["min_offset"], r["max_offset"], r["committed_offset"],
            r["pulled_offset"], r["lag"], r["inflight"], r["ready"], r["generation"]) == (
        T, 0, 0, 200, 100, 100, 100, 0, 100, 0)
    assert r["last_update"].endswith("Z") and "T" in r["last_update"]
    assert committed.json("progress", "--group", G, "--topic", "other") == []


def test_progress_of_an_unknown_group_is_an_empty_list(committed: Cli) -> None:
    r = committed("progress", "--group", "nobody", "--json")
    assert (r.exit_code, json.loads(r.stdout)) == (0, [])


def test_history_rows_oldest_first_with_iso_and_ms_times(committed: Cli) -> None:
    rows = committed.json("history")
    assert [r["seq"] for r in rows] == sorted(r["seq"] for r in rows)
    assert set(rows[0]) == EVENT_KEYS
    first = rows[0]
    assert first["kind"] == "queue_append"
    assert (first["store_ts"], first["store_ts_ms"]) == ("1970-01-01T00:16:40.000Z", 1_000_000)
    assert all(r["ts"] == iso(r["ts_ms"]) for r in rows)
    commits = committed.json("history", "--group", G, "--queue", "1", "--kind", "commit")
    assert [(c["prev_offset"], c["offset"], c["client_id"]) for c in commits] == [(0, 100, "c1")]


def test_history_limit_keeps_the_newest_oldest_first(committed: Cli) -> None:
    all_rows = committed.json("history")
    last3 = committed.json("history", "--limit", "3")
    assert last3 == all_rows[-3:]


def test_history_since_until(committed: Cli) -> None:
    rows = committed.json("history")
    mid = rows[len(rows) // 2]["ts_ms"]
    since = committed.json("history", "--since", str(mid))
    until = committed.json("history", "--until", iso(mid))
    assert since == [r for r in rows if r["ts_ms"] >= mid]
    assert until == [r for r in rows if r["ts_ms"] <= mid]


def test_history_of_an_unknown_kind_is_an_error(committed: Cli) -> None:
    assert_one_line_error(committed("history", "--kind", "comit"), 2, "'comit'")


def test_at_answers_the_state_as_of_a_past_time(committed: Cli) -> None:
    t_commit = committed.json("history", "--kind", "commit")[-1]["ts"]
    committed.json("commit", "--group", G, "--topic", T, "--queue", "0", "--offset", "150")
    past = committed.json("at", t_commit, "--group", G)
    assert past == [
        {"consumer_group": G, "topic": T, "queue_id": q, "committed_offset": 100, "generation": 0}
        for q in (0, 1)]
    now = committed.json("at", "now")
    assert [r["committed_offset"] for r in now] == [150, 100]
    assert committed.json("at", "0") == []


def test_lookup_finds_the_first_message_stored_at_or_after(committed: Cli) -> None:
    assert committed.json("lookup", "--topic", T, "--datetime", "1970-01-01T00:25:00") == [
        {"topic": T, "queue_id": 0, "offset": 100}, {"topic": T, "queue_id": 1, "offset": 100}]
    assert committed.json("lookup", "--topic", T, "--datetime", "0")[0]["offset"] == 0
    assert committed.json("lookup", "--topic", T, "--datetime", "3000000")[0]["offset"] is None


def test_sql_formats(committed: Cli) -> None:
    q = "SELECT topic, queue_id, lag FROM progress ORDER BY queue_id"
    expect = [{"topic": T, "queue_id": 0, "lag": 100}, {"topic": T, "queue_id": 1, "lag": 100}]
    assert json.loads(committed("sql", q, "--format", "json").stdout) == expect
    assert committed.json("sql", q) == expect
    assert committed("sql", q, "--format", "csv").stdout == "topic,queue_id,lag\nt,0,100\nt,1,100\n"
    table = committed("sql", q).stdout.splitlines()
    assert table[0].split() == ["topic", "queue_id", "lag"] and len(table) == 4


@pytest.mark.parametrize("query", ["DELETE FROM offsets", "DROP TABLE queues",
                                   "SELECT 1; DELETE FROM offsets",
                                   "COPY offsets TO '/tmp/x.csv'"])
def test_sql_that_is_not_a_read_is_exit_2(committed: Cli, query: str) -> None:
    before = committed.events()
    assert_one_line_error(committed("sql", query, "--json"), 2, "read-only")
    assert committed.events() == before
    assert committed.json("sql", "SELECT count(*) AS n FROM offsets") == [{"n": 2}]


def test_sql_error_names_the_problem(committed: Cli) -> None:
    assert_one_line_error(committed("sql", "SELECT nope FROM offsets"), 2, "nope")


def test_reads_on_a_missing_data_dir_are_exit_2_and_create_nothing(cli: Cli) -> None:
    assert_one_line_error(cli("progress", "--group", G), 2, str(cli.data))
    assert not cli.data.exists()


def _run(data: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OFFSET_LEDGER_DATA_DIR": str(data)}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_reads_work_while_another_process_writes(committed: Cli) -> None:
    with Ledger.open(committed.data) as writer:
        writer.commit(G, T, 0, 120)
        writer.flush_view()
        r = _run(committed.data, "progress", "--group", G, "--json")
        assert r.returncode == 0, r.stderr
        assert [x["committed_offset"] for x in json.loads(r.stdout)] == [120, 100]
        w = _run(committed.data, "commit", "--group", G, "--topic", T, "--queue", "0",
                 "--offset", "130")
        assert w.returncode == 2 and w.stdout == ""
        assert len(w.stderr.strip().splitlines()) == 1 and "locked" in w.stderr
