"""One command at a time: decide it against the state (folding its events as they are made)
and collect the events into the batch's buffer; the result says what happened.

The executor runs every command here that the column-wise fold does not take, in line order.
Commits and pulls in the common case take `State.fast_commit` / `fast_pull` (the same events as
the general rules, tests/ledger/test_fast_path.py). An error of one command never stops the
others: it becomes that command's result and appends nothing.
"""

from __future__ import annotations

import json
from typing import Any

from ledger.commands.command import (
    BlankLine,
    Command,
    Commit,
    GroupDelete,
    GroupSet,
    Pull,
    QueueAppend,
    QueueBounds,
    QueueTruncate,
    Reset,
    Sync,
    op_of,
    scenario_field,
)
from ledger.commands.results import (
    CommitResult,
    GroupDeleteResult,
    GroupResult,
    PullResult,
    QueueResult,
    ResetResult,
    Result,
    SyncResult,
)
from ledger.errors import InvalidInput, LedgerError, RefusedError
from ledger.fold.events import EventBuffer, ResetRefused
from ledger.fold.state import PlanItem
from ledger.reset.plan import Planned, plan_command, reviewed, scenario_of
from ledger.reset.policy import ResetPolicy
from ledger.reset.scenarios import Scenario, reset_detail, scenario_doc
from ledger.store.writer import Writer
from ledger.timeparse import parse_duration, parse_time


def line_time(writer: Writer, cmd: Command, ts_limit: int | None) -> int:
    """The ledger time of a command: its `ts` (never before the last event; at most `ts_limit`
    unless None: see `Writer.ts_limit_ms`), else the clock."""
    if cmd.ts is None:
        return writer.now_ms()
    ts = writer.check_ts(parse_time(cmd.ts, writer.now_ms), cmd.ts, ts_limit)
    return max(ts, writer.state.last_ts)


def ts_limit_of(writer: Writer, may_backfill: bool, ts_limit: int | None = None) -> int | None:
    """The latest `ts` this sender may give (None: any): the writer's limit (or the one a caller
    fixed for its run, so that both paths of a run judge alike), unless it may backfill."""
    if may_backfill or writer.backfill:
        return None
    return writer.ts_limit_ms() if ts_limit is None else ts_limit


def run(writer: Writer, cmd: Command | LedgerError, line: int, events: EventBuffer,
        now: int | None = None, actor: str | None = None,
        errors: dict[int, LedgerError] | None = None, denied: str | None = None, *,
        may_backfill: bool = False, ts_limit: int | None = None) -> Result:
    """Run one command, folding its events into `events`. `now`: its ledger time when the caller
    computed it (the column path); `actor`: who sent it, overriding what it claims (the
    server's authenticated name); `denied`: why the sender may not (the server's role or
    group rule): nothing runs, and a reset is recorded as `reset_refused` with that rule.
    `may_backfill`: the sender may give a `ts` beyond the clock skew; `ts_limit`: the limit
    otherwise, when the caller fixed one. `errors` collects the exception behind an error
    result."""
    if isinstance(cmd, LedgerError):
        if type(cmd) is BlankLine:
            return Result(line=line)  # nothing to do, no error
        if errors is not None:
            errors[line] = cmd
        return Result(line=line, error=str(cmd))
    op = op_of(cmd)
    limit = ts_limit_of(writer, may_backfill, ts_limit)
    if denied is not None:
        return _denied(writer, cmd, line, op, events, actor, denied, errors, now)
    try:
        at = line_time(writer, cmd, limit) if now is None else now
        if now is not None and cmd.ts is not None:  # validated all the same
            writer.check_ts(parse_time(cmd.ts, now), cmd.ts, limit)
        result = _dispatch(writer, cmd, line, op, at, events, actor)
    except LedgerError as e:
        if errors is not None:
            errors[line] = e
        return Result(line=line, op=op, error=str(e),
                      refused=e.reason if isinstance(e, RefusedError) else None)
    if result.error is not None and errors is not None and result.refused is not None:
        errors[line] = RefusedError(result.refused, result.error)
    return result


def _denied(writer: Writer, cmd: Command, line: int, op: str, events: EventBuffer,
            actor: str | None, rule: str, errors: dict[int, LedgerError] | None,
            now: int | None = None) -> Result:
    """A command its sender may not send: refused by `rule`; a reset is recorded for auditors
    (resets are privileged: the only refusal the ledger records), at `now` when the caller
    computed the line's time (the column path: a later reading of the clock would stamp it
    after the lines that follow it), else at the ledger's time."""
    group = getattr(cmd, "group", None)
    message = (f"forbidden: {actor or 'this sender'} may not {op.replace('_', ' ')}"
               + (f" group {group!r}" if group else "") + f" ({rule})")
    if type(cmd) is Reset:
        if now is None:
            now = writer.now_ms()  # (a refused sender's ts is not taken)
        detail = {"mode": scenario_field(cmd), "refused_by": rule, "message": message}
        if cmd.reason:
            detail["reason"] = cmd.reason
        writer.state.emit(events, ResetRefused(ts=now, consumer_group=cmd.group, actor=actor,
                                               detail=json.dumps(detail, separators=(",", ":"))))
    if errors is not None:
        errors[line] = RefusedError(rule, message)
    return Result(line=line, op=op, error=message, refused=rule)


