"""The audit as one self-contained HTML page: summary, findings, resets, and charts rendered by
matplotlib into embedded PNGs (base64), so an auditor reads it in any browser, offline, without
the CLI."""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ledger.timeparse import iso

#: Groups drawn as their own lag chart (the highest peak lag first); the rest are tabulated.
LAG_CHARTS_MAX = 40

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left}
th{background:#f2f2f2}
.ok{color:#176b27;font-weight:bold}.bad{color:#b00020;font-weight:bold}
.charts{display:flex;flex-wrap:wrap;gap:8px}
.charts figure{margin:0}.charts figcaption{font-size:12px}
"""


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _time_axis(ax: Any, mdates: Any) -> None:
    locator = mdates.AutoDateLocator(minticks=3, maxticks=6)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.tick_params(axis="x", labelsize=7)


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(data: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


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


def _lag_charts(series: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in series:
        by_group[r["consumer_group"]].append(r)
    ranked = sorted(by_group, key=lambda g: (-max(x["lag"] for x in by_group[g]), g))
    figures = []
    for group in ranked[:LAG_CHARTS_MAX]:
        rows = sorted(by_group[group], key=lambda x: x["bucket"])
        fig, ax = plt.subplots(figsize=(5.2, 1.9))
        times = [_when(r["ts"]) for r in rows]
        ax.plot(times, [r["lag"] for r in rows], drawstyle="steps-post", color="#1f5fa8")
        ax.set_title(group, fontsize=9)
        ax.set_ylabel("lag (messages)", fontsize=8)
        ax.tick_params(labelsize=7)
        _time_axis(ax, mdates)
        ax.set_ylim(bottom=0)
        figures.append(f"<figure>{_img(_png(fig), f'lag of {group}')}"
                       f"<figcaption>{html.escape(group)}</figcaption></figure>")
        plt.close(fig)
    rest = [{"consumer_group": g, "peak_lag": max(x["lag"] for x in by_group[g]),
             "last_lag": sorted(by_group[g], key=lambda x: x["bucket"])[-1]["lag"]}
            for g in ranked[LAG_CHARTS_MAX:]]
    return figures, rest


def _reset_timeline(resets: list[dict[str, Any]]) -> str | None:
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    applied = [r for r in resets if r["client_id"] is None]
    if not applied:
        return None
    groups = sorted({r["consumer_group"] for r in applied})
    row = {g: i for i, g in enumerate(groups)}
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.35 * len(groups)))
    for r in applied:
        x = _when(r["ts"])
        color = ("#888888" if r["status"] == "refused" else
                 "#c0392b" if r["replays"] else "#2471a3" if r["skips"] else "#555555")
        ax.scatter([x], [row[r["consumer_group"]]], s=20 + min(200, (r["replays"] + r["skips"])
                                                            ** 0.5 * 4), color=color, alpha=0.7)
    ax.set_yticks(range(len(groups)), groups, fontsize=7)
    _time_axis(ax, mdates)
    ax.set_title("resets: red replays messages (moved back), blue skips them (moved forward), "
                 "grey refused; size grows with the count", fontsize=9)
    data = _png(fig)
    plt.close(fig)
    return _img(data, "reset timeline")


def write_report(path: Path, result: dict[str, Any], series: list[dict[str, Any]]) -> None:
    """Render the audit `result` and the lag `series` to `path` (HTML)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError as exc:  # an optional dependency (the `bench` extra)
        raise RuntimeError(
            "the HTML report needs matplotlib: pip install matplotlib (or the project's "
            "[bench] extra)") from exc
    checked = result["checked"]
    status = ('<p class="ok">clean: no findings</p>' if result["clean"] else
              f'<p class="bad">{len(result["findings"])} findings shown, '
              f'{sum(result["findings_by_kind"].values())} in all</p>')
    counts = [{"kind": k, "count": v} for k, v in result["findings_by_kind"].items()]
    findings = [{**f, "time": iso(f.get("ts")) if f.get("ts") is not None else None}
                for f in result["findings"]]
    resets = [{**r, "time": iso(r["ts"]),
               "queue": f"{r['topic']}:{r['queue_id']}",
               "move": f"{r['from_offset']} -> {r['to_offset']}"} for r in result["resets"]]
    lag_figures, lag_rest = _lag_charts(series)
    timeline = _reset_timeline(result["resets"])
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>offset-ledger audit {html.escape(result['root'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Audit of {html.escape(result['root'])}</h1>", status,
        _table([{
            "log seqs": f"{checked['seq_from']}..{checked['seq_to']}",
            "audited at": iso(checked["now_ms"]),
            "since": iso(checked["since_ts"]) if checked["since_ts"] is not None else "start",
            "keys in view": checked["view_keys"], "keys in replay": checked["replay_keys"],
        }], ["log seqs", "audited at", "since", "keys in view", "keys in replay"]),
        "<h2>Findings by kind</h2>", _table(counts, ["kind", "count"]),
        "<h2>Findings</h2>",
        _table(findings, ["kind", "time", "seq", "event_kind", "consumer_group", "topic",
                          "queue_id", "message"]),
        "<h2>Resets</h2>",
        timeline or "<p>no resets</p>",
        _table(resets, ["time", "seq", "consumer_group", "queue", "client_id", "actor", "status",
                        "mode", "value", "reason", "move", "replays", "skips"]),
        "<h2>Lag over time</h2>",
        "<p>MaxOffset minus committed offset, summed over each group's queues (broadcast groups: "
        "the lowest client offset), at the end of each time bucket.</p>",
        f"<div class='charts'>{''.join(lag_figures)}</div>" if lag_figures else "<p>no data</p>",
    ]
    if lag_rest:
        parts += ["<h3>Other groups</h3>", _table(lag_rest, ["consumer_group", "peak_lag",
                                                              "last_lag"])]
    parts.append("</body></html>")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(parts), encoding="utf-8")
    tmp.replace(path)
