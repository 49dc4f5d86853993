"""Committed offsets as of a ledger time or a log position: the newest checkpoint at or before
it plus the log, in DuckDB (`timeline.state_at_table`). Reads only the log and the checkpoints:
the view is not flushed for it.

Ledger time never goes backwards along the log, so "events at or before T" is a seq prefix:
its end is found from the Parquet footers' ts statistics (one row group read), not a scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ledger.errors import HistoryUnavailable, InvalidInput
from ledger.limits import check_offset
from ledger.reads.timeline import STATE_AT_TAIL, state_at_table
from ledger.store.view import segments_source
from ledger.store.writer import CHECKPOINT_TS_KEY, Writer
from ledger.timeparse import iso
from storage import SegmentedLog, SegmentInfo


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
    con, events = source(writer, point.checkpoint, point.seq_to)
    try:
        return state_at_table(con, events, point.checkpoint_path, point.checkpoint,
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


def source(writer: Writer, seq_from: int, seq_to: int) -> tuple[duckdb.DuckDBPyConnection, str]:
    """A cursor of the view's database of its own (the tail registered there when it holds
    events [seq_from, seq_to)) and a SELECT over the sealed segments and that tail."""
    log = writer.log
    tail = log.tail()  # the active segment (state_at listed any running seal first)
    log.segment_paths()  # each sealed file's crc32c, once per process (DuckDB reads)
    paths = [s.path for s in log.segments() if s.end_seq > seq_from and s.base_seq < seq_to]
    con = writer.view.con.cursor()
    tail_name = None
    if tail.num_rows:
        seqs = tail.column("seq")
        if seqs[0].as_py() < seq_to and seqs[-1].as_py() >= seq_from:
            tail_name = STATE_AT_TAIL
            con.register(tail_name, tail)
    return con, segments_source(paths, tail_name)


def first_seq_after(log: SegmentedLog, ts: int) -> int:
    """The first seq whose ts is > `ts` (ts never goes backwards along the log)."""
    segments = log.segments()
    for s in segments:
        if s.ts_max > ts:
            return _first_seq_after_in(log, s, ts)
    tail = log.tail()
    base = segments[-1].end_seq if segments else log.start_seq
    return first_after(tail.select(["seq", "ts"]), ts, base if tail.num_rows else log.next_seq)


def _first_seq_after_in(log: SegmentedLog, segment: SegmentInfo, ts: int) -> int:
    """The first seq of sealed `segment` (ts_max > `ts`) whose ts is > `ts`: the Parquet
    statistics of ts name the first row group holding one, and only it is read."""
    found = row_group_after(segment.path, ts)
    if found is not None:
        t = log.read(seq_gte=found[0], seq_lt=found[1], columns=["seq", "ts"])
        if t.num_rows and t.column("ts")[-1].as_py() > ts:
            return first_after(t, ts, found[0])
    # statistics missing, or the file changed under us: the whole segment
    t = log.read(seq_gte=segment.base_seq, seq_lt=segment.end_seq, columns=["seq", "ts"])
    return first_after(t, ts, segment.base_seq)


def ts_before(log: SegmentedLog, seq_to: int) -> int:
    """The ts of the event just before `seq_to` (the time a seq-prefix state is read at);
    at the log start, the last retired event's (0 when there is none)."""
    if seq_to <= log.start_seq:
        return (checkpoint_last_ts(log, seq_to) or 0) if seq_to in log.checkpoints() else 0
    t = log.read(seq_gte=seq_to - 1, seq_lt=seq_to, columns=["ts"])
    return t.column("ts")[0].as_py() if t.num_rows else 0


def first_after(t: pa.Table, ts: int, default: int) -> int:
    """The seq of the first row of `t` (seq, ts; ts non-decreasing) with ts > `ts`."""
    if t.num_rows == 0:
        return default
    mask = pc.greater(t.column("ts"), ts)
    idx = pc.index(mask, True).as_py()
    if idx < 0:
        return t.column("seq")[-1].as_py() + 1
    return t.column("seq")[idx].as_py()


def row_group_after(path: Path, ts: int) -> tuple[int, int] | None:
    """Seqs [lo, hi) of the first row group of a sealed segment whose ts maximum is > `ts`,
    from the footer's statistics (ts never decreases along the log, so every earlier row has
    ts <= it); None when the footer cannot tell."""
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
