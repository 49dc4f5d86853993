"""Commands as data: validation shared by the API and `apply`, and the NDJSON op dispatcher.

`apply` lines carry the CLI option names (`group`, `queue_id`, `offset`, `client`, ...); an
optional `ts` (epoch ms or ISO) is the ledger clock for that line (replays and simulations).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ledger.errors import InvalidInput, LedgerError
from ledger.events import EventBuffer
from ledger.limits import _VALID_NAMES as _KNOWN_NAMES
from ledger.limits import (
    APPEND_COUNT_MAX,
    GENERATION_MAX,
    OFFSET_MAX,
    PULL_MAX,
    QUEUE_ID_MAX,
    REASON_LENGTH_MAX,
    TS_MAX,
    check_int,
    check_name,
    check_offset,
    check_queue_id,
)
from ledger.reset import SCENARIOS, Scenario, Scope
from ledger.timeparse import parse_duration, parse_time

if TYPE_CHECKING:
    from ledger.ledger import Ledger

OPS = ("queue_append", "queue_truncate", "pull", "commit", "reset", "group_set", "group_delete")
MODES = ("clustering", "broadcast")


def check_group_settings(mode: str | None, initial: str | None, timeout_ms: int | None) -> None:
    if mode is not None and mode not in MODES:
        raise InvalidInput(f"invalid mode {mode!r}: use clustering or broadcast")
    if initial is not None and initial not in ("latest", "earliest") and not (
        isinstance(initial, str) and re.fullmatch(r"timestamp:\d+", initial)
    ):
        raise InvalidInput(
                f"invalid initial policy {initial!r}: use latest, earliest or timestamp:TIME")
    if timeout_ms is not None:
        check_int(timeout_ms, "client timeout", 1, 10**12)


def check_pull(group: str, topic: str, queue_id: int, client: str | None, max_count: int) -> None:
    check_name(group, "group")
    check_name(topic, "topic")
    check_queue_id(queue_id)
    if client is not None:
        check_name(client, "client")
    check_int(max_count, "max", 1, PULL_MAX)


def check_commit(group: str, topic: str, queue_id: int, offset: int, client: str | None,
                 generation: int | None) -> None:
    check_name(group, "group")
    check_name(topic, "topic")
    check_queue_id(queue_id)
    check_offset(offset)
    if client is not None:
        check_name(client, "client")
    if generation is not None:
        check_int(generation, "generation", 0, GENERATION_MAX)


_READ_ONLY = re.compile(
    r"^\s*(\(\s*)*(select|with|from|values|describe|show|summarize|explain|pivot|unpivot|table)\b",
    re.IGNORECASE)
_WRITES = re.compile(
    r"\b(insert|update|delete|create|drop|alter|attach|detach|copy|export|import|install|load|"
    r"pragma|set|reset|call|checkpoint|vacuum|truncate|merge|use)\b", re.IGNORECASE)


def check_read_only_sql(query: str) -> None:
    """Only one read statement: the view is derived data, and `sql` must never change it."""
    stripped = re.sub(r"'(?:[^']|'')*'", "''", query)  # ignore string literals
    stripped = re.sub(r"--[^\n]*", "", stripped)
    statements = [s for s in stripped.split(";") if s.strip()]
    if len(statements) != 1 or _READ_ONLY.match(statements[0]) is None:
        raise InvalidInput(f"sql must be one read-only query (SELECT/WITH ...): {query[:80]!r}")
    if _WRITES.search(statements[0]) and not statements[0].lstrip().lower().startswith(
            ("select", "with", "from", "(")):
        raise InvalidInput(f"sql must be one read-only query (SELECT/WITH ...): {query[:80]!r}")
    if re.search(r"\b(copy|attach|install|load|pragma)\b", statements[0], re.IGNORECASE):
        raise InvalidInput(f"sql must be one read-only query (SELECT/WITH ...): {query[:80]!r}")


def _get(cmd: dict[str, Any], name: str, default: Any = None) -> Any:
    return cmd.get(name, default)


def scenario_from(cmd: dict[str, Any], now_ms: int) -> Scenario:
    """Exactly one scenario field (the CLI's option names with `_`)."""
    given = [s for s in SCENARIOS if cmd.get(s) not in (None, False)]
    if len(given) != 1:
        raise InvalidInput(
            f"reset needs exactly one scenario of {', '.join(SCENARIOS)}; got {given or 'none'}")
    mode = given[0]
    raw = cmd[mode]
    if mode in ("to_earliest", "to_latest", "to_current"):
        return Scenario(mode)
    if mode == "to_offset":
        return Scenario(mode, check_offset(raw, "to_offset"))
    if mode == "shift_by":
        return Scenario(mode, check_int(raw, "shift_by", -(2**62), 2**62))
    if mode in ("to_datetime", "to_state_at"):
        return Scenario(mode, parse_time(raw, now_ms))
    if mode == "by_duration":
        return Scenario(mode, parse_duration(raw))
    raise InvalidInput(f"reset scenario {mode} is not available in apply")


def run_command(ledger: Ledger, cmd: Any, line_no: int, events: EventBuffer,
                now: int | None = None) -> dict[str, Any]:
    """Run one apply line, folding its events into `events`; errors become the line's result.
    `now` is the line's ledger time when the caller has already computed it (the column path)."""
    if not isinstance(cmd, dict):
        msg = str(cmd) if isinstance(cmd, LedgerError) else f"line is not a JSON object: {cmd!r:.80}"
        return {"line": line_no, "error": msg}
    op = cmd.get("op")
    try:
        if op not in OPS:
            raise InvalidInput(f"unknown op {op!r}: use one of {', '.join(OPS)}")
        if now is None:
            clock = ledger.now_ms()
            now = max(parse_time(cmd["ts"], clock), ledger.state.last_ts) if "ts" in cmd else clock
        elif "ts" in cmd:
            parse_time(cmd["ts"], now)  # validated all the same
        out = _dispatch(ledger, op, cmd, now, events)
    except LedgerError as e:
        return {"line": line_no, "op": op, "error": str(e)}
    return {"line": line_no, "op": op, **out}


def fast_command(ledger: Ledger, cmd: dict[str, Any], line_no: int,
                 events: EventBuffer, now: int | None = None) -> dict[str, Any] | None:
    """The hot path: a well-formed commit or pull with names already validated in this process
    on a key in the common case (see State.fast_commit). None means "take the general path",
    which validates and decides everything; the two write the same events
    (tests/ledger/test_fast_path.py)."""
    op = cmd.get("op")
    if op != "commit" and op != "pull":
        return None
    group, topic, qid, client = cmd.get("group"), cmd.get("topic"), cmd.get("queue_id"), cmd.get("client")
    names = _KNOWN_NAMES
    try:
        if not (group in names and topic in names and (client is None or client in names)):
            return None
    except TypeError:  # unhashable JSON values (lists, objects): the general path reports them
        return None
    if type(qid) is not int or not 0 <= qid <= QUEUE_ID_MAX:
        return None
    state = ledger.state
    ts = cmd.get("ts")
    if ts is not None and not (type(ts) is int and 0 <= ts <= TS_MAX):
        return None
    if now is None:
        now = ledger.now_ms() if ts is None else (ts if ts > state.last_ts else state.last_ts)
    retention = ledger.settings.offsets_retention_ms
    if op == "commit":
        offset = cmd.get("offset")
        if (type(offset) is not int or not 0 <= offset <= OFFSET_MAX
                or cmd.get("generation") is not None):
            return None
        if state.fast_commit(group, topic, qid, offset, client, now, retention, events) is None:
            return None
        return {"line": line_no, "op": op, "accepted": True, "reason": None, "offset": offset}
    max_count = cmd.get("max", 32)
    if client is None or type(max_count) is not int or not 1 <= max_count <= PULL_MAX:
        return None
    r = state.fast_pull(group, topic, qid, client, max_count, now, retention, events)
    if r is None:
        return None
    return {"line": line_no, "op": op, "next_offset": r[0], "generation": r[1], "count": r[2]}


def run_line(ledger: Ledger, cmd: Any, line_no: int, events: EventBuffer,
              now: int | None = None) -> dict[str, Any]:
    """One line by the hot path when it applies, else by the general one (same effects)."""
    result = fast_command(ledger, cmd, line_no, events, now) if type(cmd) is dict else None
    return result if result is not None else run_command(ledger, cmd, line_no, events, now)


def _dispatch(ledger: Ledger, op: str, cmd: dict[str, Any], now: int,
              events: EventBuffer) -> dict[str, Any]:
    state = ledger.state
    retention = ledger.settings.offsets_retention_ms
    if op == "queue_append":
        topic = check_name(_get(cmd, "topic"), "topic")
        qid = check_queue_id(_get(cmd, "queue_id"))
        count = check_int(_get(cmd, "count", 1), "count", 1, APPEND_COUNT_MAX)
        store = cmd.get("store_time")
        store_ts = parse_time(store, now) if store is not None else now
        lo, hi = state.decide_queue_append(topic, qid, count, store_ts, now, events)
        return {"topic": topic, "queue_id": qid, "min_offset": lo, "max_offset": hi}
    if op == "queue_truncate":
        topic = check_name(_get(cmd, "topic"), "topic")
        qid = check_queue_id(_get(cmd, "queue_id"))
        lo, hi = state.decide_queue_truncate(
            topic, qid, check_offset(_get(cmd, "min_offset"), "min_offset"), now, events)
        return {"topic": topic, "queue_id": qid, "min_offset": lo, "max_offset": hi}
    if op == "pull":
        group, topic, qid = cmd.get("group"), cmd.get("topic"), cmd.get("queue_id")
        client, max_count = cmd.get("client"), cmd.get("max", 32)
        check_pull(group, topic, qid, client, max_count)
        r = state.decide_pull(group, topic, qid, client, max_count, now, retention, events)
        return {"next_offset": r.next_offset, "generation": r.generation, "count": r.count}
    if op == "commit":
        group, topic, qid = cmd.get("group"), cmd.get("topic"), cmd.get("queue_id")
        offset, client, gen = cmd.get("offset"), cmd.get("client"), cmd.get("generation")
        check_commit(group, topic, qid, offset, client, gen)
        c = state.decide_commit(group, topic, qid, offset, client, gen, now, retention, events)
        out: dict[str, Any] = {"accepted": c.accepted, "reason": c.reason, "offset": c.offset}
        if not c.accepted:
            out["error"] = f"commit refused: {c.reason}"
        return out
    if op == "group_set":
        group = check_name(cmd.get("group"), "group")
        timeout = cmd.get("client_timeout")
        timeout_ms = parse_duration(timeout) if isinstance(timeout, str) else timeout
        check_group_settings(cmd.get("mode"), cmd.get("initial"), timeout_ms)
        initial = cmd.get("initial")
        if isinstance(initial, str) and initial.startswith("timestamp:"):
            initial = f"timestamp:{parse_time(initial.split(':', 1)[1], now)}"
        g = state.decide_group_set(group, now, events, mode=cmd.get("mode"), initial=initial,
                                   client_timeout_ms=timeout_ms, actor=cmd.get("actor"))
        return {"consumer_group": group, "mode": g.mode, "initial": g.initial,
                "client_timeout_ms": g.client_timeout_ms}
    if op == "group_delete":
        group = check_name(cmd.get("group"), "group")
        n = state.decide_delete_group(group, cmd.get("actor"), now, events)
        return {"consumer_group": group, "queues_deleted": n}
    # reset: planned against the current state, executed into this batch when asked
    group = check_name(cmd.get("group"), "group")
    scenario = scenario_from(cmd, now)
    if cmd.get("all_topics"):
        scope = Scope(all_topics=True)
    else:
        topic = check_name(cmd.get("topic"), "topic")
        qid = cmd.get("queue_id")
        scope = Scope(topics=((topic, None if qid is None else (check_queue_id(qid),)),))
    actor = cmd.get("actor")
    reason = cmd.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > REASON_LENGTH_MAX):
        raise InvalidInput(f"invalid reason {reason!r:.80}")
    plan = ledger.reset(group, scenario, scope=scope, backward_only=bool(cmd.get("backward_only")),
                        actor=actor, reason=reason, now_ms=now)
    execute = cmd.get("execute", False)
    if not isinstance(execute, bool):
        raise InvalidInput(f"invalid execute {execute!r}: expected true or false")
    force = cmd.get("force", False)
    if not isinstance(force, bool):
        raise InvalidInput(f"invalid force {force!r}: expected true or false")
    if execute:
        from ledger.reset import reset_detail

        detail = reset_detail(scenario, reason, bool(cmd.get("backward_only")))
        ledger._enforce_policy(plan, detail, force, now)  # the batch before it is durable
        state.decide_reset(plan.items, actor, detail, now, events)
    return {"executed": execute, "plan": plan.rows(), "messages_replayed": plan.messages_replayed,
            "messages_skipped": plan.messages_skipped}
