"""The server's own view of a run, beside the client's: deltas of its Prometheus histograms
(`/metrics`) over a span, as quantile bounds (the smallest bucket bound holding that share of
the observations: a histogram knows no finer)."""

from __future__ import annotations

import re
import urllib.request
from typing import Any

#: Histogram (and the label that tells its series apart) -> the series reported.
REPORTED = {
    "offset_ledger_request_seconds": ("route", "/v1/commit"),
    "offset_ledger_batch_seconds": (None, None),
    "offset_ledger_fsync_seconds": (None, None),
    "offset_ledger_gc_pause_seconds": ("generation", None),
}
_BUCKET = re.compile(r'^(\w+)_bucket\{(.*)\} (\S+)$')


def scrape(base_url: str) -> dict[tuple[str, str], dict[float, float]]:
    """(histogram, series label value) -> {bucket bound: cumulative count}."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[tuple[str, str], dict[float, float]] = {}
    for line in text.splitlines():
        m = _BUCKET.match(line)
        if m is None or m.group(1) not in REPORTED:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        label, wanted = REPORTED[m.group(1)]
        series = labels.get(label, "") if label else ""
        if wanted is not None and series != wanted:
            continue
        bound = float("inf") if labels["le"] == "+Inf" else float(labels["le"])
        out.setdefault((m.group(1), series), {})[bound] = float(m.group(3))
    return out


def _bound(buckets: dict[float, float], share: float) -> float | None:
    total = buckets.get(float("inf"), 0.0)
    if total <= 0:
        return None
    for bound in sorted(buckets):
        if buckets[bound] >= share * total:
            return bound
    return None


def _ms(bound: float | None) -> float | None:
    return None if bound is None else bound * 1000


def delta(before: dict[tuple[str, str], dict[float, float]],
          after: dict[tuple[str, str], dict[float, float]]) -> dict[str, Any]:
    """Per series: count, and the bucket bounds (ms) of p50, p99 and the maximum."""
    out: dict[str, Any] = {}
    for (name, series), buckets in sorted(after.items()):
        base = before.get((name, series), {})
        d = {b: n - base.get(b, 0.0) for b, n in buckets.items()}
        key = name.removeprefix("offset_ledger_") + (f"[{series}]" if series else "")
        out[key] = {"count": int(d.get(float("inf"), 0.0)), "p50_le_ms": _ms(_bound(d, 0.5)),
                    "p99_le_ms": _ms(_bound(d, 0.99)), "max_le_ms": _ms(_bound(d, 1.0))}
    return out
