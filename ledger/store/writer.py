"""`Writer`: the log, the fold's state and the DuckDB view of one data directory, and the clock.

Everything that makes events durable or derives data from them lives here, below the commands
and the folds that produce events: append (one fsync per batch), checkpoints, view flushes,
listing a background seal. The view and the checkpoints never hold what the log does not: they
are written only while the state equals the log (every folded event appended), and a batch that
fails after folding marks the writer unusable until it is reopened from disk.

A reader (`readonly`) is the same object over a consistent snapshot: the manifest's segments, the
newest checkpoint and the intact tail, with an in-memory view; it never takes the writer lock.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ledger.errors import HistoryUnavailable, InvalidInput, LedgerError, LedgerUnusable
from ledger.fold.events import EVENT_SCHEMA, EventBuffer
from ledger.fold.state import State
from ledger.store import settings as settings_mod
from ledger.store import tier
from ledger.store.checkpoint import state_to_table, table_to_state
from ledger.store.replay import fold_events
from ledger.store.settings import LedgerSettings
from ledger.store.view import View, stored_position
from ledger.timeparse import iso
from storage import (
    CorruptSegmentError,
    FileSystem,
    LogSettings,
    SegmentedLog,
    StorageError,
    Witness,
)

logger = logging.getLogger(__name__)

VIEW_FILE = "view.duckdb"
CHECKPOINT_TS_KEY = b"offset_ledger.last_ts"
#: Checkpoint rows read by point-in-time questions (`Writer.checkpoint_keys`).
CHECKPOINT_KEY_ROWS = ("group", "position", "client")
#: Checkpoints whose key rows a reader keeps.
CHECKPOINTS_KEPT = 4


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


#: Sealed segments are clustered by group (DESIGN.md, Storage): one group's rows of a segment
#: sit in one or two row groups, in seq order, so a group's history, state at a time and lag
#: windows read only them (and a time window inside them prunes by their statistics).
CLUSTER_COLUMNS = ("consumer_group",)


def log_settings(cfg: LedgerSettings) -> LogSettings:
    return LogSettings(
        segment_events_max=cfg.segment_events_max, segment_bytes_max=cfg.segment_bytes_max,
        segment_age_ms_max=cfg.segment_age_ms_max, durability=cfg.durability,
        seal_in_background=True, cluster_columns=CLUSTER_COLUMNS,
    )


class Writer:
    """One data directory's log, state, view and clock; the only place events become durable."""

    def __init__(self, root: Path, log: SegmentedLog, state: State, view: View,
                 settings: LedgerSettings, clock: Callable[[], int], readonly: bool,
                 backfill: bool = False) -> None:
        self.root = root
        self.log = log
        self.state = state
        self.view = view
        self.settings = settings
        self.clock = clock
        self.readonly = readonly
        #: This handle's commands may carry a `ts` beyond the clock skew (simulations, replays).
        self.backfill = backfill
        self.unusable: str | None = None
        self.last_append_s = 0.0  # how long the last append took (write + fsync): metrics
        self._batches_since_flush = 0
        self._last_flush = time.monotonic()
        # a seal listed by a read (`settle`): the next append checkpoints at it
        self._seal_without_checkpoint = False
        self._checkpoint_keys: OrderedDict[int, pa.Table] = OrderedDict()

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def open(cls, root: Path, *, clock: Callable[[], int], fs: FileSystem | None = None,
             backfill: bool = False, read_index: bool = True, take_over: bool = False,
             **settings: Any) -> Writer:
        """Open (creating if needed) a data directory as its single writer; `backfill`: its
        commands may carry times ahead of the clock (see `ts_limit_ms`); `take_over`: a new
        data directory may attach to an S3 prefix that already holds a log."""
        cfg = settings_mod.merged(root, settings)
        before = settings_mod.load(root)
        tier.check_unmoved(root, before, cfg)
        if fs is None:
            tier.check_attach(root, before, cfg, take_over)
        log = SegmentedLog.open(root, EVENT_SCHEMA, log_settings(cfg), clock=clock, writer=True,
                                fs=tier.filesystem(root, cfg, fs),
                                witness=lambda: view_witness(root), read_index=read_index)
        try:
            changed = bool(settings) and any(v is not None for v in settings.values())
            if cfg.prev_offset_stored_from_seq is None:
                # the first writer that stores prev_offset: events from here on carry it
                cfg = msgspec.structs.replace(cfg, prev_offset_stored_from_seq=log.next_seq)
                changed = True
            if changed:
                settings_mod.save(root, cfg)  # only the lock holder may change them
            state = load_state(log)
            view = View.open(root / VIEW_FILE)
            writer = cls(root, log, state, view, cfg, clock, readonly=False, backfill=backfill)
            if view.position() != log.next_seq:
                view.write_full(state, log.next_seq)
            else:
                state.clear_dirty()
            return writer
        except BaseException:
            log.close()
            raise

    @classmethod
    def open_reader(cls, root: Path, *, clock: Callable[[], int],
                    fs: FileSystem | None = None, read_index: bool = True) -> Writer:
        """A consistent read-only snapshot with an in-memory view (the file is the writer's)."""
        if not (root / "log").exists():
            raise InvalidInput(f"no ledger at {root}: nothing written yet")
        cfg = settings_mod.load(root)
        log = SegmentedLog.open(root, EVENT_SCHEMA, None, clock=clock, writer=False,
                                fs=tier.filesystem(root, cfg, fs), read_index=read_index)
        try:
            state = load_state(log)
            view = View.open(None)
            view.write_full(state, log.next_seq)
        except BaseException:
            log.close()
            raise
        return cls(root, log, state, view, cfg, clock, readonly=True)

    def catch_up(self) -> int:
        """A reader follows the log: take the manifest and tail as they are now and fold the
        events appended since (only durable ones: the writer acknowledges after its fsync);
        the in-memory view takes the touched rows when a read needs it. Returns the events
        folded. A
        reader left behind the log start (log retention) starts again from the checkpoint."""
        if not self.readonly:
            return 0
        if self.settings.prev_offset_stored_from_seq is None:  # a writer may have upgraded it
            self.settings = settings_mod.load(self.root)
        self.log.refresh()
        if self.state.events_applied < self.log.start_seq:
            self.state = load_state(self.log)
            self.view.write_full(self.state, self.log.next_seq)
            return self.log.next_seq
        start = self.state.events_applied
        if self.log.next_seq <= start:
            return 0
        events = self.log.read(seq_gte=start)
        fold_events(self.state, events)
        # the in-memory view follows when a read needs it (`ready_view`): a history read or a
        # lookup from memory pays nothing for it
        return events.num_rows

    def close(self) -> None:
        """Flush the view, list a running seal and checkpoint it, release the log. The view
        and the checkpoint are written first, while a seal still encodes on its thread (none
        changes what another writes; the checkpoint is of the log's end, WAL rows or Parquet
        alike): a CLI's close waited for them one after the other."""
        try:
            if not self.readonly and self.unusable is None:
                try:
                    self.flush_view()
                    if self.log.sealing:
                        self._checkpoint_derived()
                finally:  # (a view that cannot be written still gets the seal listed)
                    self.settle(checkpoint=True)
        finally:
            self.view.close()
            self.log.close()

    def checkpoint_keys(self, seq: int) -> pa.Table:
        """The checkpoint at `seq`'s rows of groups, positions and broadcast clients (what
        point-in-time reads take from it; not its queues' appends, which grow with the
        ledger), read once and kept for the last few checkpoints asked about."""
        found = self._checkpoint_keys.get(seq)
        if found is None:
            table = self.log.read_checkpoint(seq)
            found = table.filter(pc.is_in(table.column("row"),
                                          value_set=pa.array(CHECKPOINT_KEY_ROWS)))
            self._checkpoint_keys[seq] = found
            if len(self._checkpoint_keys) > CHECKPOINTS_KEPT:
                self._checkpoint_keys.popitem(last=False)
        else:
            self._checkpoint_keys.move_to_end(seq)
        return found

    @property
    def prev_offset_stored_from(self) -> int | None:
        """The first seq whose events store prev_offset; None: none does (reads derive it)."""
        return self.settings.prev_offset_stored_from_seq

    # ------------------------------------------------------------------ time and state
    def now_ms(self) -> int:
        """Ledger time: never goes backwards (ts = max(clock, last ts))."""
        return max(self.clock(), self.state.last_ts)

    def ts_limit_ms(self) -> int:
        """The latest `ts` a sender that may not backfill may give: the clock plus the clock
        skew (DESIGN.md, Security rules). Ledger time never goes back, so one ts far ahead would
        stamp every later event with it and expire every other group's offsets."""
        return self.clock() + self.settings.clock_skew_ms

    def check_ts(self, ts_ms: int, given: object, limit_ms: int | None) -> int:
        """`ts_ms` (parsed from `given`) when it is at most `limit_ms` (None: the sender may
        backfill); else InvalidInput naming the value, the clock and the skew."""
        if limit_ms is None or ts_ms <= limit_ms:
            return ts_ms
        skew = self.settings.clock_skew_ms
        shown = repr(given) if isinstance(given, str) else str(given)
        raise InvalidInput(
            f"invalid ts {shown} ({iso(ts_ms)}): more than clock_skew_ms {skew} ahead of the "
            f"ledger's clock ({iso(limit_ms - skew)}); the ledger's time never goes back, so "
            "only a sender that may backfill gives later times")

    def check_writable(self) -> None:
        if self.readonly:
            raise LedgerError(f"ledger at {self.root} is open read-only (another process writes)")
        if self.unusable is not None:
            raise LedgerUnusable(self.unusable)

    def in_step(self) -> bool:
        """The state holds exactly the log's events (no folded event waits for its append)."""
        return self.state.events_applied == self.log.next_seq

    def fail(self, error: BaseException) -> None:
        """A batch failed after folding: the state may be ahead of the log. Nothing derived is
        written from it again; the ledger must be reopened from disk."""
        if self.unusable is None:
            self.unusable = (f"a write failed ({type(error).__name__}: {error}); the in-memory "
                             "state may be ahead of the log: reopen the ledger")

    # ------------------------------------------------------------------ appends
    def append(self, events: EventBuffer | pa.RecordBatch,
               before_derived: Callable[[], None] | None = None) -> int:
        """Make `events` (already folded into the state) durable; returns their first seq.
        `before_derived` runs before a checkpoint or view flush reads the state (the column
        path writes its deferred positions back then)."""
        if isinstance(events, EventBuffer):
            if not events:
                return self.log.next_seq
            events = events.to_record_batch(self.log.next_seq)
        if events.num_rows == 0:
            return self.log.next_seq
        started = time.perf_counter()
        try:
            result = self.log.append(events)
        except BaseException as e:
            self.fail(e)
            raise
        self.last_append_s = time.perf_counter() - started
        # The batch is durable from here on: a failing checkpoint or view flush must not fail
        # the append (a retrying client would write it twice). Both are derived and retried:
        # the next seal or interval checkpoints again, and touched rows stay dirty until a
        # flush succeeds (every read flushes first, and reports the error then).
        newest = self.log.newest_checkpoint_seq()
        checkpoint = (result.sealed or self._seal_without_checkpoint
                      or (self.log.next_seq - (newest or 0)
                          >= self.settings.checkpoint_interval_events))
        self._batches_since_flush += 1
        flush = (self._batches_since_flush >= self.settings.view_flush_batches
                 or (time.monotonic() - self._last_flush) * 1000 >= self.settings.view_flush_ms)
        if (checkpoint or flush) and before_derived is not None:
            before_derived()
        try:
            if checkpoint:  # the state's table built here, its file written on the log's thread
                self.checkpoint(background=True)
            if flush:  # the DuckDB part on the view's thread: no stall of the next append
                self.flush_view(background=True)
        except (StorageError, OSError, duckdb.Error) as e:
            logger.warning("derived data not written after a durable append (retried later): %s", e)
        return result.first_seq

    def settle(self, *, checkpoint: bool = False) -> None:
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
                self.checkpoint()
        except (StorageError, OSError) as e:
            logger.warning("a background seal could not be listed (retried later): %s", e)

    def _checkpoint_derived(self) -> None:
        """The checkpoint at the log end, its file written on the log's thread; a failure is
        logged (checkpoints are derived: `settle` or the next seal writes one again)."""
        try:
            self.checkpoint(background=True)
        except (StorageError, OSError) as e:
            logger.warning("checkpoint not written (retried later): %s", e)

    def checkpoint(self, *, background: bool = False) -> None:
        """The state at the log end as a checkpoint; only while the state equals the log.
        `background`: its file is written on the log's checkpoint thread (listed once durable;
        `log.checkpoints()` waits for it), so the next append need not wait. In the foreground,
        one listed at the log end already (close's, taken beside the last seal) is not built
        again; one that failed is."""
        if not self.in_step():
            logger.warning("checkpoint skipped: the state holds events not yet in the log")
            return
        if not background and self.log.checkpoints()[-1:] == [self.log.next_seq]:
            self._seal_without_checkpoint = False
            return
        table = state_to_table(self.state)
        meta = {CHECKPOINT_TS_KEY: str(self.state.last_ts).encode()}
        write = self.log.start_checkpoint if background else self.log.write_checkpoint
        write(self.log.next_seq, table.replace_schema_metadata(meta))
        self._seal_without_checkpoint = False

    def flush_view(self, *, background: bool = False) -> None:
        """Write the touched rows and the log position to the view (a reader's own, in memory,
        or the file); only while the state equals the log, so that the view never holds what
        the log does not. `background`: the rows are taken now, written by the view's thread
        (the next flush, or a read's, waits for it)."""
        if not self.in_step() or self.unusable is not None:
            return
        if background:
            self.view.flush_in_background(self.state, self.log.next_seq)
        else:
            self.view.flush(self.state, self.log.next_seq)
        self._batches_since_flush = 0
        self._last_flush = time.monotonic()

    def ready_view(self) -> View:
        """The view caught up with the log, its clock set, `events` over every segment."""
        self.settle()
        self.flush_view()
        self.view.set_clock(self.now_ms())
        self.view.refresh_events(tuple(self.log.segment_paths()), self.log.tail(),
                                 self.prev_offset_stored_from)
        return self.view

    def rebuild(self) -> None:
        """Recreate the state and the view from the newest checkpoint plus the log."""
        self.check_writable()
        self.state = load_state(self.log)
        self.view.write_full(self.state, self.log.next_seq)


def view_witness(root: Path) -> Witness | None:
    """What the view proves acknowledged: it is flushed only while the state equals the log, after
    the append (and its fsync under durability "always"), so every event before its position
    was acknowledged. A damaged WAL frame below it is corruption, never a torn tail to cut."""
    position = stored_position(root / VIEW_FILE)
    return None if position is None else Witness(position, f"the view {VIEW_FILE}")


def load_state(log: SegmentedLog) -> State:
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
    fold_events(state, log.read(seq_gte=start))
    return state
