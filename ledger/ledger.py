"""`Ledger`: the public API. One writer per data directory; every write is a batch of commands
folded in memory, appended to the log with one fsync, then acknowledged.

The in-memory `State` answers lookups in microseconds; the DuckDB view is flushed every few
batches (and before every read), with its log position in the same transaction.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ledger import settings as settings_mod
from ledger.checkpoint import state_to_table, table_to_state
from ledger.errors import (
    HistoryUnavailable,
    InvalidInput,
    LedgerError,
    LedgerUnusable,
    RefusedError,
)
from ledger.events import EVENT_SCHEMA, EventBuffer, ResetRefused
from ledger.limits import check_name, check_offset, check_queue_id
from ledger.policy import ResetPolicy
from ledger.reset import Scenario, Scope, plan_reset, reset_detail, scope_keys
from ledger.settings import LedgerSettings
from ledger.state import CommitResult, PlanItem, PullResult, State, snapshot_rows
from ledger.timeline import STATE_AT_TAIL, state_at_table
from ledger.view import View, arrow_result, events_select, segments_source
from storage import (
    CorruptSegmentError,
    FileSystem,
    LockedError,
    LogSettings,
    SegmentedLog,
    SegmentInfo,
    StorageError,
)

logger = logging.getLogger(__name__)

VIEW_FILE = "view.duckdb"
CHECKPOINT_TS_KEY = b"offset_ledger.last_ts"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class ResetPlan:
    """An immutable reset plan; `execute()` commits it (iceberg-python's staged transaction)."""

    ledger: Ledger
    group: str
    scenario: Scenario
    items: tuple[PlanItem, ...]
    actor: str | None
    reason: str | None
    backward_only: bool
    skipped: tuple[tuple[str, int], ...] = ()  # queues left out (to-state-at: no offset then)

    def rows(self) -> list[dict[str, Any]]:
        return [
            {"consumer_group": i.consumer_group, "topic": i.topic, "queue_id": i.queue_id,
             "from_offset": i.from_offset, "to_offset": i.to_offset}
            for i in self.items
        ]

    @property
    def messages_replayed(self) -> int:
        """Messages consumed again (targets behind the current offsets): a cold-read warning."""
        return sum(max(0, i.from_offset - i.to_offset) for i in self.items
                   if i.from_offset is not None)

    @property
    def messages_skipped(self) -> int:
        """Messages never consumed (targets ahead of the current offsets)."""
        return sum(max(0, i.to_offset - i.from_offset) for i in self.items
                   if i.from_offset is not None)

    def execute(self, *, force: bool = False) -> int:
        """Apply the plan after the reset policy allows it (`force` lifts the rewind limit);
        returns the seq of its last event (the log end for an empty plan)."""
        return self.ledger._execute_plan(self, force=force)


class Ledger:
    """An offset ledger rooted at a data directory."""

    def __init__(
        self, root: Path, log: SegmentedLog, state: State, view: View,
        settings: LedgerSettings, clock: Callable[[], int], readonly: bool,
    ) -> None:
        self.root = root
        self.log = log
        self.state = state
        self.view = view
        self.settings = settings
        self._clock = clock
        self.readonly = readonly
        self._unusable: str | None = None
        self._closed = False
        self._batches_since_flush = 0
        # a seal listed by a read (`_settle_log`): the next append checkpoints at it
        self._seal_without_checkpoint = False
        self._last_flush = time.monotonic()
        self._events_segments: tuple | None = None

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, clock: Callable[[], int] | None = None,
        readonly: bool = False, fs: FileSystem | None = None, **settings: Any,
    ) -> Ledger:
        """Open (creating if needed) a data directory as its single writer, or as a reader."""
        root = Path(path)
        clock = clock or wall_clock_ms
        if readonly:
            return cls._open_reader(root, clock, fs)
        cfg = settings_mod.merged(root, settings)
        log = SegmentedLog.open(root, EVENT_SCHEMA, log_settings(cfg), clock=clock, writer=True,
                                fs=fs)
        try:
            if settings and any(v is not None for v in settings.values()):
                settings_mod.save(root, cfg)  # only the lock holder may change them
            state = _load_state(log)
            view = View.open(root / VIEW_FILE)
            ledger = cls(root, log, state, view, cfg, clock, readonly=False)
            if view.position() != log.next_seq:
                view.write_full(state, log.next_seq)
            else:
                state.dirty_keys.clear()
                state.dirty_queues.clear()
                state.dirty_groups.clear()
            return ledger
        except BaseException:
            log.close()
            raise

    @classmethod
    def _open_reader(cls, root: Path, clock: Callable[[], int],
                     fs: FileSystem | None = None) -> Ledger:
        """A consistent read-only snapshot: manifest's segments + checkpoint + intact tail, with an
        in-memory DuckDB view (the file is locked by the writer)."""
        if not (root / "log").exists():
            raise InvalidInput(f"no ledger at {root}: nothing written yet")
        log = SegmentedLog.open(root, EVENT_SCHEMA, None, clock=clock, writer=False, fs=fs)
        state = _load_state(log)
        view = View.open(None)
        view.write_full(state, log.next_seq)
        return cls(root, log, state, view, settings_mod.load(root), clock, readonly=True)

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
        try:
            if not self.readonly and self._unusable is None:
                self._settle_log(checkpoint=True)
                self.flush_view()
        finally:
            self.view.close()
            self.log.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ write path
    def now_ms(self) -> int:
        """Ledger time: never goes backwards (ts = max(clock, last ts))."""
        return max(self._clock(), self.state.last_ts)

    def _check_writable(self) -> None:
        if self.readonly:
            raise LedgerError(f"ledger at {self.root} is open read-only (another process writes)")
        if self._unusable is not None:
            raise LedgerUnusable(self._unusable)

    def _append(self, events: EventBuffer) -> int:
        """Make `events` (already folded into the state) durable; returns their first seq."""
        if not events:
            return self.log.next_seq
        return self._append_batch(events.to_record_batch(self.log.next_seq))

    def _append_batch(self, batch: pa.RecordBatch,
                      before_derived: Callable[[], None] | None = None) -> int:
        """`_append` for events already in Arrow form, numbered from the log's next seq.
        `before_derived` runs before a checkpoint or view flush reads the state (the column
        path writes its deferred positions back then)."""
        if batch.num_rows == 0:
            return self.log.next_seq
        try:
            result = self.log.append(batch)
        except BaseException as e:
            self._unusable = (
                f"a write failed ({e}); the in-memory state is ahead of the log: reopen the ledger"
            )
            raise
        # The batch is durable from here on: a failing checkpoint or view flush must not fail
        # the append (a retrying client would write it twice). Both are derived and retried:
        # the next seal or interval checkpoints again, and touched rows stay dirty until a
        # flush succeeds (every read flushes first, and reports the error then).
        cps = self.log.checkpoints()
        checkpoint = (result.sealed or self._seal_without_checkpoint
                      or (self.log.next_seq - (cps[-1] if cps else 0)
                          >= self.settings.checkpoint_interval_events))
        self._batches_since_flush += 1
        flush = (self._batches_since_flush >= self.settings.view_flush_batches
                 or (time.monotonic() - self._last_flush) * 1000 >= self.settings.view_flush_ms)
        if (checkpoint or flush) and before_derived is not None:
            before_derived()
        try:
            if checkpoint:
                self._checkpoint()
            if flush:
                self.flush_view()
        except (StorageError, OSError, duckdb.Error) as e:
            logger.warning("derived data not written after a durable append (retried later): %s", e)
        return result.first_seq

    def _settle_log(self, *, checkpoint: bool = False) -> None:
        """Wait for a segment the log is sealing in the background and list it, so that reads
        find it as Parquet rather than as WAL rows. Its checkpoint is written now if
        `checkpoint` (at close), else by the next append (a read may come in the middle of an
        apply, while folded positions are not yet written back). A failure is logged: the WAL
        stays the source, and the next change or open seals again."""
        if self.readonly:
            return
        try:
            if self.log.settle():
                self._seal_without_checkpoint = True
            if checkpoint and self._seal_without_checkpoint:
                self._checkpoint()
        except (StorageError, OSError) as e:
            logger.warning("a background seal could not be listed (retried later): %s", e)

    def _checkpoint(self) -> None:
        table = state_to_table(self.state)
        meta = {CHECKPOINT_TS_KEY: str(self.state.last_ts).encode()}
        self.log.write_checkpoint(self.log.next_seq, table.replace_schema_metadata(meta))
        self._seal_without_checkpoint = False

    def flush_view(self) -> None:
        if self.readonly:
            return
        self.view.flush(self.state, self.log.next_seq)
        self._batches_since_flush = 0
        self._last_flush = time.monotonic()

    def _run(self, fn: Callable[[EventBuffer, int], Any]) -> tuple[Any, int]:
        """One command as its own batch: decide (folding as it goes), append, acknowledge."""
        self._check_writable()
        events = EventBuffer()
        result = fn(events, self.now_ms())
        first = self._append(events)
        return result, first + len(events) - 1

    def queue_append(
        self, topic: str, queue_id: int, count: int = 1, store_ts: int | None = None
    ) -> dict[str, Any]:
        check_name(topic, "topic")
        check_queue_id(queue_id)
        from ledger.limits import APPEND_COUNT_MAX, check_int

        check_int(count, "count", 1, APPEND_COUNT_MAX)
        (lo, hi), _ = self._run(lambda out, now: self.state.decide_queue_append(
            topic, queue_id, count, store_ts if store_ts is not None else now, now, out))
        return {"topic": topic, "queue_id": queue_id, "min_offset": lo, "max_offset": hi}

    def queue_truncate(self, topic: str, queue_id: int, min_offset: int) -> dict[str, Any]:
        check_name(topic, "topic")
        check_queue_id(queue_id)
        check_offset(min_offset, "min offset")
        (lo, hi), _ = self._run(lambda out, now: self.state.decide_queue_truncate(
            topic, queue_id, min_offset, now, out))
        return {"topic": topic, "queue_id": queue_id, "min_offset": lo, "max_offset": hi}

    def group_set(
        self, group: str, *, mode: str | None = None, initial: str | None = None,
        client_timeout_ms: int | None = None, actor: str | None = None,
    ) -> dict[str, Any]:
        from ledger.commands import check_group_settings

        check_name(group, "group")
        check_group_settings(mode, initial, client_timeout_ms)
        g, _ = self._run(lambda out, now: self.state.decide_group_set(
            group, now, out, mode=mode, initial=initial, client_timeout_ms=client_timeout_ms,
            actor=actor))
        return {"consumer_group": group, "mode": g.mode, "initial": g.initial,
                "client_timeout_ms": g.client_timeout_ms}

    def group_delete(self, group: str, *, actor: str | None = None) -> dict[str, Any]:
        check_name(group, "group")
        n, _ = self._run(lambda out, now: self.state.decide_delete_group(group, actor, now, out))
        return {"consumer_group": group, "queues_deleted": n}

    def pull(
        self, group: str, topic: str, queue_id: int, *, client: str | None = None,
        max_count: int = 32,
    ) -> PullResult:
        from ledger.commands import check_pull

        check_pull(group, topic, queue_id, client, max_count)
        result, _ = self._run(lambda out, now: self.state.decide_pull(
            group, topic, queue_id, client, max_count, now, self.settings.offsets_retention_ms,
            out))
        return result

    def commit(
        self, group: str, topic: str, queue_id: int, offset: int, *, client: str | None = None,
        generation: int | None = None,
    ) -> CommitResult:
        from ledger.commands import check_commit

        check_commit(group, topic, queue_id, offset, client, generation)
        result, _ = self._run(lambda out, now: self.state.decide_commit(
            group, topic, queue_id, offset, client, generation, now,
            self.settings.offsets_retention_ms, out))
        return result

    def committed(self, group: str, topic: str, queue_id: int) -> int | None:
        """Current committed offset from memory (the microsecond lookup)."""
        return self.state.committed((group, topic, queue_id), self.now_ms())

    def sync(self, entries: Iterable[tuple[str, str, int, int]], *, source: str,
             broadcast_groups: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Overwrite offsets from a snapshot (one batch, all or nothing)."""
        check_name(source.replace(":", "_").replace("/", "_") or "x", "sync source")
        rows = []
        for group, topic, queue_id, offset in entries:
            rows.append((check_name(group, "group"), check_name(topic, "topic"),
                         check_queue_id(queue_id), check_offset(offset)))
        bgroups = sorted(set(broadcast_groups))

        def decide(out: EventBuffer, now: int) -> list:
            for g in bgroups:
                if not self.state.is_broadcast(g):
                    self.state.decide_group_set(g, now, out, mode="broadcast",
                                                actor=f"sync:{source}")
            return self.state.decide_sync(rows, source, now, out)

        changes, _ = self._run(decide)
        return [{"consumer_group": g, "topic": t, "queue_id": q, "from_offset": a, "to_offset": b}
                for g, t, q, a, b in changes]

    # ------------------------------------------------------------------ reset
    def reset(
        self, group: str, scenario: Scenario, *, scope: Scope | None = None,
        targets: dict[tuple[str, str, int], int] | None = None, backward_only: bool = False,
        actor: str | None = None, reason: str | None = None, now_ms: int | None = None,
    ) -> ResetPlan:
        """Plan a reset (dry run); `.execute()` applies it. `now_ms`: the ledger time to plan at
        (an apply line's `ts`), else the clock."""
        check_name(group, "group")
        if actor is not None:
            check_name(actor, "actor")
        now = self.now_ms() if now_ms is None else now_ms
        skipped: list[tuple[str, int]] = []
        if scenario.mode == "from_file":
            if targets is None:
                raise InvalidInput("reset --from-file needs targets")
            keys = sorted(k for k in targets if k[0] == group)
        else:
            if scope is None:
                raise InvalidInput("reset needs a scope: --topic T, --topic T:0,1 or --all-topics")
            keys = scope_keys(self.state, group, scope)
        if scenario.mode == "to_state_at":
            at = self.state_at(ts=scenario.value, group=group)
            past = {(r["consumer_group"], r["topic"], r["queue_id"]): r["committed_offset"]
                    for r in at.to_pylist()}
            skipped = [(k[1], k[2]) for k in keys if k not in past]
            targets = past
        items = plan_reset(self.state, group, keys, scenario, now, backward_only=backward_only,
                           targets=targets)
        return ResetPlan(self, group, scenario, tuple(items), actor, reason, backward_only,
                         tuple(skipped))

    def _execute_plan(self, plan: ResetPlan, *, force: bool = False) -> int:
        detail = reset_detail(plan.scenario, plan.reason, plan.backward_only)
        self._enforce_policy(plan, detail, force, self.now_ms())
        _, last = self._run(lambda out, now: self.state.decide_reset(
            plan.items, plan.actor, detail, now, out))
        return last

    def _enforce_policy(self, plan: ResetPlan, detail: str, force: bool, now: int) -> None:
        """Refuse (and record as `reset_refused`) a reset the policy file does not allow."""
        policy = ResetPolicy.load(self.root)
        if policy == ResetPolicy():
            return
        recent = 0
        if policy.resets_per_group is not None:
            row = self._ready_view().con.execute(
                "SELECT count(DISTINCT ts) FROM events WHERE kind = 'reset' "
                "AND consumer_group = ? AND ts >= ?", [plan.group, now - policy.window_ms],
            ).fetchall()
            recent = row[0][0] if row else 0
        refusal = policy.refusal(actor=plan.actor, group=plan.group, items=plan.items,
                                 scenario=plan.scenario, now_ms=now, recent_resets=recent,
                                 force=force)
        if refusal is None:
            return
        rule, message = refusal
        refused = json.loads(detail) | {"refused_by": rule, "message": message}
        self._run(lambda out, now: self.state.emit(out, ResetRefused(
            ts=now, consumer_group=plan.group, actor=plan.actor,
            detail=json.dumps(refused, separators=(",", ":")))))
        raise RefusedError("policy", f"reset refused by policy rule {rule}: {message}")

    # ------------------------------------------------------------------ retention
    def retention(
        self, *, offsets_retention_ms: int | None = None, log_retention_ms: int | None = None,
    ) -> dict[str, Any]:
        """Expire idle offsets; retire old segments already covered by a checkpoint."""
        ret = offsets_retention_ms or self.settings.offsets_retention_ms
        expired, _ = self._run(lambda out, now: self.state.decide_expire_all(now, ret, out))
        retired: dict[str, Any] = {"segments_deleted": 0}
        if log_retention_ms is not None:
            if not self.log.checkpoints() or self.log.checkpoints()[-1] < self.log.next_seq:
                self.log.roll()
                self._checkpoint()
            covered = self.log.checkpoints()[-1]
            r = self.log.retain(covered_seq=covered, age_ms_max=log_retention_ms)
            retired = {"segments_deleted": len(r.deleted), "log_start_seq": self.log.start_seq}
        return {"offsets_expired": expired, **retired}

    # ------------------------------------------------------------------ batch apply
    def apply(self, commands: Iterable[Any] | pa.Table | pa.RecordBatch) -> Iterator[dict[str, Any]]:
        """Apply commands in batches; yield one result per command, each only once its events are
        durable. Commands are dicts (or decode errors), or an Arrow table with one column per
        field (null: absent), which folds column-wise (ledger/columnar.py)."""
        self._check_writable()
        if isinstance(commands, pa.Table | pa.RecordBatch):
            from ledger.columnar import apply_table

            return itertools.chain.from_iterable(
                apply_table(self, commands, self.settings.apply_column_batch_commands))
        return self._apply_dicts(commands)

    def apply_arrow(self, commands: pa.Table | pa.RecordBatch) -> pa.Table:
        """`apply` for bulk loads: Arrow commands in, Arrow results out (ledger.columnar's
        RESULT_SCHEMA, one row per line, in line order), returned once every event is durable.
        The same events and results as `apply`, without a Python dict per line."""
        from ledger.apply_results import RESULT_SCHEMA
        from ledger.columnar import apply_table

        self._check_writable()
        if not isinstance(commands, pa.Table | pa.RecordBatch):
            raise InvalidInput(f"apply_arrow takes a pyarrow Table or RecordBatch, not "
                               f"{type(commands).__name__}")
        parts = list(apply_table(self, commands, self.settings.apply_column_batch_commands,
                                 as_arrow=True))
        return pa.concat_tables(parts) if parts else RESULT_SCHEMA.empty_table()

    def _apply_dicts(self, commands: Iterable[Any]) -> Iterator[dict[str, Any]]:
        from ledger.commands import fast_command, run_command

        batch_max = self.settings.apply_batch_commands
        results: list[dict[str, Any]] = []
        last_event: list[int] = []  # per result: index of its last event in the batch, or -1
        events = EventBuffer()
        rows = events.rows
        for line_no, cmd in enumerate(commands, start=1):
            before = len(rows)
            result = fast_command(self, cmd, line_no, events) if type(cmd) is dict else None
            if result is None:
                if rows and type(cmd) is dict and cmd.get("op") == "reset":
                    # a reset plans against the log (to-state-at): make the batch durable first
                    yield from self._flush_apply(results, last_event, events)
                    results, last_event, events = [], [], EventBuffer()
                    rows, before = events.rows, 0
                result = run_command(self, cmd, line_no, events)
            results.append(result)
            last_event.append(len(rows) - 1 if len(rows) > before else -1)
            if len(results) >= batch_max:
                yield from self._flush_apply(results, last_event, events)
                results, last_event, events = [], [], EventBuffer()
                rows = events.rows
        yield from self._flush_apply(results, last_event, events)

    def _flush_apply(self, results: list[dict[str, Any]], last_event: list[int],
                     events: EventBuffer) -> Iterator[dict[str, Any]]:
        from ledger.apply_results import set_seqs

        first = self._append(events)
        set_seqs(results, [first + i if i >= 0 else -1 for i in last_event])
        yield from results

    # ------------------------------------------------------------------ reads
    def _ready_view(self) -> View:
        self._settle_log()
        self.flush_view()
        self.view.set_clock(self.now_ms())
        segs = tuple(self.log.segment_paths())
        self.view.refresh_events(segs, self.log.tail())
        return self.view

    def sql(self, query: str) -> pa.Table:
        """Read-only SQL over offsets, client_offsets, queues, groups, progress, events."""
        from ledger.commands import check_read_only_sql

        check_read_only_sql(query)
        view = self._series_view()
        try:
            return arrow_result(view.con.execute(query))
        except Exception as e:  # duckdb raises many types; the message names the problem
            raise InvalidInput(f"sql error: {str(e).splitlines()[0]}") from None

    def _series_view(self) -> View:
        """The view ready for reads, with the `lag_series` SQL macro (ledger/lag_sql.py)."""
        from ledger.lag_sql import install_lag_series

        view = self._ready_view()
        start = self.log.start_seq
        cps = [c for c in self.log.checkpoints() if c <= start] if start > 0 else []
        install_lag_series(view.con, self.log.checkpoint_path(cps[-1]) if cps else None)
        return view

    def _query(self, query: str, params: list | None = None) -> list[dict[str, Any]]:
        view = self._ready_view()
        return arrow_result(view.con.execute(query, params or [])).to_pylist()

    def progress(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        check_name(group, "group")
        cond, params = "consumer_group = ?", [group]
        if topic is not None:
            cond += " AND topic = ?"
            params.append(check_name(topic, "topic"))
        return self._query(
            "SELECT topic, queue_id, min_offset, max_offset, committed_offset, pulled_offset, "
            "lag, lag_ms, inflight, ready, generation, last_update_ts AS last_update, "
            "behind_retention "
            f"FROM progress WHERE {cond} ORDER BY topic, queue_id", params)

    def lag(
        self, *, group: str | None = None, topic: str | None = None, at_ms: int | None = None,
        window: int = 10, allowed_lag: int = 0,
    ) -> list[dict[str, Any]]:
        """Lag health and time lag per group at ledger time `at_ms` (default now): the document
        of `lag --json` (ledger/lag.py); `topic` is `T` or `T:0,2`."""
        from ledger.lag import check_at, health_settings, lag_document, lag_scope

        scope, settings, at = lag_scope(group, topic), health_settings(window, allowed_lag), check_at(at_ms)
        self._settle_log()
        return lag_document(self, scope, self.now_ms() if at is None else at, settings)

    def lag_series(
        self, *, since_ms: int, until_ms: int, every_ms: int, group: str | None = None,
        topic: str | None = None,
    ) -> list[dict[str, Any]]:
        """Lag and time lag per queue at every `every_ms` from `since_ms` to `until_ms` (for
        charts): the document of `lag --since --until --every --json`."""
        from ledger.lag import check_series, lag_scope, series_document

        scope, (since, until, every) = lag_scope(group, topic), check_series(since_ms, until_ms, every_ms)
        self._check_history_from(since)
        return series_document(self, scope, since, until, every)

    def groups(self) -> list[dict[str, Any]]:
        return self._query(
            "WITH names AS (SELECT consumer_group FROM groups UNION "
            "SELECT consumer_group FROM progress) "
            "SELECT n.consumer_group, coalesce(g.mode, 'clustering') AS mode, "
            "count(p.queue_id)::BIGINT AS queues, sum(p.lag)::BIGINT AS lag, "
            "max(p.last_update_ts) AS last_update "
            "FROM names n LEFT JOIN groups g USING (consumer_group) "
            "LEFT JOIN progress p USING (consumer_group) GROUP BY ALL ORDER BY 1")

    def queues(self, topic: str | None = None) -> list[dict[str, Any]]:
        cond, params = "", []
        if topic is not None:
            cond, params = "WHERE topic = ?", [check_name(topic, "topic")]
        return self._query(
            f"SELECT topic, queue_id, min_offset, max_offset FROM queues {cond} "
            "ORDER BY topic, queue_id", params)

    def history(
        self, *, group: str | None = None, topic: str | None = None, queue_id: int | None = None,
        kind: str | None = None, since_ms: int | None = None, until_ms: int | None = None,
        limit: int | None = None,
    ) -> pa.Table:
        """Matching events, oldest first; `limit` keeps the newest N. Key filters and the upper
        time bound apply before prev_offset is derived (they keep every event's predecessor),
        the rest after."""
        pre, pre_params, post, post_params = [], [], [], []
        for col, val in (("consumer_group", group), ("topic", topic), ("queue_id", queue_id)):
            if val is not None:
                pre.append(f"{col} = ?")
                pre_params.append(val)
        if until_ms is not None:
            pre.append("ts <= ?")
            pre_params.append(until_ms)
        if kind is not None:
            post.append("kind = ?")
            post_params.append(kind)
        if since_ms is not None:
            self._check_history_from(since_ms)
            post.append("ts >= ?")
            post_params.append(since_ms)
        view = self._ready_view()
        paths = [s.path for s in self.log.segments() if until_ms is None or s.ts_min <= until_ms]
        select = events_select(segments_source(paths, "events_tail"),
                               ("WHERE " + " AND ".join(pre)) if pre else "")
        where = ("WHERE " + " AND ".join(post)) if post else ""
        inner = f"SELECT * FROM ({select}) {where} ORDER BY seq DESC"
        if limit is not None:
            inner += f" LIMIT {int(limit)}"
        return arrow_result(view.con.execute(f"SELECT * FROM ({inner}) ORDER BY seq",
                                       pre_params + post_params))

    def _check_history_from(self, ts: int) -> None:
        if self.log.start_seq > 0:
            segs = self.log.segments()
            earliest = segs[0].ts_min if segs else self.state.last_ts
            if ts < earliest:
                raise HistoryUnavailable(
                    f"history before {earliest} ms (seq {self.log.start_seq}) was retired by log "
                    f"retention; the earliest point still answerable is seq {self.log.start_seq}")

    def offsets_for_time(self, topic: str, ts: int) -> list[dict[str, Any]]:
        """Per queue of `topic`: the first message stored at or after `ts` (None when none)."""
        check_name(topic, "topic")
        return [{"topic": t, "queue_id": q, "offset": qs.offset_for_time(ts)}
                for (t, q), qs in sorted(self.state.queues.items()) if t == topic]

    def state_at(
        self, *, ts: int | None = None, seq: int | None = None, group: str | None = None,
    ) -> pa.Table:
        """Committed offsets as of ledger time `ts` (events with ts <= it) or log position `seq`
        (events before it): from the newest checkpoint at or before it plus the log, in DuckDB."""
        if (ts is None) == (seq is None):
            raise InvalidInput("state_at needs exactly one of ts or seq")
        self._settle_log()
        end = self.log.next_seq
        if seq is not None:
            seq_to = min(check_offset(seq, "seq"), end)
            at_ts = self._ts_before(seq_to)
        else:
            seq_to = self._first_seq_after(ts)
            at_ts = ts
        cps = [c for c in self.log.checkpoints() if c <= seq_to]
        start = self.log.start_seq
        if not cps and start > 0:
            raise HistoryUnavailable(
                f"state before seq {start} is no longer answerable (log retention); "
                f"the earliest point still answerable is seq {start}")
        cp = cps[-1] if cps else 0
        cp_path = self.log.checkpoint_path(cp) if cps else None
        con, source = self._state_at_source(cp, seq_to)
        try:
            return state_at_table(con, source, cp_path, cp, seq_to, at_ts, group)
        finally:
            con.close()

    def _state_at_source(
        self, seq_from: int, seq_to: int,
    ) -> tuple[duckdb.DuckDBPyConnection, str]:
        """A cursor of the view's database of its own (the tail registered there when it holds
        events [seq_from, seq_to)) and a SELECT over the sealed segments and that tail. No view
        flush: only the log and the checkpoints are read."""
        tail = self.log.tail()  # the active segment (state_at listed any running seal first)
        self.log.segment_paths()  # each sealed file's crc32c, once per process (DuckDB reads)
        paths = [s.path for s in self.log.segments() if s.end_seq > seq_from and s.base_seq < seq_to]
        con = self.view.con.cursor()
        tail_name = None
        if tail.num_rows:
            seqs = tail.column("seq")
            if seqs[0].as_py() < seq_to and seqs[-1].as_py() >= seq_from:
                tail_name = STATE_AT_TAIL
                con.register(tail_name, tail)
        return con, segments_source(paths, tail_name)

    def _first_seq_after(self, ts: int) -> int:
        """The first seq whose ts is > `ts` (ts never goes backwards along the log)."""
        segments = self.log.segments()
        for s in segments:
            if s.ts_max > ts:
                return self._first_seq_after_in(s, ts)
        tail = self.log.tail()
        base = segments[-1].end_seq if segments else self.log.start_seq
        return _first_after(tail.select(["seq", "ts"]), ts, base if tail.num_rows else
                            self.log.next_seq)

    def _first_seq_after_in(self, segment: SegmentInfo, ts: int) -> int:
        """The first seq of sealed `segment` (ts_max > `ts`) whose ts is > `ts`: the Parquet
        statistics of ts name the first row group holding one, and only it is read."""
        found = _row_group_after(segment.path, ts)
        if found is not None:
            t = self.log.read(seq_gte=found[0], seq_lt=found[1], columns=["seq", "ts"])
            if t.num_rows and t.column("ts")[-1].as_py() > ts:
                return _first_after(t, ts, found[0])
        # statistics missing, or the file changed under us: the whole segment
        t = self.log.read(seq_gte=segment.base_seq, seq_lt=segment.end_seq, columns=["seq", "ts"])
        return _first_after(t, ts, segment.base_seq)

    def _ts_before(self, seq_to: int) -> int:
        if seq_to <= self.log.start_seq:
            return 0
        t = self.log.read(seq_gte=seq_to - 1, seq_lt=seq_to, columns=["ts"])
        return t.column("ts")[0].as_py() if t.num_rows else self.state.last_ts

    def snapshot(self, group: str | None = None) -> list[tuple[str, str, int, int, int]]:
        """Current committed offsets from memory, same shape as `state_at` rows."""
        return snapshot_rows(self.state, self.now_ms(), group)

    def rebuild(self) -> None:
        """Recreate the view from the newest checkpoint plus the log."""
        self._check_writable()
        self.state = _load_state(self.log)
        self.view.write_full(self.state, self.log.next_seq)

    def export_csv(self, group: str) -> str:
        """Kafka's reset CSV (topic,partition,offset) of the group's current committed offsets."""
        check_name(group, "group")
        rows = snapshot_rows(self.state, self.now_ms(), group)
        return "".join(f"{t},{q},{o}\n" for _, t, q, o, _ in rows)


def _first_after(t: pa.Table, ts: int, default: int) -> int:
    import pyarrow.compute as pc

    if t.num_rows == 0:
        return default
    mask = pc.greater(t.column("ts"), ts)
    idx = pc.index(mask, True).as_py()
    if idx < 0:
        return t.column("seq")[-1].as_py() + 1
    return t.column("seq")[idx].as_py()


def _row_group_after(path: Path, ts: int) -> tuple[int, int] | None:
    """Seqs [lo, hi) of the first row group of a sealed segment whose ts maximum is > `ts`,
    from the footer's statistics (ts never decreases along the log, so every earlier row has
    ts <= it); None when the footer cannot tell."""
    import pyarrow.parquet as pq

    try:
        md = pq.read_metadata(str(path))
        names = md.schema.names
        seq_col, ts_col = names.index("seq"), names.index("ts")
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            ts_stats = rg.column(ts_col).statistics
            if ts_stats is None or not ts_stats.has_min_max:
                return None
            if ts_stats.max > ts:
                seq_stats = rg.column(seq_col).statistics
                if seq_stats is None or not seq_stats.has_min_max:
                    return None
                return int(seq_stats.min), int(seq_stats.max) + 1
    except (OSError, ValueError, pa.ArrowException):
        return None
    return None


def log_settings(cfg: LedgerSettings) -> LogSettings:
    return LogSettings(
        segment_events_max=cfg.segment_events_max, segment_bytes_max=cfg.segment_bytes_max,
        segment_age_ms_max=cfg.segment_age_ms_max, durability=cfg.durability,
        seal_in_background=True,
    )


def _load_state(log: SegmentedLog) -> State:
    """Newest checkpoint at or before the log end, then the log from there."""
    cps = [c for c in log.checkpoints() if c <= log.next_seq]
    state = State()
    start = 0
    if cps:
        start = cps[-1]
        state = table_to_state(log.read_checkpoint(start))
        if state.events_applied != start:  # a checkpoint of another log, or a damaged one
            raise CorruptSegmentError(
                log.checkpoint_path(start), 0, start, f"holds the state after "
                f"{state.events_applied} events, not {start}: run `offset-ledger verify`")
    elif log.start_seq > 0:
        raise HistoryUnavailable(
            f"log starts at seq {log.start_seq} but no checkpoint covers it: cannot rebuild state")
    data = log.read(seq_gte=start)
    if data.num_rows:
        state.apply_columns(data.to_pydict())
    return state

