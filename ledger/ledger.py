"""`Ledger`: the public API of one data directory. Every write is a batch of typed commands
(`submit`): folded in memory, appended to the log with one fsync, then answered; the typed
methods (`pull`, `commit`, `reset`, ...) and `apply` are thin calls of it. Reads answer from the
in-memory state (lookups in microseconds), the DuckDB view and the log.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ledger.commands.command import (
    Command,
    Commit,
    GroupDelete,
    GroupSet,
    PlanRow,
    Pull,
    QueueAppend,
    QueueBounds,
    QueueTruncate,
    Reset,
    Sync,
    decode_lines,
    from_json,
    from_obj,
)
from ledger.commands.ndjson import lines_bytes, parsed_blocks, split_lines
from ledger.commands.results import (
    CommitResult,
    GroupDeleteResult,
    GroupResult,
    PullResult,
    QueueResult,
    ResetResult,
    Result,
    SyncResult,
    to_dict,
)
from ledger.errors import InvalidInput, LedgerError, RefusedError
from ledger.executor.batch import COLUMN_MIN, Executed, execute, execute_table
from ledger.executor.columnar import ARROW, JSON
from ledger.executor.handlers import reset_result
from ledger.executor.handlers import run as run_one
from ledger.executor.importing import submit_import
from ledger.executor.resident import Resident
from ledger.fold.events import EventBuffer
from ledger.fold.state import Key, PlanItem, State, snapshot_rows
from ledger.importers.result import ImportResult
from ledger.limits import check_name
from ledger.reads import queries
from ledger.reads.generations import QueueGeneration, QueueRef, generations
from ledger.reads.sandbox import SqlQuery
from ledger.reads.state_at import check_state_answerable, state_at
from ledger.reset.plan import Planned, plan
from ledger.reset.plan_file import scenario_fields
from ledger.reset.scenarios import Scenario, Scope
from ledger.store.settings import LedgerSettings
from ledger.store.view import View
from ledger.store.writer import Writer, wall_clock_ms
from storage import FileSystem, LockedError, SegmentedLog


@dataclass(frozen=True)
class ResetPlan:
    """An immutable reset plan; `execute()` commits it (iceberg-python's staged transaction),
    refused when any queue's committed offset moved since it was planned."""

    ledger: Ledger
    group: str
    scenario: Scenario
    items: tuple[PlanItem, ...]
    actor: str | None
    reason: str | None
    backward_only: bool
    skipped: tuple[tuple[str, int], ...] = ()  # queues left out (to-state-at: no offset then)

    def rows(self) -> list[dict[str, Any]]:
        return reset_result(0, self.group, Planned(self.items), executed=False).plan

    @property
    def messages_replayed(self) -> int:
        """Messages consumed again (targets behind the current offsets): a cold-read warning."""
        return Planned(self.items).messages_replayed

    @property
    def messages_skipped(self) -> int:
        """Messages never consumed (targets ahead of the current offsets)."""
        return Planned(self.items).messages_skipped

    def command(self, *, force: bool = False) -> Reset:
        """The command that executes exactly this plan."""
        scenario = scenario_fields(self.scenario)
        return Reset(group=self.group, plan=[
            PlanRow(topic=i.topic, queue_id=i.queue_id, from_offset=i.from_offset,
                    to_offset=i.to_offset) for i in self.items],
            backward_only=self.backward_only, reason=self.reason, actor=self.actor,
            execute=True, force=force, **scenario)

    def execute(self, *, force: bool = False) -> int:
        """Apply the plan after the reset policy allows it (`force` lifts the rewind limit);
        returns the seq of its last event (the log end for an empty plan)."""
        if not self.items:
            return self.ledger.log.next_seq - 1
        result = self.ledger.submit_one(self.command(force=force))
        return result.seq if result.seq is not None else self.ledger.log.next_seq - 1


class Ledger:
    """An offset ledger rooted at a data directory."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self._closed = False

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, clock: Callable[[], int] | None = None,
        readonly: bool = False, fs: FileSystem | None = None, backfill: bool = False,
        read_index: bool = True, take_over: bool = False, **settings: Any,
    ) -> Ledger:
        """Open (creating if needed) a data directory as its single writer, or as a reader.
        `backfill`: commands through this handle may carry a `ts` more than the clock skew
        (setting `clock_skew_ms`) ahead of `clock` (simulations, replays of synthetic time);
        otherwise such a command is refused naming its ts. `read_index=False` reads without the
        log's read index (every row group of a range decoded, the tail scanned): the same
        answers, for checks and comparisons. A new data directory whose `segments` name an S3
        prefix that already holds a log is refused (its writer elsewhere would lose what is
        still in its local tail) unless `take_over`."""
        root = Path(path)
        clock = clock or wall_clock_ms
        if readonly:
            return cls(Writer.open_reader(root, clock=clock, fs=fs, read_index=read_index))
        return cls(Writer.open(root, clock=clock, fs=fs, backfill=backfill,
                               read_index=read_index, take_over=take_over, **settings))

    @classmethod
    def open_for_read(cls, path: str | os.PathLike[str], **kw: Any) -> Ledger:
        """Open as writer when free, else as a reader of a consistent prefix (DESIGN.md, View)."""
        try:
            return cls.open(path, **kw)
        except LockedError:
            return cls.open(path, readonly=True, clock=kw.get("clock"), fs=kw.get("fs"))

    def close(self) -> None:
        """Flush the view and release the log; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self.writer.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ parts
    @property
    def root(self) -> Path:
        return self.writer.root

    @property
    def log(self) -> SegmentedLog:
        return self.writer.log

    @property
    def state(self) -> State:
        return self.writer.state

    @property
    def view(self) -> View:
        return self.writer.view

    @property
    def settings(self) -> LedgerSettings:
        return self.writer.settings

    @property
    def readonly(self) -> bool:
        return self.writer.readonly

    def now_ms(self) -> int:
        """Ledger time: never goes backwards (ts = max(clock, last ts))."""
        return self.writer.now_ms()

    def flush_view(self) -> None:
        self.writer.flush_view()

    def catch_up(self) -> int:
        """A reader (`readonly`) folds what the writer appended since; returns the events."""
        return self.writer.catch_up()

    # ------------------------------------------------------------------ the write path
    def submit(self, commands: Sequence[Command | dict[str, Any]], *,
               actor: str | Sequence[str | None] | None = None,
               denied: Sequence[str | None] | None = None,
               backfill: bool | Sequence[bool] = False) -> list[Result]:
        """Run a batch of commands (typed, or dicts of the `apply` fields): validated, folded,
        made durable with one fsync; one result per command, in order, once durable. A bad
        command answers with its error and appends nothing; the others go on. `actor` (the
        server's authenticated names: one for all, or one per command) replaces whatever
        actor the commands claim; `denied` (per command) the rule by which its sender may not
        send it: refused, and a refused reset recorded for auditors. `backfill` (for all, or
        per command): the sender may give a `ts` beyond the clock skew."""
        return self._execute(commands, actor, denied, backfill).results

    def submit_decoded(self, commands: Sequence[Command | LedgerError], *,
                       actor: str | Sequence[str | None] | None = None,
                       denied: Sequence[str | None] | None = None,
                       backfill: bool | Sequence[bool] = False) -> list[Result]:
        """`submit` of commands already decoded and validated by `ledger.commands.command` (from_json,
        decode_document: a request body, an NDJSON line), or their decoding errors. `backfill`
        (for all, or per command): the sender may give a `ts` beyond the clock skew."""
        return execute(self.writer, commands, actor=actor, denied=denied,
                       backfill=backfill).results

    def submit_one(self, command: Command | dict[str, Any], *,
                   actor: str | None = None) -> Result:
        """One command; its error raised as the ledger's exception (a commit's refusal by a
        rule is a result, not an error: `accepted` is false)."""
        done = self._execute([command], actor)
        if done.errors:
            raise done.errors[1]
        return done.results[0]

    def _execute(self, commands: Sequence[Command | dict[str, Any]],
                 actor: str | Sequence[str | None] | None,
                 denied: Sequence[str | None] | None = None,
                 backfill: bool | Sequence[bool] = False) -> Executed:
        checked: list[Command | LedgerError] = []
        for c in commands:
            try:
                checked.append(from_obj(c))
            except LedgerError as e:
                checked.append(e)
        return execute(self.writer, checked, actor=actor, denied=denied, backfill=backfill)

    def apply(self, commands: Iterable[Any] | pa.Table | pa.RecordBatch) -> Iterator[dict[str, Any]]:
        """Apply commands in batches; yield one result per command (the `apply` dict), each only
        once its events are durable. Commands are dicts, typed commands, NDJSON lines (bytes)
        or errors of lines that could not be read, or an Arrow table with one column per field
        (null: absent), which folds column-wise."""
        self.writer.check_writable()
        if isinstance(commands, pa.Table | pa.RecordBatch):
            parts = execute_table(self.writer, _as_table(commands),
                                  batch_commands=self.settings.apply_column_batch_commands)
            return (to_dict(r) for part in parts for r in part)
        return self._apply_iter(iter(commands))

    def _apply_iter(self, items: Iterator[Any]) -> Iterator[dict[str, Any]]:
        line = 1
        while True:
            batch = list(itertools.islice(items, self.settings.apply_batch_commands))
            if not batch:
                return
            decoded = [_decoded(item, n) for n, item in enumerate(batch, start=line)]
            done = execute(self.writer, decoded, first_line=line)
            line += len(batch)
            yield from (to_dict(r) for r in done.results)

    def apply_ndjson(self, stream: IO[bytes], *, on_bytes: Callable[[int], None] | None = None
                     ) -> Iterator[tuple[bytes, int, int]]:
        """`apply` of an NDJSON stream, a batch at a time once durable: (the results' JSON
        lines, one per input line, lines in the batch, lines with an error). Every line is
        decoded and validated here; a line that cannot be read answers with its error."""
        self.writer.check_writable()
        encode = msgspec.json.Encoder().encode
        line = 1
        # keys folded column-wise stay columns from block to block (their Positions are
        # written back before each block's results are yielded)
        resident = Resident(self.writer.state)
        for block, n_lines, bulk in parsed_blocks(stream, self.settings.apply_batch_commands,
                                                  COLUMN_MIN):
            if on_bytes is not None:
                on_bytes(len(block))
            if bulk is not None:
                yield self._apply_bulk(block, bulk, line, resident)
            else:
                decoded = decode_lines(split_lines(block), line)
                done = execute(self.writer, decoded, first_line=line)
                yield (b"".join(encode(r) + b"\n" for r in done.results), len(done.results),
                       sum(r.error is not None for r in done.results))
            line += n_lines

    def _apply_bulk(self, block: bytes, bulk: tuple[pa.Table, Any], first_line: int,
                    resident: Resident) -> tuple[bytes, int, int]:
        """A batch the bulk reader turned into a table: folded as one; its results' JSON."""
        table, odd = bulk
        overrides: dict[int, Command | LedgerError] = {}
        if odd.any():  # decoded alone, so that the error names the field their op lacks
            lines = split_lines(block)
            for i in odd.nonzero()[0].tolist():
                overrides[first_line + i] = _decoded(lines[i], first_line + i)
            ops = table.column("op")
            table = table.set_column(table.column_names.index("op"), "op",
                                     pc.if_else(pa.array(~odd), ops, pa.scalar(None, ops.type)))
        parts = list(execute_table(self.writer, table, batch_commands=table.num_rows,
                                   form=JSON, first_line=first_line, overrides=overrides,
                                   resident=resident))
        text = pa.chunked_array([c for lines, _ in parts for c in lines.chunks], pa.string())
        return lines_bytes(text), len(text), sum(errors for _, errors in parts)

    def apply_table(self, commands: pa.Table | pa.RecordBatch) -> Iterator[list[Result]]:
        """`apply` of a command table: typed results a batch at a time, once durable."""
        return execute_table(self.writer, _as_table(commands),
                             batch_commands=self.settings.apply_column_batch_commands)

    def apply_arrow(self, commands: pa.Table | pa.RecordBatch) -> pa.Table:
        """`apply` for bulk loads: Arrow commands in, Arrow results out (RESULT_SCHEMA, one row
        per line, in line order), returned once every event is durable."""
        from ledger.executor.run_results import RESULT_SCHEMA

        if not isinstance(commands, pa.Table | pa.RecordBatch):
            raise InvalidInput(f"apply_arrow takes a pyarrow Table or RecordBatch, not "
                               f"{type(commands).__name__}")
        parts = list(execute_table(self.writer, _as_table(commands),
                                   batch_commands=self.settings.apply_column_batch_commands,
                                   form=ARROW))
        return pa.concat_tables(parts) if parts else RESULT_SCHEMA.empty_table()

    # ------------------------------------------------------------------ typed writes
    def queue_append(self, topic: str, queue_id: int, count: int = 1,
                     store_ts: int | None = None) -> dict[str, Any]:
        return _queue_doc(self.submit_one(QueueAppend(topic=topic, queue_id=queue_id,
                                                      count=count, store_time=store_ts)))

    def queue_truncate(self, topic: str, queue_id: int, min_offset: int) -> dict[str, Any]:
        return _queue_doc(self.submit_one(QueueTruncate(topic=topic, queue_id=queue_id,
                                                        min_offset=min_offset)))

    def queue_bounds(self, topic: str, queue_id: int, *, max_offset: int | None = None,
                     min_offset: int | None = None, source: str | None = None) -> dict[str, Any]:
        return _queue_doc(self.submit_one(QueueBounds(
            topic=topic, queue_id=queue_id, max_offset=max_offset, min_offset=min_offset,
            source=source)))

    def group_set(self, group: str, *, mode: str | None = None, initial: str | None = None,
                  client_timeout_ms: int | None = None, actor: str | None = None
                  ) -> dict[str, Any]:
        r = self.submit_one(GroupSet(group=group, mode=mode, initial=initial,  # type: ignore[arg-type]
                                     client_timeout=client_timeout_ms, actor=actor))
        assert isinstance(r, GroupResult)
        return {"consumer_group": r.consumer_group, "mode": r.mode, "initial": r.initial,
                "client_timeout_ms": r.client_timeout_ms}

    def group_delete(self, group: str, *, actor: str | None = None) -> dict[str, Any]:
        r = self.submit_one(GroupDelete(group=group, actor=actor))
        assert isinstance(r, GroupDeleteResult)
        return {"consumer_group": r.consumer_group, "queues_deleted": r.queues_deleted}

    def pull(self, group: str, topic: str, queue_id: int, *, client: str | None = None,
             max_count: int = 32) -> PullResult:
        r = self.submit_one(Pull(group=group, topic=topic, queue_id=queue_id, client=client,
                                 max=max_count))
        assert isinstance(r, PullResult)
        return r

    def commit(self, group: str, topic: str, queue_id: int, offset: int, *,
               client: str | None = None, generation: int | None = None,
               owner_only: bool = False) -> CommitResult:
        r = self.submit_one(Commit(group=group, topic=topic, queue_id=queue_id, offset=offset,
                                   client=client, generation=generation, owner_only=owner_only))
        assert isinstance(r, CommitResult)
        return r

    def sync(self, entries: Iterable[tuple[str, str, int, int | None]], *, source: str,
             broadcast_groups: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Overwrite offsets from a snapshot (one batch); returns the changed keys."""
        commands: list[Command] = [GroupSet(group=g, mode="broadcast")
                                   for g in sorted(set(broadcast_groups))
                                   if not self.state.is_broadcast(g)]
        commands += [Sync(group=g, topic=t, queue_id=q, offset=o, source=source)
                     for g, t, q, o in entries]
        changes = []
        for r in self._checked(commands, actor=f"sync:{source}"):
            if isinstance(r, SyncResult) and r.changed:
                changes.append({"consumer_group": r.consumer_group, "topic": r.topic,
                                "queue_id": r.queue_id, "from_offset": r.from_offset,
                                "to_offset": r.to_offset})
        return changes

    def _checked(self, commands: Sequence[Command], actor: str | None = None) -> list[Result]:
        """A batch of the library's own commands: all or nothing on bad input (the first error
        raised before anything is appended)."""
        checked = [from_obj(c) for c in commands]
        done = execute(self.writer, checked, actor=actor)
        if done.errors:
            raise next(iter(done.errors.values()))
        return done.results

    def submit_import(self, imported: ImportResult | list[dict[str, Any]], *,
                      on_progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        """An importer's commands (ledger.importers), in batches; a summary of what changed.
        A record timed beyond the clock skew refuses the whole import (InvalidInput naming it)
        unless this ledger was opened with `backfill`."""
        return submit_import(self.writer, imported, on_progress=on_progress)

    # ------------------------------------------------------------------ reset
    def reset(
        self, group: str, scenario: Scenario, *, scope: Scope | None = None,
        targets: dict[Key, int] | None = None, backward_only: bool = False,
        actor: str | None = None, reason: str | None = None, now_ms: int | None = None,
    ) -> ResetPlan:
        """Plan a reset (dry run); `.execute()` applies it. `now_ms`: the ledger time to plan at,
        else the clock."""
        check_name(group, "group")
        if actor is not None:
            check_name(actor, "actor")
        now = self.now_ms() if now_ms is None else now_ms
        planned = plan(self.writer, group, scenario, scope=scope, targets=targets,
                       backward_only=backward_only, now_ms=now)
        return ResetPlan(self, group, scenario, planned.items, actor, reason, backward_only,
                         planned.skipped)

    def run_reset(self, command: Reset | dict[str, Any], *, actor: str | None = None
                  ) -> ResetResult:
        """A reset as the CLI and the server take it: planned (a dry run, a read: it works on a
        reader too) or, with `execute`, planned and applied in one step. A refusal by the
        policy or of a stale plan is raised (RefusedError) after it is recorded."""
        cmd = from_obj(command)
        if not isinstance(cmd, Reset):
            raise InvalidInput(f"run_reset takes a reset command, not {type(cmd).__name__}")
        errors: dict[int, LedgerError] = {}
        if cmd.execute:
            done = execute(self.writer, [cmd], actor=actor)
            result, errors = done.results[0], done.errors
        else:
            result = run_one(self.writer, cmd, 1, EventBuffer(), actor=actor, errors=errors)
        if isinstance(result, ResetResult):
            return result
        error = errors[1]
        if isinstance(error, RefusedError):
            return ResetResult(line=1, op="reset", consumer_group=cmd.group, executed=False,
                               plan=[], messages_replayed=0, messages_skipped=0,
                               error=str(error), refused=error.reason)
        raise error

    # ------------------------------------------------------------------ retention
    def retention(self, *, offsets_retention_ms: int | None = None,
                  log_retention_ms: int | None = None) -> dict[str, Any]:
        """Expire idle offsets; retire old segments already covered by a checkpoint."""
        from ledger.store.retention import run_retention

        return run_retention(self.writer, offsets_retention_ms, log_retention_ms)

    def rebuild(self) -> None:
        """Recreate the view from the newest checkpoint plus the log."""
        self.writer.rebuild()

    # ------------------------------------------------------------------ reads
    def committed(self, group: str, topic: str, queue_id: int) -> int | None:
        """Current committed offset from memory (the microsecond lookup)."""
        return self.state.committed((group, topic, queue_id), self.now_ms())

    def generations(self, group: str, queues: Sequence[QueueRef | tuple[str, int]] | None = None,
                    *, topic: str | None = None) -> list[QueueGeneration]:
        """Per queue (all of the group's when None, or of `topic`: `T` or `T:0,2`): generation,
        pending reset, committed offset and last puller, from memory: the cheap question a
        consumer asks every second."""
        return generations(self.state, group, queues, self.now_ms(), topic)

    def snapshot(self, group: str | None = None) -> list[tuple[str, str, int, int, int]]:
        """Current committed offsets from memory, same shape as `state_at` rows."""
        return snapshot_rows(self.state, self.now_ms(), group)

    def sql(self, query: str, *, timeout_s: float | None = None) -> pa.Table:
        """One read-only query over events, offsets, client_offsets, queues, groups, progress;
        stopped after `timeout_s` seconds (QueryStopped)."""
        return queries.sql(self.writer, query, timeout_s)

    def prepare_sql(self, query: str) -> SqlQuery:
        """`sql`'s query in its sandbox, to `run(timeout_s)` apart from this ledger (and
        `interrupt()` from another thread)."""
        return queries.prepare_sql(self.writer, query)

    def progress(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        return queries.progress(self.writer, group, topic)

    def groups(self) -> list[dict[str, Any]]:
        return queries.groups(self.writer)

    def progress_all(self) -> list[dict[str, Any]]:
        """Every key's progress: group, queue, bounds, committed offset, lag, time lag."""
        return queries.progress_all(self.writer)

    def lag(self, *, group: str | None = None, topic: str | None = None,
            at_ms: int | str | None = None, window: int = 10, allowed_lag: int = 0
            ) -> list[dict[str, Any]]:
        """Lag health and time lag per group at ledger time `at_ms` (epoch ms, ISO-8601 or
        `now`; default now): the document of `lag --json` (ledger/lag/document.py); `topic` is `T` or
        `T:0,2`."""
        from ledger.lag.document import check_at, health_settings, lag_document, lag_scope

        scope, settings = lag_scope(group, topic), health_settings(window, allowed_lag)
        at = check_at(queries.resolve_time(at_ms, self.writer, "at"))
        self.writer.settle()
        return lag_document(self.writer, scope, self.now_ms() if at is None else at, settings)

    def lag_series(self, *, since_ms: int | str, until_ms: int | str, every_ms: int | str,
                   group: str | None = None, topic: str | None = None) -> list[dict[str, Any]]:
        """Lag and time lag per queue at every `every_ms` (ms or ISO-8601 duration) from
        `since_ms` to `until_ms` (for charts): the document of `lag --since --until --every
        --json`."""
        from ledger.lag.document import check_series, lag_scope, series_document
        from ledger.timeparse import parse_duration

        scope = lag_scope(group, topic)
        since = queries.resolve_time(since_ms, self.writer, "since")
        until = queries.resolve_time(until_ms, self.writer, "until")
        every = parse_duration(every_ms) if isinstance(every_ms, str) else every_ms
        since, until, every = check_series(since, until, every)  # type: ignore[arg-type]
        check_state_answerable(self.writer.log, since)  # the series starts from the state then
        return series_document(self.writer, scope, since, until, every)

    def queues(self, topic: str | None = None) -> list[dict[str, Any]]:
        return queries.queues(self.writer, topic)

    def history(self, *, group: str | None = None, topic: str | None = None,
                queue_id: int | None = None, kind: str | None = None,
                since_ms: int | str | None = None, until_ms: int | str | None = None,
                limit: int | None = None, queue_events: bool = True) -> pa.Table:
        """Matching events, oldest first; `limit` keeps the newest N; `queue_events` False
        leaves out queue appends and truncations. Times: epoch ms, ISO-8601 or `now`."""
        return queries.history(self.writer, group=group, topic=topic, queue_id=queue_id,
                               kind=kind, since=since_ms, until=until_ms, limit=limit,
                               queue_events=queue_events)

    def offsets_for_time(self, topic: str, ts: int | str) -> list[dict[str, Any]]:
        """Per queue of `topic`: the first message stored at or after `ts` (None when none)."""
        return queries.offsets_for_time(self.writer, topic, ts)

    def state_at(self, *, ts: int | str | None = None, seq: int | None = None,
                 group: str | None = None) -> pa.Table:
        """Committed offsets as of ledger time `ts` (events with ts <= it; epoch ms, ISO-8601
        or `now`) or log position `seq` (events before it)."""
        if group is not None:
            check_name(group, "group")
        at = queries.resolve_time(ts, self.writer, "time")
        return state_at(self.writer, ts=at, seq=seq, group=group)

    def export_rows(self, group: str) -> list[dict[str, Any]]:
        return queries.export_rows(self.writer, group)

    def export_csv(self, group: str) -> str:
        """Kafka's reset CSV (topic,partition,offset) of the group's current committed offsets."""
        return queries.export_csv(self.writer, group)


def _as_table(data: pa.Table | pa.RecordBatch) -> pa.Table:
    return pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data


def _decoded(item: Any, line: int) -> Command | LedgerError:
    if isinstance(item, LedgerError):
        return item
    try:
        if isinstance(item, bytes | bytearray | memoryview):
            return from_json(bytes(item), line)
        return from_obj(item)
    except LedgerError as e:
        return e


def _queue_doc(r: Result) -> dict[str, Any]:
    assert isinstance(r, QueueResult)
    return {"topic": r.topic, "queue_id": r.queue_id, "min_offset": r.min_offset,
            "max_offset": r.max_offset}
