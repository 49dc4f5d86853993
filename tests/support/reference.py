"""A reference model of DESIGN.md's rules: the oracle of the property tests and the crash harness.

Why a second implementation: the ledger's paths (per command, column-wise, typed methods, the
view, state-at) were only ever compared with each other, which proves they agree, not that the
rules are right. This model is written from DESIGN.md ("Vocabulary", "Events", "Rules" 1-7) and
shares no code with `ledger/`: plain dicts and lists, one command at a time, slow and obvious on
purpose. It takes the same NDJSON command dicts as `Ledger.apply` and answers, per line, what the
ledger must answer (the result, the events), and at any point the state (committed and pulled
offsets, generations, pending markers, queue bounds, group settings).

Structure (event sourcing, as DESIGN.md has it): `apply` decides a line's events from the state;
`_fold` is the only code that changes the state, one event at a time. So the state at any log
position, or at any ledger time, is a fold of a prefix of the model's own events (`at_seq`,
`state_at`), and a line that writes no event cannot change anything.

Where DESIGN.md is silent and the implementation made a choice, the model follows the choice and
says so ("implementation's choice"); tests/ledger/test_rules.py shows most of them. Where the
implementation disagrees with DESIGN.md, the model follows DESIGN.md and says so ("DESIGN.md, not
the implementation"). Not modelled: `sync`, the `retention` command, reset policy files and
`from_file` (no apply line reaches them); inputs the model does not understand (ISO times, odd
durations) raise `NotModelled` instead of guessing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

Key = tuple[str, str, int]  # (consumer_group, topic, queue_id)
QueueKey = tuple[str, int]  # (topic, queue_id)
Row = tuple[str, str, int, int, int]  # (group, topic, queue_id, committed, generation)

#: The event columns the model decides (every column of DESIGN.md's Events but `detail`, whose
#: wording is the implementation's: clamp causes, reset modes as JSON, "policy latest", ...).
EVENT_COLUMNS: tuple[str, ...] = (
    "seq", "ts", "kind", "consumer_group", "topic", "queue_id", "offset", "prev_offset",
    "generation", "client_id", "actor", "store_ts")

#: The error of a line the model refuses as bad input (the ledger words it its own way).
INVALID = "invalid input"

DAY_MS = 24 * 3600 * 1000
OFFSETS_RETENTION_MS_DEFAULT = 7 * DAY_MS  # DESIGN.md rule 6: 7 days, as Kafka
CLIENT_TIMEOUT_MS_DEFAULT = 120_000  # DESIGN.md rule 5: 120 s, as RocketMQ
DEFAULT_SETTINGS = {"mode": "clustering", "initial": "latest",  # rule 1: latest by default
                    "client_timeout_ms": CLIENT_TIMEOUT_MS_DEFAULT}

# Names: DESIGN.md, Events: 1-249 characters of A-Z a-z 0-9 . _ - % |.
NAME = re.compile(r"[A-Za-z0-9._\-%|]{1,249}")
# The integer fields' ranges: limits of ledger/limits.py (TigerBeetle: "put a limit on
# everything"); DESIGN.md names only the int32 queue id. A value outside is bad input.
RANGES: dict[str, tuple[int, int]] = {
    "queue_id": (0, 2**31 - 1), "offset": (0, 2**63 - 1), "count": (1, 2**31 - 1),
    "max": (0, 1_000_000), "generation": (0, 2**31 - 1), "shift_by": (-(2**62), 2**62),
    "ts": (0, 253_402_300_799_999),  # up to 9999-12-31T23:59:59.999Z
    "client_timeout_ms": (1, 10**12)}
REASON_LENGTH_MAX = 4096
SCENARIOS = ("to_offset", "to_datetime", "to_earliest", "to_latest", "to_current", "shift_by",
             "by_duration", "to_state_at", "from_file")
DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?")


class NotModelled(Exception):
    """An input the model does not understand: the test generating it must not rely on it."""


class BadInput(Exception):
    """A line refused as bad input: it gets an error and appends nothing."""


# ------------------------------------------------------------------------------ values
def _int(value: object, field: str) -> int:
    """An integer in the field's range; JSON's true/false and floats are not integers."""
    lo, hi = RANGES[field]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BadInput(f"{value!r} is not an integer in [{lo}, {hi}]")
    return value


def _name(value: object) -> str:
    if not isinstance(value, str) or NAME.fullmatch(value) is None:
        raise BadInput(f"bad name {value!r}")
    return value


def _time(value: object) -> int:
    """Epoch ms. The ledger also reads ISO-8601 and `now`: not modelled."""
    if isinstance(value, str):
        raise NotModelled(f"time {value!r}: the model reads epoch ms only")
    return _int(value, "ts")


def duration_ms(value: object) -> int:
    """Milliseconds of an ISO-8601 duration of days, hours, minutes, whole seconds."""
    if not isinstance(value, str):
        raise BadInput(f"duration {value!r} is not a string")
    m = DURATION.fullmatch(value)
    if m is None or value in ("P", "PT") or value.endswith("T"):
        raise NotModelled(f"duration {value!r}")
    days, hours, minutes, seconds = (int(x) if x else 0 for x in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000


def _new_position() -> dict[str, Any]:
    """Positions of a key (a group on a queue, or one client of a broadcast group on it)."""
    return {
        "committed": None, "pulled": None, "generation": 0,
        "pending": False,  # an applied reset (or delete) not yet picked up by a pull
        "expired": False,  # removed by offset retention: restart from MinOffset
        "last_client": None, "last_pull_ts": -1,
        "last_active_ts": -1,  # last commit, pull or initial (broadcast liveness)
        "last_update_ts": -1,  # last event of the key (with last_active_ts: offset retention)
        "pull_generations": {},  # client -> generation of its last pull (rule 3)
    }


class ReferenceLedger:
    """The rules as a plain-dict fold. `apply(line, clock_ms)` -> the line's result."""

    def __init__(self, *, offsets_retention_ms: int = OFFSETS_RETENTION_MS_DEFAULT) -> None:
        self.offsets_retention_ms = offsets_retention_ms
        self.events: list[dict[str, Any]] = []
        self.last_ts = 0  # ts of the last event: ledger time never goes backwards
        self.queues: dict[QueueKey, dict[str, Any]] = {}
        self.groups: dict[str, dict[str, Any]] = {}  # groups with a config event
        self.positions: dict[Key, dict[str, Any]] = {}  # the group's own positions
        self.clients: dict[Key, dict[str, dict[str, Any]]] = {}  # broadcast clients' positions

    # ---------------------------------------------------------------------------- queries
    def settings(self, group: str) -> dict[str, Any]:
        return self.groups.get(group, DEFAULT_SETTINGS)

    def is_broadcast(self, group: str) -> bool:
        return self.settings(group)["mode"] == "broadcast"

    def committed(self, key: Key, now_ms: int) -> int | None:
        """The group's committed offset. Rule 5: for a broadcast group, the minimum over the
        clients seen within its client timeout, computed when asked; when none is, the group's
        own offset (implementation's choice: an operator's commit or a reset sets that one)."""
        base = self.positions[key]["committed"] if key in self.positions else None
        if not self.is_broadcast(key[0]):
            return base
        timeout = self.settings(key[0])["client_timeout_ms"]
        live = [c["committed"] for c in self.clients.get(key, {}).values()
                if c["committed"] is not None and now_ms - c["last_active_ts"] <= timeout]
        return min(live) if live else base

    def group_keys(self, group: str) -> list[Key]:
        """Queues where the group has an offset, its own or a broadcast client's (Kafka's
        --all-topics; also what a group delete removes). Implementation's choice: client
        offsets left from an earlier broadcast mode count too."""
        keys = {k for k, p in self.positions.items() if k[0] == group and p["committed"] is not None}
        keys |= {k for k, cs in self.clients.items()
                 if k[0] == group and any(c["committed"] is not None for c in cs.values())}
        return sorted(keys)

    def snapshot(self, now_ms: int, group: str | None = None) -> list[Row]:
        """(group, topic, queue_id, committed, generation) of every key with an offset, sorted,
        as `Ledger.snapshot` and `Ledger.state_at` answer. Implementation's choice: a broadcast
        key's generation is the group's own, else the highest of its clients'."""
        rows = []
        for key in set(self.positions) | set(self.clients):
            if group is not None and key[0] != group:
                continue
            committed = self.committed(key, now_ms)
            if committed is None:
                continue
            if key in self.positions:
                generation = self.positions[key]["generation"]
            elif self.is_broadcast(key[0]):
                generation = max(c["generation"] for c in self.clients[key].values())
            else:
                generation = 0
            rows.append((*key, committed, generation))
        return sorted(rows)

    def view_rows(self) -> dict[str, list[tuple]]:
        """The state as the view's tables hold it (`offsets`, `client_offsets`, `queues`,
        `groups`, sorted): positions with an offset or a pending marker."""
        def shown(p: dict[str, Any]) -> bool:
            return p["committed"] is not None or p["pulled"] is not None or p["pending"]

        return {
            "offsets": sorted(
                (*k, p["committed"], p["pulled"], p["generation"], p["pending"], p["last_client"],
                 p["last_active_ts"], p["last_update_ts"])
                for k, p in self.positions.items() if shown(p)),
            "client_offsets": sorted(
                (*k, c, p["committed"], p["pulled"], p["generation"], p["pending"],
                 p["last_active_ts"], p["last_update_ts"])
                for k, cs in self.clients.items() for c, p in cs.items() if shown(p)),
            "queues": sorted((*k, q["min_offset"], q["max_offset"], q["last_update_ts"])
                             for k, q in self.queues.items()),
            "groups": sorted((g, s["mode"], s["initial"], s["client_timeout_ms"])
                             for g, s in self.groups.items()),
        }

    # ------------------------------------------------------------------ the past, refolded
    @classmethod
    def from_log(cls, events: Iterable[dict[str, Any]], **kw: Any) -> ReferenceLedger:
        """The model's fold of a ledger's logged events (`Ledger.log.read().to_pylist()`): what
        the view must hold for that log, when no command stream is at hand (fault and fuzz
        tests). The two facts an event keeps in `detail` are read from it: a group's settings
        (group_config) and the positions a clamp moved."""
        model = cls(**kw)
        for logged in events:
            e = {c: logged[c] for c in EVENT_COLUMNS}
            if e["kind"] == "group_config":
                e["settings"] = json.loads(logged["detail"])
            elif e["kind"] == "clamp":
                fields = json.loads(logged["detail"])["fields"]
                e["moved"] = {name: to for name, (_, to) in fields.items()}
            model.events.append(e)
            model._fold(e)
        return model

    def at_seq(self, seq: int) -> ReferenceLedger:
        """The model after its first `seq` events: a fold of them, nothing else."""
        past = ReferenceLedger(offsets_retention_ms=self.offsets_retention_ms)
        for event in self.events[:seq]:
            past._fold(event)
        return past

    def state_at(self, ts: int, group: str | None = None) -> list[Row]:
        """Committed offsets as of ledger time `ts`: a fold of the events with ts <= it, the
        broadcast minimum taken at `ts` (DESIGN.md, Spark replay: "the latest event per key
        plus the broadcast minimum")."""
        past = ReferenceLedger(offsets_retention_ms=self.offsets_retention_ms)
        for event in self.events:
            if event["ts"] > ts:
                break  # ts never goes backwards along the log
            past._fold(event)
        return past.snapshot(ts, group)

    # ------------------------------------------------------------------------ the fold
    def _position_of(self, group: str, topic: str, queue_id: int,
                     client: str | None) -> dict[str, Any]:
        """The position an event changes: a broadcast client's own when the group is in
        broadcast mode and the event names a client (rule 5), else the group's."""
        key = (group, topic, queue_id)
        if client is not None and self.is_broadcast(group):
            return self.clients.setdefault(key, {}).setdefault(client, _new_position())
        return self.positions.setdefault(key, _new_position())

    def _fold(self, e: dict[str, Any]) -> None:
        """state + event -> state (DESIGN.md, Events: "which position each kind sets"). The
        only code that changes the model."""
        kind, ts, group = e["kind"], e["ts"], e["consumer_group"]
        self.last_ts = max(self.last_ts, ts)
        if kind == "reset_refused":  # recorded for auditors, ignored by the fold
            return
        if kind in ("queue_append", "queue_truncate"):
            q = self.queues.setdefault((e["topic"], e["queue_id"]), {
                "min_offset": 0, "max_offset": 0, "last_update_ts": ts, "appends": []})
            q["last_update_ts"] = ts
            if kind == "queue_append":  # sets MaxOffset; the N messages share store_ts
                q["appends"].append((e["prev_offset"], e["offset"] - e["prev_offset"],
                                     e["store_ts"]))
                q["max_offset"] = e["offset"]
            else:  # sets MinOffset
                q["min_offset"] = e["offset"]
            return
        if kind == "group_config":
            self.groups[group] = dict(e["settings"])
            return
        if kind == "delete" and e["topic"] is None:  # the group's config goes with it
            self.groups.pop(group, None)
            return
        key = (group, e["topic"], e["queue_id"])
        if kind == "delete":  # a group delete removes its broadcast clients' offsets too
            self.clients.pop(key, None)
        p = self._position_of(group, e["topic"], e["queue_id"], e["client_id"])
        p["last_update_ts"] = ts
        if kind == "commit":  # sets the committed offset
            p["committed"] = e["offset"]
            p["last_active_ts"] = ts
        elif kind == "pull":  # sets the pulled offset; picks up a pending reset
            p["pulled"] = e["offset"]
            p["pending"] = False
            p["last_client"] = e["client_id"]
            p["last_pull_ts"] = p["last_active_ts"] = ts
            if e["client_id"] is not None:
                p["pull_generations"][e["client_id"]] = e["generation"]
            if key in self.positions:
                # Rule 4: the next pull from any client clears the pending marker; a broadcast
                # client's pull clears the group's own marker too (rule 5 adds one per client),
                # else an operator's commit on a broadcast group would stay fenced forever.
                self.positions[key]["pending"] = False
        elif kind == "initial":  # sets both
            p["committed"] = p["pulled"] = e["offset"]
            p["expired"] = p["pending"] = False
            p["last_active_ts"] = ts
        elif kind == "reset":  # committed = target, generation + 1, pending marker (rule 4)
            p["committed"] = p["pulled"] = e["offset"]
            p["generation"] = e["generation"]
            p["pending"] = True
        elif kind == "clamp":  # moves every position of the key that is out of range
            p.update(e["moved"])
        elif kind == "sync":  # overwrites the committed offset (rule 7; no apply line syncs)
            p["committed"] = e["offset"]
        elif kind == "expire":  # offset retention removed it: restart from MinOffset (rule 6)
            p["committed"] = p["pulled"] = None
            p["expired"] = True
        elif kind == "delete":
            # Implementation's choice: a delete fences like a reset (generation + 1, pending)
            # so that racing clients are refused ("our fencing keeps racing clients safe").
            # The clients' last-pull generations are kept (rule 3: a commit takes the
            # generation of that client's last pull), so a client from before the delete
            # stays fenced after the marker clears.
            p["committed"] = p["pulled"] = None
            p["expired"] = False
            p["generation"] = e["generation"]
            p["pending"] = True
            p["last_client"] = None
        else:
            raise AssertionError(f"an event of unknown kind {kind!r}")

    def _emit(self, kind: str, now: int, **fields: Any) -> dict[str, Any]:
        """Append an event (seq dense from 0, ts the line's ledger time) and fold it."""
        event = {column: None for column in EVENT_COLUMNS}
        event.update(seq=len(self.events), ts=now, kind=kind, **fields)
        self.events.append(event)
        self._fold(event)
        return event

    # ------------------------------------------------------------------------- a line
    def apply(self, line: object, clock_ms: int = 0) -> dict[str, Any]:
        """One apply line: its result as `Ledger.apply` gives it, minus `line` (and with
        `INVALID` for the wording of bad-input errors). `clock_ms`: the ledger's clock, the
        time of a line without `ts`."""
        if not isinstance(line, dict):
            return {"error": INVALID}
        op = line.get("op")
        first = len(self.events)
        try:
            if op not in OPS:
                raise BadInput(f"unknown op {op!r}")
            # DESIGN.md, Events: ts = max(clock, last ts); an apply line's `ts` is the clock.
            # Implementation's choice: `"ts": null` is a line without ts (the clock), as a
            # null is an absent field in a command table's column (one rule on every path).
            ts = line.get("ts")
            now = max(_time(ts) if ts is not None else clock_ms, self.last_ts)
            result = OPS[op](self, line, now)
        except BadInput:
            if len(self.events) != first:
                raise AssertionError(f"the model appended events for a bad line: {line}") from None
            return {"op": op, "error": INVALID}
        if "error" in result and len(self.events) != first:
            raise AssertionError(f"the model appended events for a refused line: {line}")
        out = {"op": op, **result}
        if len(self.events) > first:
            out["seq"] = len(self.events) - 1  # a line's seq is its last event's
        return out

    # ------------------------------------------------------------------------- queues
    def _queue_append(self, line: dict[str, Any], now: int) -> dict[str, Any]:
        topic, queue_id = _name(line.get("topic")), _int(line.get("queue_id"), "queue_id")
        count = _int(line.get("count", 1), "count")
        store_ts = _time(line["store_time"]) if line.get("store_time") is not None else now
        q = self.queues.get((topic, queue_id))
        before = q["max_offset"] if q is not None else 0  # MaxOffset: the next offset written
        self._emit("queue_append", now, topic=topic, queue_id=queue_id, offset=before + count,
                   prev_offset=before, actor="system", store_ts=store_ts)
        q = self.queues[(topic, queue_id)]
        return {"topic": topic, "queue_id": queue_id, "min_offset": q["min_offset"],
                "max_offset": q["max_offset"]}

    def _queue_truncate(self, line: dict[str, Any], now: int) -> dict[str, Any]:
        """Rule 6: retention advances MinOffset; implementation's choice: a truncation to at
        or below the current MinOffset changes nothing, one above MaxOffset or of an unknown
        queue is bad input."""
        topic, queue_id = _name(line.get("topic")), _int(line.get("queue_id"), "queue_id")
        min_offset = _int(line.get("min_offset"), "offset")
        q = self.queues.get((topic, queue_id))
        if q is None or min_offset > q["max_offset"]:
            raise BadInput(f"truncate {topic}:{queue_id} to {min_offset}")
        if min_offset > q["min_offset"]:
            self._emit("queue_truncate", now, topic=topic, queue_id=queue_id, offset=min_offset,
                       prev_offset=q["min_offset"], actor="system")
        return {"topic": topic, "queue_id": queue_id, "min_offset": q["min_offset"],
                "max_offset": q["max_offset"]}

    def _first_offset_at_or_after(self, queue: QueueKey, t: int) -> int | None:
        """The first message stored at or after `t` (Kafka's ListOffsets): the first append
        whose store time is >= t, not below MinOffset; None when there is none."""
        q = self.queues[queue]
        for first, _count, store_ts in q["appends"]:
            if store_ts is not None and store_ts >= t:  # None: unknown (an importer's bound)
                return max(first, q["min_offset"])
        return None

    # ------------------------------------------------------------------------- groups
    def _group_set(self, line: dict[str, Any], now: int) -> dict[str, Any]:
        """Mode, initial policy, client timeout; a config event only when something changes
        (implementation's choice: or when the group has no config event yet)."""
        group = _name(line.get("group"))
        mode, initial, timeout = line.get("mode"), line.get("initial"), line.get("client_timeout")
        if mode is not None and mode not in ("clustering", "broadcast"):
            raise BadInput(f"mode {mode!r}")
        if initial is not None:
            if not isinstance(initial, str):
                raise BadInput(f"initial {initial!r}")
            at = re.fullmatch(r"timestamp:(\d+)", initial)
            if at is not None:
                initial = f"timestamp:{_time(int(at.group(1)))}"
            elif initial not in ("latest", "earliest"):
                raise BadInput(f"initial {initial!r}")
        if timeout is not None:
            ms = duration_ms(timeout) if isinstance(timeout, str) else timeout
            timeout = _int(ms, "client_timeout_ms")
        current = self.settings(group)
        new = {"mode": mode if mode is not None else current["mode"],
               "initial": initial if initial is not None else current["initial"],
               "client_timeout_ms": timeout if timeout is not None
               else current["client_timeout_ms"]}
        if group not in self.groups or new != current:
            self._emit("group_config", now, consumer_group=group, actor=line.get("actor"),
                       settings=new)
        return {"consumer_group": group, **self.settings(group)}

    def _group_delete(self, line: dict[str, Any], now: int) -> dict[str, Any]:
        """CLI contract: remove the group's offsets whether or not clients are active, a
        `delete` event per queue, then its config."""
        group = _name(line.get("group"))
        keys = self.group_keys(group)
        for key in keys:
            base = self.positions.get(key, _new_position())
            self._emit("delete", now, consumer_group=group, topic=key[1], queue_id=key[2],
                       prev_offset=base["committed"], generation=base["generation"] + 1,
                       actor=line.get("actor"))
        if group in self.groups:
            self._emit("delete", now, consumer_group=group, actor=line.get("actor"))
        return {"consumer_group": group, "queues_deleted": len(keys)}

    # ---------------------------------------------------------------------- pull, commit
    def _expiry_due(self, p: dict[str, Any], now: int) -> bool:
        """Rule 6: an offset with no activity for the offset retention is due to expire.
        Implementation's choice (main's fix of "offset retention never expires offsets created
        by sync or reset"): a reset or a sync counts as activity as a commit or pull does, so
        the clock runs from the key's last event (`last_update_ts`: every event of the key
        sets it), and an offset a reset or a sync alone created expires too."""
        return (p["committed"] is not None
                and now - max(p["last_active_ts"], p["last_update_ts"]) > self.offsets_retention_ms)

    def _expire_if_idle(self, key: Key, p: dict[str, Any], client: str | None, now: int) -> None:
        """Rule 6: idle offsets expire, checked lazily on pull and commit (`_expiry_due`)."""
        if self._expiry_due(p, now):
            self._emit("expire", now, consumer_group=key[0], topic=key[1], queue_id=key[2],
                       prev_offset=p["committed"], generation=p["generation"], client_id=client,
                       actor="system")

    def _initial_offset(self, key: Key, p: dict[str, Any], now: int) -> int:
        q = self.queues.get(key[1:])
        lo, hi = (q["min_offset"], q["max_offset"]) if q is not None else (0, 0)
        if p["expired"]:
            return lo  # rule 6: an expired group restarts from MinOffset whatever its policy
        if self.is_broadcast(key[0]):
            group_offset = self.committed(key, now)
            if group_offset is not None:
                # Rule 5: a client with no offset of its own starts from the group's offset,
                # and rule 3 clamps a pull below MinOffset up to it (above MaxOffset down).
                return min(max(group_offset, lo), hi) if q is not None else group_offset
        policy = self.settings(key[0])["initial"]  # rule 1
        if policy == "earliest":
            return lo
        if policy.startswith("timestamp:"):
            found = (self._first_offset_at_or_after(key[1:], int(policy.split(":")[1]))
                     if q is not None else None)
            return found if found is not None else hi  # implementation's choice: MaxOffset
        return hi  # latest: MaxOffset at that moment

    def _clamp(self, key: Key, p: dict[str, Any], client: str | None, now: int) -> None:
        """Rule 3 and 6: positions below MinOffset go up to it, above MaxOffset down to it, as
        one `clamp` event; nothing is clamped on a queue of unknown bounds."""
        q = self.queues.get(key[1:])
        if q is None:
            return
        def into(v: int | None) -> int | None:
            return None if v is None else min(max(v, q["min_offset"]), q["max_offset"])
        moved = {name: into(p[name]) for name in ("committed", "pulled")
                 if into(p[name]) != p[name]}
        if moved:
            self._emit("clamp", now, consumer_group=key[0], topic=key[1], queue_id=key[2],
                       offset=into(p["committed"]), prev_offset=p["committed"], moved=moved,
                       generation=p["generation"], client_id=client, actor="system")

    def _pull(self, line: dict[str, Any], now: int) -> dict[str, Any]:
        group, topic = _name(line.get("group")), _name(line.get("topic"))
        queue_id = _int(line.get("queue_id"), "queue_id")
        client = line.get("client")
        if client is not None:
            _name(client)
        max_count = _int(line.get("max", 32), "max")
        key = (group, topic, queue_id)
        broadcast = self.is_broadcast(group)
        if broadcast and client is None:
            raise BadInput("a broadcast pull needs a client (each client has its own offsets)")
        own = client if broadcast else None  # whose position: rule 5
        p = self._peek(key, own)
        self._expire_if_idle(key, p, own, now)
        p = self._peek(key, own)
        if p["committed"] is None:  # rule 1: the first pull gets the initial offset
            start = self._initial_offset(key, p, now)
            self._emit("initial", now, consumer_group=group, topic=topic, queue_id=queue_id,
                       offset=start, generation=p["generation"], client_id=client,
                       actor=None if client else "system")
            next_offset = start
        else:
            self._clamp(key, p, own, now)
            p = self._peek(key, own)
            timeout = self.settings(group)["client_timeout_ms"]
            if p["pending"] or p["pulled"] is None:
                next_offset = p["committed"]  # rule 4: a pending reset's target first
            elif client is not None and p["last_client"] == client and (
                    now - p["last_pull_ts"] <= timeout):
                # Rule 3: the same client within its timeout continues from its pulled offset
                # (implementation's choice: or from the committed one when that is ahead).
                next_offset = max(p["pulled"], p["committed"])
            else:
                next_offset = p["committed"]  # another client, or later: redelivery
        p = self._peek(key, own)
        q = self.queues.get(key[1:])
        count = 0 if q is None else max(0, min(max_count, q["max_offset"] - next_offset))
        self._emit("pull", now, consumer_group=group, topic=topic, queue_id=queue_id,
                   offset=next_offset + count, generation=p["generation"], client_id=client)
        return {"next_offset": next_offset, "generation": p["generation"], "count": count}

    def _peek(self, key: Key, client: str | None) -> dict[str, Any]:
        """A position as it is, or a blank one, without creating it (only events create)."""
        if client is not None:
            return self.clients.get(key, {}).get(client) or _new_position()
        return self.positions.get(key) or _new_position()

    def _commit(self, line: dict[str, Any], now: int) -> dict[str, Any]:
        group, topic = _name(line.get("group")), _name(line.get("topic"))
        queue_id = _int(line.get("queue_id"), "queue_id")
        offset = _int(line.get("offset"), "offset")
        client, generation = line.get("client"), line.get("generation")
        if client is not None:
            _name(client)
        if generation is not None:
            _int(generation, "generation")
        owner_only = line.get("owner_only", False)
        if not isinstance(owner_only, bool) or (owner_only and client is None):
            raise BadInput("owner_only is true or false, and needs a client")
        key = (group, topic, queue_id)
        own = client if self.is_broadcast(group) else None
        p = self._peek(key, own)

        def refused(reason: str) -> dict[str, Any]:
            # Rule 2: refusals append nothing and return a reason (and the offset as it is).
            return {"accepted": False, "reason": reason, "offset": p["committed"],
                    "error": f"commit refused: {reason}"}

        # A commit `owner_only` is fenced unless its client made the queue's last pull (the
        # Kafka consumer's ownership of its partition: a zombie cannot commit).
        if owner_only and p["last_client"] != client:
            return refused("fenced")

        # Rule 3: a commit naming no generation takes that of its client's last pull;
        # implementation's choice: a client that never pulled here counts as an operator.
        effective = generation
        if effective is None and client is not None:
            effective = p["pull_generations"].get(client)
        if p["pending"] and (effective is None or effective < p["generation"]):
            return refused("fenced")  # rule 4: nothing but the new generation while pending
        if effective is not None and effective < p["generation"]:
            return refused("fenced")  # rule 2: an older generation
        if effective is not None and effective > p["generation"]:
            return refused("invalid")  # implementation's choice: a generation not yet given
        q = self.queues.get(key[1:])
        if q is not None and offset > q["max_offset"]:
            return refused("invalid")  # rule 2: above MaxOffset, where it is known
        expired_now = self._expiry_due(p, now)
        if not expired_now and p["committed"] is not None and offset < p["committed"]:
            return refused("stale")  # rule 2: increase-only within a generation (a rewind
            # is a reset); an offset expiring now is gone, so nothing is stale against it
        self._expire_if_idle(key, p, own, now)
        self._emit("commit", now, consumer_group=group, topic=topic, queue_id=queue_id,
                   offset=offset, generation=p["generation"], client_id=client,
                   actor=None if client else "operator")
        return {"accepted": True, "reason": None, "offset": offset}

    # -------------------------------------------------------------------------- reset
    def _reset(self, line: dict[str, Any], now: int) -> dict[str, Any]:
        """Rule 4: plan a reset (a dry run unless `execute`), apply it when asked."""
        group = _name(line.get("group"))
        # Exactly one scenario; a zero is a value: `to_offset: 0` and `shift_by: 0` are
        # scenarios (rule 4: targets are offsets, 0 among them).
        given = [s for s in SCENARIOS if line.get(s) is not None and line.get(s) is not False]
        if len(given) != 1 or given[0] == "from_file":
            raise BadInput(f"reset scenarios {given}")
        mode, raw = given[0], line[given[0]]
        value = {"to_offset": lambda: _int(raw, "offset"),
                 "shift_by": lambda: _int(raw, "shift_by"),
                 "to_datetime": lambda: _time(raw), "to_state_at": lambda: _time(raw),
                 "by_duration": lambda: duration_ms(raw)}.get(mode, lambda: None)()
        if line.get("all_topics"):
            keys = self.group_keys(group)  # the queues where the group has offsets
        else:
            topic = _name(line.get("topic"))
            if line.get("queue_id") is not None:
                keys = [(group, topic, _int(line["queue_id"], "queue_id"))]
            else:  # every queue of the topic (and the group's own offsets on it)
                keys = sorted({(group, t, q) for (t, q) in self.queues if t == topic}
                              | {k for k in self.group_keys(group) if k[1] == topic})
                if not keys:  # issue 21: a topic with neither is unknown, an error naming it
                    raise BadInput(f"unknown topic {topic!r}")
        if line.get("actor") is not None:
            _name(line["actor"])
        reason = line.get("reason")
        if reason is not None and (not isinstance(reason, str) or len(reason) > REASON_LENGTH_MAX):
            raise BadInput("reason")
        execute = line.get("execute", False)
        if not isinstance(execute, bool) or not isinstance(line.get("force", False), bool):
            raise BadInput("execute and force are true or false")
        past = ({(g, t, q): c for g, t, q, c, _ in self.state_at(value, group)}
                if mode == "to_state_at" else {})
        plan = []
        for key in keys:
            target = self._target(key, mode, value, now, past)
            if target is None:
                continue  # to-state-at: no offset then, left out of the plan
            current = self.committed(key, now)
            if line.get("backward_only") and current is not None and target > current:
                target = current  # only moves offsets backwards; stays in the plan
            plan.append({"consumer_group": group, "topic": key[1], "queue_id": key[2],
                         "from_offset": current, "to_offset": target})
        if execute:
            for item in plan:
                key = (group, item["topic"], item["queue_id"])
                base = self.positions.get(key, _new_position())
                self._emit("reset", now, consumer_group=group, topic=key[1], queue_id=key[2],
                           offset=item["to_offset"], prev_offset=item["from_offset"],
                           generation=base["generation"] + 1, actor=line.get("actor"))
                if not self.is_broadcast(group):
                    # Only a broadcast group's clients are reset (rule 5): not the client
                    # offsets a clustering group kept from an earlier broadcast mode (as events
                    # on the group's own key they would set its generation back).
                    continue
                for client, c in sorted(self.clients.get(key, {}).items()):
                    # Rule 5: every known client's offset, a pending marker per client.
                    self._emit("reset", now, consumer_group=group, topic=key[1],
                               queue_id=key[2], offset=item["to_offset"],
                               prev_offset=c["committed"], generation=c["generation"] + 1,
                               client_id=client, actor=line.get("actor"))
        moved = [(i["from_offset"], i["to_offset"]) for i in plan if i["from_offset"] is not None]
        # Implementation's choice: an empty plan executes nothing, so it says executed: false.
        return {"executed": execute and bool(plan), "plan": plan,
                "messages_replayed": sum(max(0, a - b) for a, b in moved),
                "messages_skipped": sum(max(0, b - a) for a, b in moved)}

    def _target(self, key: Key, mode: str, value: int | None, now: int,
                past: dict[Key, int]) -> int | None:
        """A reset's target on one queue, clamped to [MinOffset, MaxOffset] where known."""
        q = self.queues.get(key[1:])
        current = self.committed(key, now)
        if q is None and current is None:
            # Implementation's choice (main's hardening): a queue with no messages recorded
            # where the group has no offset is unknown, for every scenario: refused naming it
            # (a typo in --topic T:Q would otherwise create offsets on a queue that no one has).
            raise BadInput(f"unknown queue {key[1]}:{key[2]}")
        if q is None and mode in ("to_earliest", "to_latest", "to_datetime", "by_duration"):
            raise BadInput(f"{key[1]}:{key[2]} has unknown bounds")  # rule 6, refused naming it
        if mode == "to_offset":
            target = value
        elif mode == "to_earliest":
            target = q["min_offset"]  # type: ignore[index]
        elif mode == "to_latest":
            target = q["max_offset"]  # type: ignore[index]
        elif mode == "to_current":
            # implementation's choice: no offset yet -> MaxOffset (unknown queues: refused above)
            target = current if current is not None else q["max_offset"]  # type: ignore[index]
        elif mode == "shift_by":
            if current is None:
                raise BadInput("shift-by without a committed offset")  # CLI contract: an error
            target = current + value  # type: ignore[operator]
        elif mode in ("to_datetime", "by_duration"):
            t = value if mode == "to_datetime" else now - value  # type: ignore[operator]
            found = self._first_offset_at_or_after(key[1:], t)  # type: ignore[arg-type]
            target = found if found is not None else q["max_offset"]  # type: ignore[index]
        else:  # to_state_at: the group's own committed offset at that ledger time
            if key not in past:
                return None
            target = past[key]
        if q is not None:
            target = min(max(target, q["min_offset"]), q["max_offset"])  # type: ignore[type-var]
        return max(target, 0)  # type: ignore[type-var]


OPS = {
    "queue_append": ReferenceLedger._queue_append,
    "queue_truncate": ReferenceLedger._queue_truncate,
    "pull": ReferenceLedger._pull,
    "commit": ReferenceLedger._commit,
    "reset": ReferenceLedger._reset,
    "group_set": ReferenceLedger._group_set,
    "group_delete": ReferenceLedger._group_delete,
}
