"""Committed offsets as of a ledger time or a log position: the newest checkpoint at or before
it plus the log, in DuckDB (`timeline.state_at_table`), or for one group that clusters in Arrow
(`keyed_state`). Reads only the log and the checkpoints: the view is not flushed for it.

Ledger time never goes backwards along the log, so "events at or before T" is a seq prefix:
its end is found from the Parquet footers' ts statistics (one row group read), not a scan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ledger.errors import HistoryUnavailable, InvalidInput
from ledger.limits import check_offset
from ledger.reads.keyed_state import keyed_state
from ledger.reads.timeline import (
    KEYED_EVENTS,
    STATE_AT_CHECKPOINT,
    STATE_AT_TAIL,
    state_at_table,
)
from ledger.store.view import segments_source
from ledger.store.writer import CHECKPOINT_TS_KEY, Writer
from ledger.timeparse import iso
from storage import SegmentedLog


@dataclass(frozen=True, slots=True)
class Point:
    """Where a point-in-time answer comes from: the checkpoint at `checkpoint` (its file, None
    for the empty start) plus the events [checkpoint, seq_to), read at ledger time `at_ts`."""

    checkpoint: int
    seq_to: int
    at_ts: int
    checkpoint_path: Path | None


def resolve_point(log: SegmentedLog, *, ts: int | None = None, seq: int | None = None
                  ) -> Point:
    """The bounds of the state at ledger time `ts` (events with ts <= it) or before log
    position `seq` (neither: the log end). After log retention a point is answered only when
    it is exact (a checkpoint at or after the log start, or exactly at the point); otherwise
    HistoryUnavailable names the earliest point still answerable. Used by `Ledger.state_at`
    and Spark's replay alike."""
    if ts is not None and seq is not None:
        raise InvalidInput("state_at needs at most one of ts or seq")
    start = log.start_seq
    if ts is not None:
        check_state_answerable(log, ts)
        seq_to, at_ts = first_seq_after(log, ts), ts
    else:
        seq_to = log.next_seq if seq is None else min(check_offset(seq, "seq"), log.next_seq)
        at_ts = ts_before(log, seq_to)
    cps = [c for c in log.checkpoints() if c <= seq_to]
    cp = cps[-1] if cps else 0
    if start > 0 and (not cps or (cp < start and cp != seq_to)):
        raise HistoryUnavailable(
            f"state before seq {seq_to} is no longer answerable (log retention); the earliest "
            f"point still answerable is seq {start}")
    return Point(cp, seq_to, at_ts, log.checkpoint_path(cp) if cps else None)


def state_at(writer: Writer, *, ts: int | None = None, seq: int | None = None,
             group: str | None = None) -> pa.Table:
    """Committed offsets as of ledger time `ts` (events with ts <= it) or log position `seq`
    (events before it)."""
    if (ts is None) == (seq is None):
        raise InvalidInput("state_at needs exactly one of ts or seq")
    writer.settle()
    point = resolve_point(writer.log, ts=ts, seq=seq)
    groups = None if group is None else [group]
    rows = (checkpoint_rows(writer, point.checkpoint, groups)
            if point.checkpoint_path is not None else None)
    events = None
    if group is not None:
        # one group: its events found by the read index, its checkpoint rows kept by the
        # reader; folded in Arrow unless it is or may be at broadcast (then in DuckDB, over
        # the same events and rows)
        events = group_events(writer.log, point.checkpoint, point.seq_to, [group])
        found = keyed_state(group, events, rows)
        if found is not None:
            return found
    con, source_sql = source(writer, point.checkpoint, point.seq_to, groups, events)
    try:
        checkpoint = None if rows is None else register_checkpoint(con, rows)
        return state_at_table(con, source_sql, checkpoint, point.checkpoint,
                              point.seq_to, point.at_ts, group)
    finally:
        con.close()


def check_state_answerable(log: SegmentedLog, ts: int) -> None:
    """Refuse a state at a time before the earliest one the retained log answers, naming it."""
    earliest = earliest_state_ts(log)
    if earliest is not None and ts < earliest:
        raise HistoryUnavailable(
            f"time {iso(ts)} is before the retained log (log retention); the earliest time "
            f"still answerable is {iso(earliest)} ({earliest} ms)")


def earliest_state_ts(log: SegmentedLog) -> int | None:
    """The earliest ledger time whose state the log still answers exactly; None while the log
    starts at seq 0. The state at T is the newest checkpoint at or before T plus the events
    after it up to T, all retained: so T must reach the first checkpoint at or after the log
    start, and the time of that checkpoint's last event is the first that does."""
    start = log.start_seq
    if start == 0:
        return None
    anchors = [c for c in log.checkpoints() if c >= start]
    if not anchors:
        return None  # nothing answers; resolve_point says so
    last = checkpoint_last_ts(log, anchors[0])
    return last if last is not None else ts_before(log, anchors[0])