def _dispatch(writer: Writer, cmd: Command, line: int, op: str, now: int, events: EventBuffer,
              actor: str | None) -> Result:
    state = writer.state
    retention = writer.settings.offsets_retention_ms
    t = type(cmd)
    if t is Commit:
        c: Commit = cmd  # type: ignore[assignment]
        if c.generation is None and not c.owner_only and state.fast_commit(
                c.group, c.topic, c.queue_id, c.offset, c.client, now, retention, events,
                actor) is not None:
            return CommitResult(line=line, op=op, accepted=True, reason=None, offset=c.offset)
        r = state.decide_commit(c.group, c.topic, c.queue_id, c.offset, c.client, c.generation,
                                now, retention, events, actor, c.owner_only)
        return CommitResult(line=line, op=op, accepted=r.accepted, reason=r.reason,
                            offset=r.offset,
                            error=None if r.accepted else f"commit refused: {r.reason}")
    if t is Pull:
        p: Pull = cmd  # type: ignore[assignment]
        if p.client is not None:
            fast = state.fast_pull(p.group, p.topic, p.queue_id, p.client, p.max, now, retention,
                                   events, actor)
            if fast is not None:
                return PullResult(line=line, op=op, next_offset=fast[0], generation=fast[1],
                                  count=fast[2])
        r2 = state.decide_pull(p.group, p.topic, p.queue_id, p.client, p.max, now, retention,
                               events, actor)
        return PullResult(line=line, op=op, next_offset=r2.next_offset,
                          generation=r2.generation, count=r2.count)
    if t is QueueAppend:
        a: QueueAppend = cmd  # type: ignore[assignment]
        store_ts = now if a.store_time is None else parse_time(a.store_time, now)
        lo, hi = state.decide_queue_append(a.topic, a.queue_id, a.count, store_ts, now, events,
                                           actor or "system")
        return QueueResult(line=line, op=op, topic=a.topic, queue_id=a.queue_id, min_offset=lo,
                           max_offset=hi)
    if t is QueueTruncate:
        q: QueueTruncate = cmd  # type: ignore[assignment]
        lo, hi = state.decide_queue_truncate(q.topic, q.queue_id, q.min_offset, now, events,
                                             actor or "system")
        return QueueResult(line=line, op=op, topic=q.topic, queue_id=q.queue_id, min_offset=lo,
                           max_offset=hi)
    if t is QueueBounds:
        b: QueueBounds = cmd  # type: ignore[assignment]
        bound_store_ts = None if b.store_time is None else parse_time(b.store_time, now)
        lo, hi = state.decide_queue_bounds(
            b.topic, b.queue_id, b.max_offset, b.min_offset, bound_store_ts, now, events,
            actor or (f"sync:{b.source}" if b.source else "system"),
            f"bounds from {b.source}" if b.source else None)
        return QueueResult(line=line, op=op, topic=b.topic, queue_id=b.queue_id, min_offset=lo,
                           max_offset=hi)
    if t is Sync:
        s: Sync = cmd  # type: ignore[assignment]
        refusal = sync_refusal(writer, s, actor, now, events)
        if refusal is not None:
            pos = state.positions.get((s.group, s.topic, s.queue_id))
            return SyncResult(line=line, op=op, consumer_group=s.group, topic=s.topic,
                              queue_id=s.queue_id, from_offset=pos.committed if pos else None,
                              to_offset=s.offset, changed=False, error=refusal[1],
                              refused="policy")
        before = state.decide_sync(s.group, s.topic, s.queue_id, s.offset, s.source, now,
                                   events, actor, s.client)
        return SyncResult(line=line, op=op, consumer_group=s.group, topic=s.topic,
                          queue_id=s.queue_id, from_offset=before, to_offset=s.offset,
                          changed=before != s.offset)
    if t is GroupSet:
        g: GroupSet = cmd  # type: ignore[assignment]
        timeout = g.client_timeout
        timeout_ms = parse_duration(timeout) if isinstance(timeout, str) else timeout
        initial = g.initial
        if initial is not None and initial.startswith("timestamp:"):
            initial = f"timestamp:{parse_time(initial.split(':', 1)[1], now)}"
        settings = state.decide_group_set(g.group, now, events, mode=g.mode, initial=initial,
                                          client_timeout_ms=timeout_ms, actor=actor or g.actor)
        return GroupResult(line=line, op=op, consumer_group=g.group, mode=settings.mode,
                           initial=settings.initial, client_timeout_ms=settings.client_timeout_ms)
    if t is GroupDelete:
        d: GroupDelete = cmd  # type: ignore[assignment]
        who = actor or d.actor or (f"sync:{d.source}" if d.source is not None else None)
        n = state.decide_delete_group(d.group, who, now, events, d.source)
        return GroupDeleteResult(line=line, op=op, consumer_group=d.group, queues_deleted=n)
    if t is Reset:
        return _reset(writer, cmd, line, now, events, actor)  # type: ignore[arg-type]
    raise InvalidInput(f"unknown op {op!r}")


