"""A plain evaluation of lag health at a time from a ledger's log (DESIGN.md, "Lag health and
time lag"): it reads the events and folds them in plain dicts, sharing no code with ledger/lag/
or the fold. The oracle of tests/ledger/test_lag_property.py and of the read-index property
(tests/ledger/test_read_index_property.py)."""

from __future__ import annotations

import json
from typing import Any


def reference(events: list[dict[str, Any]], at: int, window: int, allowed: int,
              only: str | None) -> list[dict[str, Any]]:
    """`lag --json` at ledger time `at` (window `window`, allowed lag `allowed`, only group
    `only` when given) from the log's events in seq order."""
    config: dict[str, tuple[str, int]] = {}  # group -> (mode, client timeout)
    own: dict[tuple, int | None] = {}  # the group's own committed offset per key
    clients: dict[tuple, dict[str, list]] = {}  # key -> client -> [committed, last active]
    appends: dict[tuple, list[tuple[int, int, int, int]]] = {}  # (first, end, ts, store ts)
    entries: dict[tuple, list[tuple[int, int]]] = {}

    def broadcast(g: str) -> bool:
        return config.get(g, ("clustering", 0))[0] == "broadcast"

    def offset(k: tuple, now: int) -> int | None:
        if not broadcast(k[0]):
            return own.get(k)
        timeout = config[k[0]][1]
        live = [c[0] for c in clients.get(k, {}).values()
                if c[0] is not None and now - c[1] <= timeout]
        return min(live) if live else own.get(k)

    def holds(k: tuple) -> bool:
        return own.get(k) is not None or (broadcast(k[0]) and any(
            c[0] is not None for c in clients.get(k, {}).values()))

    for e in events:
        if e["ts"] > at:
            break
        kind, g, t, ts = e["kind"], e["consumer_group"], e["topic"], e["ts"]
        if kind == "queue_append":
            store = e["store_ts"] if e["store_ts"] is not None else ts
            appends.setdefault((t, e["queue_id"]), []).append((e["prev_offset"], e["offset"], ts,
                                                               store))
            continue
        if kind in ("queue_truncate", "reset_refused"):
            continue
        if t is None:  # a group's settings set or removed
            if kind == "group_config":
                d = json.loads(e["detail"])
                config[g] = (d["mode"], d["client_timeout_ms"])
            else:
                config.pop(g, None)
            for k in entries:
                if k[0] == g and not holds(k):
                    entries[k] = []
            continue
        k = (g, t, e["queue_id"])
        if kind == "delete":
            clients.pop(k, None)
        per_client = e["client_id"] is not None and broadcast(g)
        slot = clients.setdefault(k, {}).setdefault(e["client_id"], [None, -1]) if per_client \
            else None
        value = e["offset"]
        if kind == "clamp":
            moves = json.loads(e["detail"])["fields"]
            sets = "committed" in moves
            value = moves["committed"][1] if sets else None
        else:
            sets = kind in ("commit", "initial", "reset", "sync", "expire", "delete")
        if sets:
            if slot is None:
                own[k] = value
            else:
                slot[0] = value
        if slot is not None and kind in ("commit", "pull", "initial"):
            slot[1] = ts
        if kind in ("reset", "delete") or not holds(k):
            entries[k] = []
        elif kind in ("commit", "sync"):
            now_offset = offset(k, ts)
            if now_offset is not None:
                entries.setdefault(k, []).append((ts, now_offset))

    def max_offset(q: tuple, when: int) -> int | None:
        ends = [end for _, end, ts, _ in appends.get(q, []) if ts <= when]
        return ends[-1] if ends else None

    def holder(q: tuple, off: int) -> tuple | None:
        for first, end, ts, store in appends.get(q, []):
            if ts <= at and first <= off < end:
                return ts, store
        return None

    docs: dict[str, list[dict]] = {only: []} if only is not None else {}
    keys = sorted({*own, *clients})
    for k in keys:
        committed = offset(k, at)
        if committed is None or (only is not None and k[0] != only):
            continue
        q = (k[1], k[2])
        top = max_offset(q, at)
        lag = None if top is None else max(0, top - committed)
        lag_ms = None if lag is None else 0 if lag == 0 else (
            at - h[1] if (h := holder(q, committed)) else None)
        win = []
        for ts, off in entries.get(k, [])[-window:]:
            m = max_offset(q, ts)
            win.append({"ts": ts, "offset": off, "lag": None if m is None else max(0, m - off)})
        moved = None
        if win and (h := holder(q, win[-1]["offset"])):
            moved = max(win[-1]["ts"], h[0])
        docs.setdefault(k[0], []).append({
            "topic": k[1], "queue_id": k[2], "status": judge(win, lag, at, allowed, moved),
            "committed_offset": committed, "max_offset": top, "lag": lag, "lag_ms": lag_ms,
            "complete": len(win) / window, "window": win})
    out = []
    for g, qs in sorted(docs.items()):
        ranked = {"OK": 0, "WARN": 1, "STOP": 2, "STALL": 2, "REWIND": 2}
        worst = max((ranked[x["status"]] for x in qs), default=None)
        known = [x for x in qs if x["lag"] is not None]
        top_lag = max(x["lag"] for x in known) if known else None
        out.append({
            "consumer_group": g,
            "status": "NOTFOUND" if worst is None else ("OK", "WARN", "ERR")[worst],
            "complete": sum(x["complete"] == 1.0 for x in qs) / len(qs) if qs else 0.0,
            "total_lag": sum(x["lag"] for x in known),
            "max_lag": next((x for x in known if x["lag"] == top_lag), None),
            "queues": qs})
    return out


def judge(win: list[dict], lag: int | None, at: int, allowed: int, moved: int | None) -> str:
    """DESIGN.md's rules, in order, written out again."""
    if lag is not None and lag <= allowed:
        return "OK"
    if not win:
        return "OK"
    if lag is not None and moved is not None and at - moved > win[-1]["ts"] - win[0]["ts"]:
        return "STOP"
    offs = [w["offset"] for w in win]
    for i in range(1, len(offs)):
        if offs[i] < offs[i - 1] and all(o < offs[i - 1] for o in offs[i + 1:]):
            return "REWIND"
    lags = [w["lag"] for w in win if w["lag"] is not None]
    if lags and min(lags) > allowed:
        if len(set(offs)) == 1:
            return "STALL"
        if lags == sorted(lags):
            return "WARN"
    return "OK"
