"""Shards' answers merged as one ledger answers: pure functions over documents.

Groups live on one shard each, so a fan-out answer is the shards' answers together in the order
one ledger gives (by group, topic, queue). Queues live on every shard (their appends and
truncations are sent to all), so queue events are taken from one shard only, the primary (the
lowest-numbered one that answered). Events carry their shard (`shard`), since a seq is a
position in one shard's log: merged history is ordered by time, then shard, then seq.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Doc = dict[str, Any]


def by_group(parts: Iterable[Sequence[Doc]]) -> list[Doc]:
    """Documents with one object per group (`groups`, `lag`, the lag summary), by group."""
    return sorted((d for part in parts for d in part), key=lambda d: d["consumer_group"])


def by_key(parts: Iterable[Sequence[Doc]]) -> list[Doc]:
    """Documents with one object per (group, topic, queue) (`at`, a lag series), in that order."""
    return sorted((d for part in parts for d in part),
                  key=lambda d: (d["consumer_group"], d["topic"], d["queue_id"]))


def history(parts: Iterable[tuple[int, Sequence[Doc]]], limit: int | None) -> list[Doc]:
    """Events of every shard (each part its shard's, queue events only in the primary's),
    oldest first by (time, shard, seq); `limit` keeps the newest N, oldest first."""
    events = [{**e, "shard": index} for index, part in parts for e in part]
    events.sort(key=lambda e: (e["ts_ms"], e["shard"], e["seq"]))
    if limit is not None:
        events = events[len(events) - limit:] if limit else []
    return events


def queue_result(results: Sequence[tuple[int, Doc]]) -> Doc:
    """One answer to a queue command that every shard applied: the primary's (they agree
    unless a shard missed an earlier one), with the shards that hold it."""
    index, primary = min(results, key=lambda r: r[0])
    return {**primary, "shard": index, "shards": sorted(i for i, _ in results)}


def import_summaries(imported_records: int, skipped: dict[str, int], groups: Sequence[str],
                     notes: Sequence[str], group_runs: Sequence[tuple[int, Doc]],
                     queue_runs: Sequence[Doc]) -> Doc:
    """The summary of an import split into runs: runs of group commands (one summary per shard
    and run, summed) and runs of queue commands (every shard applied them: the primary's
    summary counts them once)."""
    summary: Doc = {"records": imported_records, "commands": 0, "changed": 0, "unchanged": 0,
                    "already_recorded": 0, "bounds_raised": 0, "errors": 0, "recorded_late": 0,
                    "skipped": dict(skipped), "groups": list(groups), "notes": list(notes)}
    first_error = None
    for index, s in [*group_runs, *((None, s) for s in queue_runs)]:
        for field in ("commands", "changed", "unchanged", "already_recorded", "bounds_raised",
                      "errors", "recorded_late"):
            summary[field] += s[field]
        summary["notes"] += [n if index is None else f"shard {index}: {n}" for n in s["notes"]]
        if first_error is None and s.get("first_error"):
            first_error = s["first_error"] if index is None else f"shard {index}: " \
                                                                  f"{s['first_error']}"
    if first_error is not None:
        summary["first_error"] = first_error
    return summary
