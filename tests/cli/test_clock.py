"""The ledger's clock cannot be poisoned (issue 21, item 1): a `ts` more than the clock skew
ahead of the clock is refused naming it, on every path in (apply NDJSON and Parquet, typed
commands, importers), unless the caller may backfill; with `verify` clean after. And the SQL
time limit of `offset-ledger sql`."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ledger import InvalidInput, Ledger
from tests.support.cli import Cli, assert_one_line_error

T = "t"
MAX_TS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def _verify_clean(cli: Cli) -> None:
    r = cli("verify", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["problems"] == [], r.stdout


def _ms() -> int:
    return int(time.time() * 1000)


def test_apply_refuses_a_ts_beyond_the_skew_naming_it_and_backfill_takes_it(cli: Cli) -> None:
    later = _ms() + 3_600_000
    lines = "".join(json.dumps(x) + "\n" for x in (
        {"op": "queue_append", "topic": T, "queue_id": 0, "count": 5},
        {"op": "queue_append", "topic": T, "queue_id": 0, "count": 5, "ts": later},
        {"op": "queue_append", "topic": T, "queue_id": 0, "count": 5,
         "ts": "2999-01-01T00:00:00Z"}))
    r = cli("apply", "-", "--json", input=lines)
    results = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.exit_code == 0 and "error" not in results[0]
    assert f"invalid ts {later}" in results[1]["error"]
    assert "invalid ts '2999-01-01T00:00:00Z' (2999-01-01T00:00:00.000Z)" in results[2]["error"]
    assert "more than clock_skew_ms 10000 ahead" in results[2]["error"]
    assert cli.json("queue", "list")[0]["max_offset"] == 5
    _verify_clean(cli)
    r = cli("apply", "-", "--backfill", "--json", input=lines)
    assert all("error" not in json.loads(x) for x in r.stdout.splitlines()), r.stdout
    assert cli.json("history", "--limit", "1")[0]["ts"] == "2999-01-01T00:00:00.000Z"


def test_a_parquet_apply_judges_each_line_as_the_ndjson_apply_does(tmp_path: Path) -> None:
    """3,000 lines fold column-wise; the future ones fail per line with the same message."""
    now = _ms()
    rows = [{"op": "commit", "group": f"g{i % 7}", "topic": T, "queue_id": i % 3,
             "offset": i, "ts": now + (3_600_000 if i % 500 == 499 else 0)}
            for i in range(3000)]
    ndjson = tmp_path / "c.ndjson"
    ndjson.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist(rows), table)
    out = {}
    for name, path in (("ndjson", ndjson), ("parquet", table)):
        cli = Cli(tmp_path / name)
        r = cli("apply", str(path), "--json")
        assert r.exit_code == 0, r.stderr
        out[name] = [json.loads(x) for x in r.stdout.splitlines()]
        _verify_clean(cli)
    errors = {r["line"]: r["error"] for r in out["parquet"] if "error" in r}
    assert sorted(errors) == list(range(500, 3001, 500))
    assert all("more than clock_skew_ms" in e for e in errors.values())
    def same(results: list[dict]) -> list[dict]:  # (the clock a message names moved on)
        return [{k: re.sub(r"clock \(.*?\)", "clock", v) if k == "error" else v
                 for k, v in r.items() if k != "seq"} for r in results]

    assert same(out["parquet"]) == same(out["ndjson"])


def test_the_python_api_refuses_a_future_ts_unless_opened_to_backfill(tmp_path: Path) -> None:
    later = _ms() + 3_600_000
    with Ledger.open(tmp_path / "d") as led:
        with pytest.raises(InvalidInput, match=f"invalid ts {later}"):
            led.submit_one({"op": "queue_append", "topic": T, "queue_id": 0, "ts": later})
        results = led.submit_decoded(
            [led_cmd(later), led_cmd(later)], backfill=[False, True])  # per sender
        assert "clock_skew_ms" in (results[0].error or "") and results[1].error is None
    with Ledger.open(tmp_path / "d", backfill=True) as led:
        assert led.submit_one({"op": "queue_append", "topic": T, "queue_id": 0,
                               "ts": later + 1}).error is None


def led_cmd(ts: int) -> object:
    from ledger import QueueAppend

    return QueueAppend(topic=T, queue_id=0, ts=ts)


def test_init_clock_skew_sets_how_far_ahead_a_ts_may_be(cli: Cli) -> None:
    ahead = {"op": "queue_append", "topic": T, "queue_id": 0, "ts": _ms() + 60_000}
    r = cli("apply", "-", "--json", input=json.dumps(ahead) + "\n")
    assert "clock_skew_ms 10000" in json.loads(r.stdout)["error"]
    assert cli.json("init", "--clock-skew", "PT5M")["clock_skew_ms"] == 300_000
    r = cli("apply", "-", "--json", input=json.dumps(ahead) + "\n")
    assert "error" not in json.loads(r.stdout), r.stdout


def test_an_import_with_a_commit_time_in_year_9999_is_refused_naming_the_record(cli: Cli,
                                                                              tmp_path: Path
                                                                              ) -> None:
    dump = tmp_path / "offsets.txt"
    dump.write_text(
        "[billing,orders,0]::OffsetAndMetadata(offset=70, leaderEpoch=Optional.empty, "
        "metadata=, commitTimestamp=1600000000000, expireTimestamp=None)\n"
        "[billing,orders,1]::OffsetAndMetadata(offset=5, leaderEpoch=Optional.empty, "
        f"metadata=, commitTimestamp={MAX_TS}, expireTimestamp=None)\n")
    assert cli("queue", "append", "--topic", "x", "--queue", "0").exit_code == 0
    r = cli("import", "kafka-offsets", str(dump))
    assert_one_line_error(r, 2, "the sync record of group 'billing', topic 'orders', "
                                "queue_id 1, offset 5", f"invalid ts {MAX_TS}",
                          "nothing imported")
    assert cli.json("history") and cli.json("history", "--kind", "sync") == []
    _verify_clean(cli)
    done = cli.json("import", "kafka-offsets", str(dump), "--backfill")
    assert done["changed"] == 2


def test_sql_stops_a_query_past_its_time_limit(cli: Cli) -> None:
    assert cli("queue", "append", "--topic", T, "--queue", "0").exit_code == 0
    started = time.monotonic()
    r = cli("sql", "SELECT sum(a.range * b.range) FROM range(1000000) a, range(1000000) b",
            "--timeout", "1")
    assert_one_line_error(r, 2, "sql stopped: it ran past the time limit of 1 s")
    assert time.monotonic() - started < 30
