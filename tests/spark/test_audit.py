"""Audit: a clean ledger is clean; each planted anomaly is found, with its details."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from cli import invoke
from ledger import Ledger, Scenario, Scope
from ledger.fold.events import Commit
from spark_compaction import audit
from spark_compaction.auditor import prepare_views
from spark_compaction.lag import lag_series
from spark_compaction.session import snapshot
from tests.spark.conftest import append_raw, rewrite_segment
from tests.support.clock import FakeClock

pytestmark = pytest.mark.spark

T = "orders"


def build_clean(root: Path) -> FakeClock:
    """Two clustering groups and a broadcast one consuming normally, a reset by alice, a
    retention truncation behind every committed offset."""
    clock = FakeClock()
    with Ledger.open(root, clock=clock, segment_events_max=8) as led:
        for q in (0, 1):
            led.queue_append(T, q, 100)
        led.group_set("g1", initial="earliest")
        led.group_set("g2", initial="earliest")
        led.group_set("gb", mode="broadcast", initial="earliest")
        for offset in (10, 20, 40, 60):
            clock.advance(1_000)
            led.pull("g1", T, 0, client="c1", max_count=20)
            assert led.commit("g1", T, 0, offset, client="c1").accepted
            led.pull("g2", T, 1, client="c2", max_count=20)
            assert led.commit("g2", T, 1, offset // 2, client="c2").accepted
            for client in ("b1", "b2"):
                led.pull("gb", T, 0, client=client, max_count=20)
                assert led.commit("gb", T, 0, offset // 4, client=client).accepted
        clock.advance(60_000)
        led.reset("g1", Scenario("to_offset", 15), scope=Scope(topics=((T, (0,)),)),
                  actor="alice", reason="INC-7 replay the outage").execute()
        clock.advance(1_000)
        led.pull("g1", T, 0, client="c1")
        assert led.commit("g1", T, 0, 25, client="c1").accepted
        led.queue_truncate(T, 1, 20)
        led.queue_append(T, 0, 50)
    return clock


@pytest.fixture(scope="module")
def clean_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("clean") / "data"
    build_clean(root)
    return root


@pytest.fixture(scope="module")
def clean_cli(spark, clean_root, tmp_path_factory) -> tuple[int, str]:
    """`offset-ledger audit --json --report FILE` on the clean ledger: exit code and stdout."""
    report = tmp_path_factory.mktemp("report") / "audit.html"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = invoke(["--data-dir", str(clean_root), "audit", "--json", "--report", str(report)])
    return code, stdout.getvalue()


@pytest.fixture(scope="module")
def clean_result(clean_cli) -> dict:
    return json.loads(clean_cli[1])


@pytest.fixture(scope="module")
def planted(spark, clean_root, tmp_path_factory) -> tuple[Path, dict, dict]:
    """The clean ledger plus one anomaly of every kind; returns its root, the audit and what
    was planted where."""
    root = tmp_path_factory.mktemp("planted") / "data"
    shutil.copytree(clean_root, root)
    with Ledger.open(root) as led:
        ts = led.state.last_ts + 1
        led.queue_truncate(T, 1, 50)  # g2 stays committed at 30, now behind retention
        led.pull("g1", T, 1, client="c1")  # initial at MinOffset 50
        ts = led.state.last_ts + 1
    append_raw(root, [
        Commit(ts=ts, consumer_group="g1", topic=T, queue_id=0, offset=5, generation=1,
               client_id="c1"),  # below g1's 25: a regression
        Commit(ts=ts, consumer_group="g1", topic=T, queue_id=1, offset=150, generation=0,
               client_id="c1"),  # MaxOffset of orders:1 is 100
        Commit(ts=ts + 1, consumer_group="g2", topic=T, queue_id=1, offset=40, generation=0,
               client_id="c2"),  # above g2's 30 but below MinOffset 50
    ])
    with Ledger.open(root) as led:  # the view catches up with the planted events
        end = led.log.next_seq
        pulls = led.sql("SELECT seq FROM events WHERE kind = 'pull' AND seq BETWEEN 8 AND 23 "
                        "ORDER BY seq").column("seq").to_pylist()
    gap = next(s for s in pulls if 8 <= s < 16)
    dup = next(s for s in pulls if 16 <= s < 24)
    rewrite_segment(root, 1, lambda t: t.filter(pa.compute.not_equal(t.column("seq"), gap)))
    rewrite_segment(root, 2, lambda t: pa.concat_tables(
        [t, t.filter(pa.compute.equal(t.column("seq"), dup))]))
    with duckdb.connect(str(root / "view.duckdb")) as con:  # tamper with the view
        con.execute("UPDATE offsets SET committed_offset = 99 WHERE consumer_group = 'g2'")
    return root, audit(root), {"gap": gap, "dup": dup, "end": end, "ts": ts}


def findings(result: dict, kind: str) -> list[dict]:
    return [f for f in result["findings"] if f["kind"] == kind]


def test_a_clean_ledger_audits_clean(clean_result):
    assert clean_result["clean"], clean_result["findings"]
    assert set(clean_result["findings_by_kind"].values()) == {0}
    checked = clean_result["checked"]
    # g1 and g2; gb's clients are idle past its client timeout by now (the audit's clock is the
    # wall clock), so gb has no group offset, in the view as in the replay.
    assert checked["view_keys"] == checked["replay_keys"] == 2
    assert checked["view_source"] == "file"  # no writer: the DuckDB file itself is checked


def test_resets_are_listed_with_actor_reason_and_messages_replayed(clean_result):
    (reset,) = [r for r in clean_result["resets"] if r["client_id"] is None]
    assert (reset["consumer_group"], reset["topic"], reset["queue_id"]) == ("g1", T, 0)
    assert (reset["actor"], reset["reason"], reset["mode"], reset["value"]) == (
        "alice", "INC-7 replay the outage", "to_offset", 15)
    assert (reset["from_offset"], reset["to_offset"], reset["replays"], reset["skips"]) == (
        60, 15, 45, 0)
    assert reset["generation"] == 1 and reset["status"] == "applied"


def test_finds_a_commit_regression(planted):
    _, result, _ = planted
    (f,) = findings(result, "commit_regression")
    assert (f["consumer_group"], f["queue_id"], f["offset"], f["prev_value"]) == ("g1", 0, 5, 25)
    assert result["findings_by_kind"]["commit_regression"] == 1
    assert "commit 5" in f["message"] and "below 25" in f["message"]


def test_finds_an_offset_beyond_max_offset(planted):
    _, result, _ = planted
    (f,) = findings(result, "beyond_max_offset")
    assert (f["consumer_group"], f["queue_id"], f["offset"], f["max_offset"]) == ("g1", 1, 150,
                                                                                  100)


def test_finds_an_offset_below_min_offset(planted):
    _, result, _ = planted
    (f,) = findings(result, "below_min_offset")
    assert (f["consumer_group"], f["queue_id"], f["offset"], f["min_offset"]) == ("g2", 1, 40, 50)


def test_finds_a_seq_gap(planted):
    _, result, where = planted
    (f,) = findings(result, "seq_gap")
    assert (f["gap_from"], f["gap_to"]) == (where["gap"], where["gap"] + 1)


def test_finds_a_seq_duplicate(planted):
    _, result, where = planted
    (f,) = findings(result, "seq_duplicate")
    assert (f["seq"], f["copies"]) == (where["dup"], 2)


def test_finds_the_view_disagreeing_with_the_replay(planted):
    _, result, _ = planted
    (f,) = findings(result, "view_mismatch")
    assert (f["consumer_group"], f["queue_id"], f["view_committed"], f["replay_committed"]) == (
        "g2", 1, 99, 40)
    assert not planted[1]["clean"]


def test_cli_audit_exit_codes_json_and_since(planted, clean_cli, capsys):
    root, _, where = planted
    code, stdout = clean_cli
    assert code == 0 and stdout.count("\n") == 1  # one JSON document, nothing else
    out = json.loads(stdout)
    assert out["clean"] and out["findings"] == []
    assert invoke(["--data-dir", str(root), "audit", "--json",
                   "--since", str(where["ts"] + 1)]) == 1
    out = json.loads(capsys.readouterr().out)
    kinds = {f["kind"] for f in out["findings"]}
    # The regression is older than --since; the last planted commit, the view and seqs are not.
    assert "commit_regression" not in kinds
    assert {"below_min_offset", "view_mismatch", "seq_gap", "seq_duplicate"} <= kinds


def test_report_is_one_html_page_with_charts_and_the_reset(clean_result):
    page = Path(clean_result["report"]).read_text()
    assert page.startswith("<!doctype html>") and "clean: no findings" in page
    assert "uPlot (v1.6.32)" in page and "<script src" not in page  # drawn offline, inlined
    assert "id='reset-timeline'" in page and page.count("class='chart lag-chart'") >= 2
    assert "INC-7 replay the outage" in page and "alice" in page and "60 -&gt; 15" in page


def test_lag_series_ends_at_the_lag_progress_shows(spark, clean_root):
    snap = snapshot(clean_root)
    prepare_views(spark, [snap], [snap.next_seq])
    series = lag_series(spark, [snap], "ol_audit_keyed", "ol_audit_events", "ol_audit_checkpoint")
    last = {}
    for row in series:
        last[row["consumer_group"]] = row["lag"]
    with Ledger.open(clean_root) as led:
        for group in ("g1", "g2"):
            assert last[group] == sum(p["lag"] for p in led.progress(group))
    assert last["g1"] == 150 - 25


WRITER = textwrap.dedent("""
    import sys
    from ledger import Ledger
    with Ledger.open(sys.argv[1]) as led:
        print(led.log.next_seq, flush=True)
        sys.stdin.readline()
        led.queue_append("orders", 0, 3)
        print(led.log.next_seq, flush=True)
""")


def test_an_audit_runs_beside_a_writer_that_appends(spark, clean_root, tmp_path):
    """A writer process holds the ledger for the whole audit and appends during its Spark
    phase: the audit checks its snapshot (the view rebuilt from the log, since the writer holds
    the DuckDB file) and is clean; the next audit checks the file, append included."""
    root = tmp_path / "data"
    shutil.copytree(clean_root, root)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    appended: list[int] = []

    def step(message: str) -> None:
        if message == "full replay vs the view":
            proc.stdin.write("\n")
            proc.stdin.flush()
            appended.append(int(proc.stdout.readline()))

    try:
        before = int(proc.stdout.readline())
        result = audit(root, progress=step)
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    assert appended == [before + 1]
    assert result["clean"], result["findings"]
    assert (result["checked"]["view_source"], result["checked"]["seq_to"]) == ("snapshot", before)
    after = audit(root)
    assert after["clean"], after["findings"]
    assert (after["checked"]["view_source"], after["checked"]["seq_to"]) == ("file", before + 1)
