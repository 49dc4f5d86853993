"""The audit as one self-contained HTML page: summary, findings, resets, and charts drawn in the
browser by the web console's chart code (server/console/charts.js over uPlot), inlined with the
data, so an auditor reads it in any browser, offline, without the CLI and without a server.

The charts share one time range, the audit's (never narrower than two minutes): a single reset
or a group with one time bucket is drawn inside it rather than on an axis of its own, and each
group's lag chart marks its resets (hover: who, why, from -> to).
"""

from __future__ import annotations

import html
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from ledger.timeparse import iso

#: Groups drawn as their own lag chart (the highest peak lag first); the rest are tabulated.
LAG_CHARTS_MAX = 40
#: The console's chart files: read as files (no import of the server), inlined in the page.
CHART_ASSETS = Path(__file__).resolve().parent.parent / "server" / "console"
CHART_SCRIPTS = ("vendor/uPlot.iife.min.js", "charts.js")
CHART_STYLES = ("vendor/uPlot.min.css", "charts.css")

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left}
th{background:#f2f2f2}
.ok{color:#176b27;font-weight:bold}.bad{color:#b00020;font-weight:bold}
.charts{display:flex;flex-wrap:wrap;gap:8px}
.charts figure{margin:0}.charts figcaption{font-size:12px}
"""

_DRAW = """
const report = JSON.parse(document.getElementById("report-data").textContent);
if (report.timeline) {
  OLCharts.timeline(document.getElementById("reset-timeline"),
                    {...report.timeline, xRange: report.range, width: 1000});
}
for (const g of report.lag) {
  OLCharts.lag(document.getElementById(g.id), {x: g.x, xRange: report.range, resets: g.resets,
    width: 520, height: 200,
    series: [{label: "lag", values: g.lag, scale: "msgs", color: OLCharts.COLORS.lag}]});
}
document.body.dataset.ready = "1";
"""


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('' if r.get(c) is None else str(r.get(c)))}</td>"
                         for c in columns) + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _asset(name: str) -> str:
    path = CHART_ASSETS / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuntimeError(f"the HTML report draws with {path}, which is missing: reinstall "
                           "offset-ledger (the console's files ship with the server package)"
                           ) from exc


def _inline_script(text: str) -> str:
    """Script text that cannot close its own <script> element early: `</script` appears in
    the console's JavaScript only inside strings, where `<\\/` means the same."""
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE)


# In JSON strings each of these may be written as its \u escape and means the same; written so,
# the data holds no `<` at all, so no value can close the element (`</script`) or make the
# parser take a later `</script>` for text (`<!--` then `<script`: HTML's script data escape
# states). `&` and `>` follow (harmless in script data, escaped as everyone does); non-ASCII,
# U+2028 and U+2029 included, is escaped by json.dumps itself.
_SCRIPT_JSON_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}


def script_json(data: Any) -> str:
    """`data` as JSON to inline in a <script> element: what JSON.parse of the element's text
    gives back exactly, whatever the strings hold (a reset reason is any text an operator
    typed)."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=True).translate(
        _SCRIPT_JSON_ESCAPES)


def reset_marks(resets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Resets of one operator action (a time, actor and reason) as one marker with every
    queue's move, as the lag chart shows them."""
    marks: dict[tuple, dict[str, Any]] = {}
    for r in sorted(resets, key=lambda r: (r["ts"], r["topic"], r["queue_id"])):
        key = (r["ts"], r["actor"], r["reason"], r["status"])
        mark = marks.setdefault(key, {"ts": r["ts"], "actor": r["actor"], "reason": r["reason"],
                                      "mode": r["mode"] if r["status"] != "refused"
                                      else f"{r['mode']}, refused", "moves": []})
        mark["moves"].append(f"{r['topic']}:{r['queue_id']} {r['from_offset']} -> "
                             f"{r['to_offset']}")
    return list(marks.values())