def earliest_history_ts(log: SegmentedLog) -> int | None:
    """The earliest `since` whose history the log still holds whole; None while nothing was
    retired: the millisecond after the last retired event (events of that millisecond may be
    retired, so a history from it would miss them)."""
    if log.start_seq == 0:
        return None
    retired = log.retired_ts_max
    if retired is not None:
        return retired + 1
    segments = log.segments()  # a log retired before the manifest recorded it
    return segments[0].ts_min + 1 if segments else earliest_state_ts(log)


def checkpoint_last_ts(log: SegmentedLog, seq: int) -> int | None:
    """The ts of the last event a checkpoint holds (recorded in its metadata)."""
    try:
        meta = pq.read_schema(str(log.checkpoint_path(seq))).metadata or {}
    except (OSError, pa.ArrowException):
        return None
    raw = meta.get(CHECKPOINT_TS_KEY)
    return int(raw) if raw is not None else None


def source(writer: Writer, seq_from: int, seq_to: int, groups: Sequence[str] | None = None,
           events: pa.Table | None = None) -> tuple[duckdb.DuckDBPyConnection, str]:
    """A cursor of the view's database of its own and a SELECT over the events [seq_from,
    seq_to): with `groups`, only theirs, found by the log's read index (the row groups of
    those groups in each segment, the tail's rows of them in memory: `events` when the caller
    read them already) and registered there; without, every sealed segment's Parquet file and
    the tail (registered when it holds events of the range)."""
    log = writer.log
    con = writer.view.con.cursor()
    if groups is not None:
        con.register(KEYED_EVENTS, events if events is not None
                     else group_events(log, seq_from, seq_to, groups))
        return con, f"SELECT * FROM {KEYED_EVENTS}"
    tail = log.tail()  # the active segment (state_at listed any running seal first)
    log.segment_paths()  # each sealed file's crc32c, once per process (DuckDB reads)
    paths = [s.path for s in log.segments() if s.end_seq > seq_from and s.base_seq < seq_to]
    tail_name = None
    if tail.num_rows:
        seqs = tail.column("seq")
        if seqs[0].as_py() < seq_to and seqs[-1].as_py() >= seq_from:
            tail_name = STATE_AT_TAIL
            con.register(tail_name, tail)
    return con, segments_source(paths, tail_name)


def group_events(log: SegmentedLog, seq_from: int, seq_to: int, groups: Sequence[str]
                 ) -> pa.Table:
    """The events [seq_from, seq_to) of `groups`, in seq order, found by the log's read index
    (their row groups in each segment, the tail's rows of them in memory)."""
    return log.read(seq_gte=seq_from, seq_lt=seq_to, where={"consumer_group": list(groups)})


def checkpoint_rows(writer: Writer, seq: int, groups: Sequence[str] | None) -> pa.Table:
    """The key rows of the checkpoint at `seq` (of `groups` only, when given), kept by the
    reader."""
    rows = writer.checkpoint_keys(seq)
    if groups is not None:
        rows = rows.filter(pc.is_in(rows.column("consumer_group"),
                                    value_set=pa.array(list(groups), pa.string())))
    return rows


def register_checkpoint(con: duckdb.DuckDBPyConnection, rows: pa.Table) -> str:
    """`checkpoint_rows` registered on `con` for one query; the relation's name."""
    con.register(STATE_AT_CHECKPOINT, rows)
    return STATE_AT_CHECKPOINT


def first_seq_after(log: SegmentedLog, ts: int) -> int:
    """The first seq whose ts is > `ts` (ts never goes backwards along the log): one
    segment's rows counted by the log's read index, or the tail searched."""
    return log.seq_after_ts(ts)


def ts_before(log: SegmentedLog, seq_to: int) -> int:
    """The ts of the event just before `seq_to` (the time a seq-prefix state is read at);
    at the log start, the last retired event's (0 when there is none)."""
    if seq_to <= log.start_seq:
        return (checkpoint_last_ts(log, seq_to) or 0) if seq_to in log.checkpoints() else 0
    found = log.ts_of_seq(seq_to - 1)
    return found if found is not None else 0


def first_after(t: pa.Table, ts: int, default: int) -> int:
    """The seq of the first row of `t` (seq, ts; ts non-decreasing) with ts > `ts`."""
    if t.num_rows == 0:
        return default
    mask = pc.greater(t.column("ts"), ts)
    idx = pc.index(mask, True).as_py()
    if idx < 0:
        return t.column("seq")[-1].as_py() + 1
    return t.column("seq")[idx].as_py()
