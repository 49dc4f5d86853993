"""The one way a batch of commands enters the ledger: fold it (column-wise where the batch is
large enough to pay for it, per command elsewhere, in line order, with the same events and
results either way) and make it durable with one append (one fsync), then answer one result per
command. A reset splits a batch: it plans against the log, so what comes before it is made
durable first.

If anything but a command's own error escapes (a failed write, an interrupt, a bug), the state
may hold events the log does not: the writer is marked unusable, and nothing derived (view,
checkpoint) is written from it again; reopening rebuilds from the log.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ledger.commands.command import BY_OP, Command, Commit, QueueAppend, Reset
from ledger.commands.results import Result
from ledger.errors import LedgerError
from ledger.executor.columnar import TYPED, Job, apply_table
from ledger.executor.resident import Resident
from ledger.executor.run_results import set_seqs
from ledger.fold.events import EventBuffer
from ledger.store.writer import Writer

#: Stands in the column table for a command its sender may not send (it runs per command).
_DENIED = LedgerError("denied")
#: Commands in a batch from which the column-wise fold pays for its fixed cost.
COLUMN_MIN = 2048
_OP_OF_TYPE = {t: op for op, t in BY_OP.items()}
_INT_FIELDS = ("queue_id", "offset", "max", "generation", "count")


@dataclass(frozen=True)
class Executed:
    """One result per command, in order; the exception behind each error result, by line."""

    results: list[Result]
    errors: dict[int, LedgerError]


def execute(writer: Writer, commands: Sequence[Command | LedgerError], *,
            actor: str | Sequence[str | None] | None = None, first_line: int = 1,
            denied: Sequence[str | None] | None = None,
            backfill: bool | Sequence[bool] = False) -> Executed:
    """Fold and append a batch of decoded, validated commands (or the errors of lines that
    could not be decoded, answered in place). `actor`: who sends them (one name for all, or
    one per command; None keeps what a command claims). `denied`: per command, the rule by
    which its sender may not send it (refused; a reset recorded as reset_refused).
    `backfill`: whether the sender (of all, or of each command) may give a `ts` beyond the
    clock skew (`Writer.ts_limit_ms`; the writer's own `backfill` allows it for all)."""
    writer.check_writable()
    job = Job(writer, commands, first_line, actor, denied=denied, backfill=backfill)
    try:
        if len(commands) >= COLUMN_MIN:
            folded = commands  # denied commands stay out of the vector path (no op in the table)
            if denied is not None and any(d is not None for d in denied):
                folded = [c if d is None else _DENIED
                          for c, d in zip(commands, denied, strict=True)]
            results: list[Result] = []
            for part in apply_table(job, command_table(folded), len(commands)):
                results += part
        else:
            results = _per_command(job, commands)
    except BaseException as e:
        writer.fail(e)
        raise
    return Executed(results, job.errors)


def execute_table(writer: Writer, table: pa.Table, *, batch_commands: int, form: str = TYPED,
                  actor: str | None = None, first_line: int = 1,
                  overrides: dict[int, Command | LedgerError] | None = None,
                  backfill: bool = False, resident: Resident | None = None) -> Iterator[Any]:
    """A command table (one column per field, null = absent) folded a batch at a time; yields
    each batch's results once durable, in `form` (columnar.TYPED, ARROW or JSON). `overrides`:
    lines decoded apart from the table, by line number; `backfill` as for `execute`;
    `resident`: shared by the tables of one call (columnar.apply_table)."""
    writer.check_writable()
    job = Job(writer, None, first_line, actor, overrides=overrides or {}, backfill=backfill)
    parts = apply_table(job, table, batch_commands, form=form, resident=resident)
    while True:
        try:
            part = next(parts)
        except StopIteration:
            return
        except BaseException as e:
            writer.fail(e)
            raise
        yield part


def _per_command(job: Job, commands: Sequence[Command | LedgerError]) -> list[Result]:
    writer = job.writer
    job.start_run()
    results: list[Result] = []
    events = EventBuffer()
    last_event: list[int] = []  # per pending result: its last event in `events`, or -1
    pending = 0  # results[pending:] wait for the append of `events`

    def flush() -> None:
        nonlocal events, last_event, pending
        first = writer.append(events)
        set_seqs(results[pending:], [first + i if i >= 0 else -1 for i in last_event])
        events, last_event, pending = EventBuffer(), [], len(results)

    for i, cmd in enumerate(commands):
        if type(cmd) is Reset and events:
            flush()  # a reset plans against the log (to-state-at, the policy's rate)
        before = len(events)
        results.append(job.run(cmd, job.first_line + i, events))
        last_event.append(len(events) - 1 if len(events) > before else -1)
    flush()
    return results


def command_table(commands: Sequence[Command | LedgerError]) -> pa.Table:
    """The columns the column-wise fold reads, one row per command (lines that are errors have
    no op). Fields a row's command lacks are null; a time given as text (ISO-8601) makes the
    ts column text (that run then folds per command), a store time given as text marks its
    append as one the vector path does not take."""
    n = len(commands)
    ops: list[str | None] = [None] * n
    columns: dict[str, list[Any]] = {f: [None] * n for f in
                                     ("group", "topic", "client", "source", "ts", "store_time",
                                      *_INT_FIELDS)}
    owner_only: list[bool | None] = [None] * n
    text_ts = False
    for i, cmd in enumerate(commands):
        op = _OP_OF_TYPE.get(type(cmd))
        if op is None:
            continue
        ops[i] = op
        if type(cmd) is Commit and cmd.owner_only:
            owner_only[i] = True
        for name in ("group", "topic", "client", "source", *_INT_FIELDS):
            value = getattr(cmd, name, None)
            if value is not None and not isinstance(value, (str, int)):
                value = None  # a reset's list fields: read per command
            columns[name][i] = value
        ts = cmd.ts  # type: ignore[union-attr]
        if isinstance(ts, str):
            text_ts = True
        columns["ts"][i] = ts
        if type(cmd) is QueueAppend and cmd.store_time is not None:
            columns["store_time"][i] = cmd.store_time if isinstance(cmd.store_time, int) else -1
    if text_ts:
        columns["ts"] = [None if v is None else str(v) for v in columns["ts"]]
    arrays = {"op": pa.array(ops, pa.string())}
    for name in ("group", "topic", "client", "source"):
        arrays[name] = pa.array(columns[name], pa.string())
    for name in (*_INT_FIELDS, "store_time"):
        arrays[name] = pa.array(columns[name], pa.int64())
    arrays["ts"] = pa.array(columns["ts"], pa.string() if text_ts else pa.int64())
    arrays["owner_only"] = pa.array(owner_only, pa.bool_())
    return pa.table(arrays)
