"""The audit report (`audit --report`) in Chromium: one file that draws its charts offline with
the console's chart code, a single reset on a time line minutes wide (not years), a group
whose events fall in one time bucket drawn as a point, and resets marked on the lag chart.

`write_report` is fed an audit result and a lag series as the Spark audit returns them, so
this runs without a JVM; tests/spark/test_audit.py writes one from a real audit."""

from __future__ import annotations

from pathlib import Path

from spark_compaction.report import write_report
from tests.console.conftest import LAG_BLUE, Shots, count_pixels

T0 = 1_795_000_000_000
MINUTE = 60_000
def audit_result() -> dict:
    reset = {"seq": 900, "ts": T0 + 50 * MINUTE, "consumer_group": "g1", "topic": "orders",
             "queue_id": 0, "client_id": None, "actor": "alice", "status": "applied",
             "mode": "to_offset", "value": 15, "reason": "INC-7 replay the outage",
             "backward_only": False, "from_offset": 60, "to_offset": 15, "generation": 1,
             "replays": 45, "skips": 0}
    return {"root": "/data/ledger", "clean": True, "findings": [], "findings_by_kind": {},
            "resets": [reset], "checked": {"seq_from": 0, "seq_to": 1000, "now_ms": T0 + 100 * MINUTE,
                                           "since_ts": None, "view_keys": 2, "replay_keys": 2}}


def lag_series() -> list[dict]:
    rows = [{"consumer_group": "g1", "bucket": i, "ts": T0 + (i + 1) * 100 * MINUTE // 60 - 1,
             "lag": 10 * i if i < 30 else 45 + i, "queues": 1} for i in range(60)]
    # g2 committed once: all its events fall in the last bucket
    rows.append({"consumer_group": "g2", "bucket": 59, "ts": T0 + 100 * MINUTE - 1, "lag": 70,
                 "queues": 1})
    return rows


def test_the_report_draws_offline_with_resets_marked(tmp_path: Path, page: object,
                                                     shots: Shots) -> None:
    report = tmp_path / "audit.html"
    write_report(report, audit_result(), lag_series())
    text = report.read_text()
    assert "uPlot (v1.6.32)" in text and "<script src" not in text and "<link" not in text
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))  # type: ignore[attr-defined]
    page.goto(report.as_uri())  # type: ignore[attr-defined]
    page.wait_for_selector("body[data-ready='1']")  # type: ignore[attr-defined]
    assert requests == [report.as_uri()]  # nothing fetched: the file is the whole report

    lo, hi = (float(v) for v in page.get_attribute(  # type: ignore[attr-defined]
        "#reset-timeline", "data-range").split(","))
    assert lo >= T0 and hi <= T0 + 100 * MINUTE  # the audit's span, not four years
    assert page.get_attribute("#reset-timeline", "data-points") == "1"  # type: ignore[attr-defined]

    charts = {page.locator(f"#lag-{i} + figcaption").inner_text(): f"lag-{i}"  # type: ignore[attr-defined]
              for i in range(2)}
    one_bucket = charts["g2"]
    assert page.get_attribute(f"#{one_bucket}", "data-points") == "1"  # type: ignore[attr-defined]
    assert count_pixels(page, f'#{one_bucket} canvas', LAG_BLUE) > 15
    assert page.get_attribute(f"#{one_bucket}", "data-range") == page.get_attribute(  # type: ignore[attr-defined]
        f"#{charts['g1']}", "data-range")  # every chart on the audit's time axis

    marker = page.locator(f"#{charts['g1']} .reset-marker")  # type: ignore[attr-defined]
    assert marker.count() == 1
    marker.hover()
    tip = page.inner_text(f"#{charts['g1']} .reset-tip")  # type: ignore[attr-defined]
    assert "reset by alice" in tip and "INC-7 replay the outage" in tip and "orders:0 60 -> 15" in tip
    assert page.locator(f"#{one_bucket} .reset-marker").count() == 0  # type: ignore[attr-defined]
    shots.take(page, "audit-report", full_page=True)


HOSTILE_REASON = "INC-9 <!--<script> </script> <!-- & \u2028 \u2029 end"


def _hostile_result() -> dict:
    result = audit_result()
    result["resets"][0]["reason"] = HOSTILE_REASON
    return result


def test_a_reset_reason_cannot_break_the_reports_script(tmp_path: Path, page: object) -> None:
    """A reason holding `<!--<script>` put the HTML parser in its script data escape states, so
    the data's `</script>` no longer closed the element and the charts never drew: the data is
    now written without any `<`, and the reason reaches the chart exactly as typed."""
    report = tmp_path / "audit.html"
    write_report(report, _hostile_result(), lag_series())
    page.goto(report.as_uri())  # type: ignore[attr-defined]
    page.wait_for_selector("body[data-ready='1']")  # type: ignore[attr-defined]
    chart = page.locator(".lag-chart").first  # type: ignore[attr-defined]
    chart.locator(".reset-marker").hover()
    tip = chart.locator(".reset-tip").inner_text()
    assert "INC-9 <!--<script> </script> <!-- & " in tip and tip.count("end") == 1
    assert page.evaluate(  # type: ignore[attr-defined]
        "JSON.parse(document.getElementById('report-data').textContent)"
        ".lag[0].resets[0].reason") == HOSTILE_REASON


def test_the_reports_data_element_holds_exactly_the_data(tmp_path: Path) -> None:
    """Parsed as an HTML parser does: the data element's text ends at the first `</script`,
    and holds no `<` that could start an escape; JSON.parse of it gives the data back."""
    import json
    import re

    report = tmp_path / "audit.html"
    write_report(report, _hostile_result(), lag_series())
    text = report.read_text()
    start = text.index("<script type='application/json' id='report-data'>")
    body = text[start:].split(">", 1)[1]
    data = body[:re.search(r"</script", body, re.IGNORECASE).start()]
    assert "<" not in data
    parsed = json.loads(data)
    assert parsed["lag"][0]["resets"][0]["reason"] == HOSTILE_REASON