def _reset(writer: Writer, cmd: Reset, line: int, now: int, events: EventBuffer,
           actor: str | None) -> ResetResult:
    """Plan against the current state; execute into this batch when asked (after the reset
    policy allows it). A reviewed plan (`cmd.plan`) runs as it is, or not at all."""
    who = actor or cmd.actor
    scenario = scenario_of(cmd, now)
    planned = (reviewed(writer, cmd, now) if cmd.plan is not None
               else plan_command(writer, cmd, now))
    result = reset_result(line, cmd.group, planned, executed=False,
                          scenario=scenario_doc(scenario, cmd.backward_only))
    if not planned.items:
        return result
    detail = reset_detail(scenario, cmd.reason, cmd.backward_only)
    refusal = policy_refusal(writer, cmd.group, scenario, planned.items, who, detail, cmd.force,
                             now, events if cmd.execute else None)
    if not cmd.execute:  # a dry run says whether its execute would pass the policy
        if refusal is not None:
            result.policy = f"an execute would be refused: {refusal[1]}"
        return result
    if refusal is not None:
        result.error, result.refused = refusal[1], "policy"
        return result
    writer.state.decide_reset(planned.items, who, detail, now, events)
    result.executed = True
    return result


def sync_refusal(writer: Writer, cmd: Sync, actor: str | None, now: int,
                 events: EventBuffer) -> tuple[str, str] | None:
    """(rule, message) when `reset-policy.toml` refuses a sync that moves an offset back
    (max_rewind_messages: a sync overwrites as a reset does), recorded in `events` as a
    `reset_refused` with the actor and the rule; else None. The one check of a sync's rewind,
    for whichever path folds syncs."""
    pos = writer.state.positions.get((cmd.group, cmd.topic, cmd.queue_id))
    before = pos.committed if pos is not None else None
    if before is None or cmd.offset is None or cmd.offset >= before:
        return None  # only a move back is guarded: the policy is read for those alone
    policy = ResetPolicy.load(writer.root)
    refusal = policy.rewind_refusal(before - cmd.offset, f"sync of {cmd.topic}:{cmd.queue_id}",
                                    "reset with --force instead")
    if refusal is None:
        return None
    rule, message = refusal
    message = f"sync refused by policy rule {rule}: {message}"
    who = actor or f"sync:{cmd.source}"
    detail = {"mode": "sync", "source": cmd.source, "topic": cmd.topic,
              "queue_id": cmd.queue_id, "from_offset": before, "to_offset": cmd.offset,
              "refused_by": rule, "message": message}
    writer.state.emit(events, ResetRefused(ts=now, consumer_group=cmd.group, actor=who,
                                           detail=json.dumps(detail, separators=(",", ":"))))
    return rule, message


def reset_result(line: int, group: str, planned: Planned, *, executed: bool,
                 scenario: dict[str, Any] | None = None) -> ResetResult:
    """What `reset --json` prints: the plan with its counts and the queues left out."""
    return ResetResult(
        line=line, op="reset", consumer_group=group, executed=executed, scenario=scenario,
        plan=[{"consumer_group": i.consumer_group, "topic": i.topic, "queue_id": i.queue_id,
               "from_offset": i.from_offset, "to_offset": i.to_offset} for i in planned.items],
        messages_replayed=planned.messages_replayed, messages_skipped=planned.messages_skipped,
        skipped_queues=[{"topic": t, "queue_id": q} for t, q in planned.skipped],
        ignored_groups=list(planned.ignored_groups),
        clamped=[{"topic": c.topic, "queue_id": c.queue_id, "requested": c.requested,
                  "to_offset": c.to_offset, "warning": c.message()} for c in planned.clamped])


def policy_refusal(writer: Writer, group: str, scenario: Scenario, items: tuple[PlanItem, ...],
                   actor: str | None, detail: str, force: bool, now: int,
                   events: EventBuffer | None) -> tuple[str, str] | None:
    """(rule, message) when `reset-policy.toml` refuses this reset, else None. With `events`,
    the refusal is recorded there as `reset_refused` (the only refusal the ledger records:
    resets are privileged)."""
    policy = ResetPolicy.load(writer.root)
    if policy == ResetPolicy():
        return None
    recent = 0
    if policy.resets_per_group is not None:
        row = writer.ready_view().con.execute(
            "SELECT count(DISTINCT ts) FROM events WHERE kind = 'reset' "
            "AND consumer_group = ? AND ts >= ?", [group, now - policy.window_ms]).fetchall()
        recent = row[0][0] if row else 0
    refusal = policy.refusal(actor=actor, group=group, items=items, scenario=scenario,
                             now_ms=now, recent_resets=recent, force=force)
    if refusal is None:
        return None
    rule, message = refusal
    message = f"reset refused by policy rule {rule}: {message}"
    if events is not None:
        refused = json.loads(detail) | {"refused_by": rule, "message": message}
        writer.state.emit(events, ResetRefused(
            ts=now, consumer_group=group, actor=actor,
            detail=json.dumps(refused, separators=(",", ":"))))
    return rule, message