def _timeline(resets: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The applied resets (a client's own resets left out) per group, coloured by what they
    did to the messages."""
    applied = [r for r in resets if r["client_id"] is None]
    if not applied:
        return None
    return {"groups": sorted({r["consumer_group"] for r in applied}), "resets": [{
        "ts": r["ts"], "group": r["consumer_group"],
        "kind": ("other" if r["status"] == "refused" else "replay" if r["replays"]
                 else "skip" if r["skips"] else "other"),
        "title": f"{iso(r['ts'])} {r['consumer_group']} {r['topic']}:{r['queue_id']} "
                 f"{r['from_offset']} -> {r['to_offset']} by {r['actor']}"
                 + (f": {r['reason']}" if r["reason"] else "") + f" ({r['status']})"}
        for r in applied]}


def _lag_charts(series: list[dict[str, Any]], resets: list[dict[str, Any]]
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in series:
        by_group[r["consumer_group"]].append(r)
    resets_of: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in resets:
        resets_of[r["consumer_group"]].append(r)
    ranked = sorted(by_group, key=lambda g: (-max(x["lag"] for x in by_group[g]), g))
    charts = []
    for i, group in enumerate(ranked[:LAG_CHARTS_MAX]):
        rows = sorted(by_group[group], key=lambda x: x["bucket"])
        charts.append({"id": f"lag-{i}", "group": group, "x": [r["ts"] for r in rows],
                       "lag": [r["lag"] for r in rows], "resets": reset_marks(resets_of[group])})
    rest = [{"consumer_group": g, "peak_lag": max(x["lag"] for x in by_group[g]),
             "last_lag": sorted(by_group[g], key=lambda x: x["bucket"])[-1]["lag"]}
            for g in ranked[LAG_CHARTS_MAX:]]
    return charts, rest


def write_report(path: Path, result: dict[str, Any], series: list[dict[str, Any]]) -> None:
    """Render the audit `result` and the lag `series` to `path` (HTML)."""
    scripts = [_asset(name) for name in CHART_SCRIPTS]
    styles = [_asset(name) for name in CHART_STYLES]
    checked = result["checked"]
    shards = checked.get("shards") or [checked]
    status = ('<p class="ok">clean: no findings</p>' if result["clean"] else
              f'<p class="bad">{len(result["findings"])} findings shown, '
              f'{sum(result["findings_by_kind"].values())} in all</p>')
    counts = [{"kind": k, "count": v} for k, v in result["findings_by_kind"].items()]
    findings = [{**f, "time": iso(f.get("ts")) if f.get("ts") is not None else None}
                for f in result["findings"]]
    resets = [{**r, "time": iso(r["ts"]),
               "queue": f"{r['topic']}:{r['queue_id']}",
               "move": f"{r['from_offset']} -> {r['to_offset']}"} for r in result["resets"]]
    charts, lag_rest = _lag_charts(series, result["resets"])
    timeline = _timeline(result["resets"])
    times = [r["ts"] for r in series] + [r["ts"] for r in result["resets"]]
    data = {"range": [min(times), max(times)] if times else None, "timeline": timeline,
            "lag": charts}
    figures = "".join(f"<figure><div class='chart lag-chart' id='{c['id']}'></div>"
                      f"<figcaption>{html.escape(c['group'])}</figcaption></figure>"
                      for c in charts)
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>offset-ledger audit {html.escape(result['root'])}</title>",
        f"<style>{_CSS}{''.join(styles)}</style></head><body>",
        f"<h1>Audit of {html.escape(result['root'])}</h1>", status,
        _table([{
            "log seqs": "; ".join(
                f"{s['seq_from']}..{s['seq_to']}" if len(shards) == 1
                else f"shard {s['shard']}: {s['seq_from']}..{s['seq_to']}" for s in shards),
            "audited at": iso(checked["now_ms"]),
            "since": iso(checked["since_ts"]) if checked["since_ts"] is not None else "start",
            "keys in view": checked["view_keys"], "keys in replay": checked["replay_keys"],
        }], ["log seqs", "audited at", "since", "keys in view", "keys in replay"]),
        "<h2>Findings by kind</h2>", _table(counts, ["kind", "count"]),
        "<h2>Findings</h2>",
        _table(findings, ["kind", "time", "seq", "event_kind", "consumer_group", "topic",
                          "queue_id", "message"]),
        "<h2>Resets</h2>",
        ("<div class='chart' id='reset-timeline'></div>" if timeline else "<p>no resets</p>"),
        _table(resets, ["time", "seq", "consumer_group", "queue", "client_id", "actor", "status",
                        "mode", "value", "reason", "move", "replays", "skips"]),
        "<h2>Lag over time</h2>",
        "<p>MaxOffset minus committed offset, summed over each group's queues (broadcast groups: "
        "the lowest client offset), at the end of each time bucket; resets are marked R "
        "(hover: who, why, from -> to).</p>",
        f"<div class='charts'>{figures}</div>" if charts else "<p>no data</p>",
    ]
    if lag_rest:
        parts += ["<h3>Other groups</h3>", _table(lag_rest, ["consumer_group", "peak_lag",
                                                              "last_lag"])]
    parts += [f"<script type='application/json' id='report-data'>"
              f"{script_json(data)}</script>",
              *(f"<script>{_inline_script(s)}</script>" for s in scripts),
              f"<script>{_DRAW}</script>", "</body></html>"]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(parts), encoding="utf-8")
    tmp.replace(path)
