"""The column-wise apply path: commands as Arrow columns, folded a batch at a time.

DESIGN.md's performance notes: the bulk of every workload is commits and pulls on keys in the
common case (no pending reset, nothing to clamp, no expiry due, clustering mode). Per batch this
module resolves those for all keys at once with numpy, and leaves every other command to the
per-command fold (`handlers.run`) in command order. Both write the same events and the
same results (tests/ledger/test_columnar.py compares them on generated and random streams).

Why per-key vectors are exact: a commit or pull reads and writes only its own key's position; it
reads its queue's bounds and its group's settings, nothing else. Within a run of commands
between barriers (reset, group_set, group_delete) group settings are fixed, and MaxOffset only
grows, by the run's queue appends, whose effect is known up front. So a key whose commands are
all in the common case folds independently of every other key:

- committed: a running maximum of the commits that are not above MaxOffset at their time (a
  lower one is refused as stale and changes nothing; a higher one is refused as invalid);
- pulled: each pull maps the previous pulled offset p to min(max(p, committed) + max, MaxOffset)
  (same client within its timeout) or to min(committed + max, MaxOffset) (otherwise). Maps of the
  form x -> min(max(x + a, b), c) compose into the same form, so the pulled offset after every
  pull is a prefix composition, computed per key by doubling in log2(pulls per key) steps.

A new key whose first line is a pull starts column-wise too: its `initial` event takes the
group's policy (latest: MaxOffset at that line; earliest: MinOffset). A key leaves the vector
path for the whole run (its rows go to the per-command fold, in order) when anything outside
that case could happen: a new key whose first line is a commit or whose policy is a timestamp,
no committed or pulled offset, a pending reset or expiry, broadcast mode, a value beyond what
int64 arithmetic keeps exact, a gap longer than offset retention, a commit by a client of an
older generation, or a line on the key or its queue that the vector path does not decide (a
malformed line, an explicit generation, a truncation).

Keys folded column-wise stay resident as columns from run to run (`Resident`) and reach their
Positions only when something else reads them.

The ledger time of a line is max(its ts, the last event's ts). When max(ts, the ledger's time
at the run's start) goes back from one line to the next, that depends on which earlier lines
wrote events, so such a run takes the per-command path as a whole; replays, live streams and
sorted imports (older than the ledger's last event, or not) never go back.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.commands.command import BARRIER_OPS, Command, from_arrow_rows
from ledger.errors import LedgerError
from ledger.executor.append_fold import AppendPlan, fold_appends, plan_appends
from ledger.executor.handlers import run as run_one
from ledger.executor.resident import Resident
from ledger.executor.run_results import RESULT_SCHEMA, RunOutput, VectorResults, ascending
from ledger.executor.sync_fold import SyncPlan, fold_syncs, plan_syncs, sources_ok
from ledger.fold.events import EVENT_SCHEMA, EventBuffer
from ledger.fold.position import NULL, rows_of
from ledger.fold.state import BROADCAST, GroupSettings
from ledger.limits import APPEND_COUNT_MAX, PULL_MAX, QUEUE_ID_MAX, TS_MAX, names_valid
from ledger.store.writer import Writer

#: The forms `apply_table` answers in: typed results, a RESULT_SCHEMA table, JSON lines.
TYPED, ARROW, JSON = "typed", "arrow", "json"
#: Offsets handled by vectors stay below this, so sums of offsets and pull sizes fit int64.
VALUE_MAX = 2**60
_NO_CLIENT = -2  # a last client that no line of the run names
_POLICIES = {"latest": 1, "earliest": 2}  # initial policies a new key may take column-wise

@dataclass
class Job:
    """One call's context: the writer, the typed commands the table was built from (None: the
    table is the input, its rows are decoded where they run per command), the line number of
    the table's first row, who sends (an actor that overrides what commands claim: one for
    all, or one per command, None where a command keeps its own) and the
    exceptions behind error results, by line."""

    writer: Writer
    commands: Sequence[Command | LedgerError] | None = None
    first_line: int = 1
    actor: str | Sequence[str | None] | None = None
    errors: dict[int, LedgerError] = field(default_factory=dict)
    #: Lines decoded apart from the table (by line number): what the table cannot say.
    overrides: dict[int, Command | LedgerError] = field(default_factory=dict)
    #: Per command: the rule by which its sender may not send it (the server's), or None.
    denied: Sequence[str | None] | None = None
    #: Whether the sender may give a `ts` beyond the clock skew: for all, or per command.
    backfill: bool | Sequence[bool] = False
    #: The latest `ts` of a sender that may not backfill, fixed per run (`start_run`), so that
    #: the vector path and the per-command path of a run judge each line alike.
    ts_limit: int | None = None

    def start_run(self) -> int:
        """Fix the run's ts limit (the clock moves on between runs); returns it."""
        self.ts_limit = self.writer.ts_limit_ms()
        return self.ts_limit

    def may_backfill(self, line: int) -> bool:
        if isinstance(self.backfill, bool):
            return self.backfill or self.writer.backfill
        return self.writer.backfill or bool(self.backfill[line - self.first_line])

    def backfill_mask(self, line_base: int, n: int) -> np.ndarray:
        """Per line of a run starting at `line_base`: may its sender backfill."""
        if isinstance(self.backfill, bool) or self.writer.backfill:
            return np.full(n, self.backfill is True or self.writer.backfill, bool)
        start = line_base - self.first_line
        return np.asarray(self.backfill[start:start + n], bool)

    def undecoded(self, line_base: int, n: int) -> np.ndarray:
        """Per line of a run: its command could not be decoded (an error, which writes no event
        whatever the table holds; a row with no op may also be a command its sender was denied,
        which may write one)."""
        if self.commands is not None:
            start = line_base - self.first_line
            return np.fromiter((isinstance(c, LedgerError)
                                for c in self.commands[start:start + n]), bool, n)
        mask = np.zeros(n, bool)
        for line, c in self.overrides.items():
            if line_base <= line < line_base + n and isinstance(c, LedgerError):
                mask[line - line_base] = True
        return mask

    def commands_at(self, batch: pa.Table, rows: np.ndarray, line_base: int
                    ) -> list[Command | LedgerError]:
        """The commands of `rows` of `batch` (whose first row is line `line_base`)."""
        if self.commands is not None:
            start = line_base - self.first_line
            return [self.commands[start + r] for r in rows.tolist()]
        picked = batch.take(pa.array(rows, pa.int64()))
        columns = {name: _plain(picked.column(name)).to_pylist() for name in picked.column_names
                   if picked.column(name).null_count < len(rows)}
        decoded = from_arrow_rows(columns, range(len(rows)))  # type: ignore[arg-type]
        if self.overrides:
            for i, r in enumerate(rows.tolist()):
                decoded[i] = self.overrides.get(line_base + r, decoded[i])
        return decoded

    def run(self, cmd: Command | LedgerError, line: int, events: EventBuffer,
            now: int | None = None) -> Any:
        denied = self.denied[line - self.first_line] if self.denied is not None else None
        return run_one(self.writer, cmd, line, events, now, self.actor_of(line), self.errors,
                       denied, may_backfill=self.may_backfill(line), ts_limit=self.ts_limit)

    def actor_of(self, line: int) -> str | None:
        if self.actor is None or isinstance(self.actor, str):
            return self.actor
        return self.actor[line - self.first_line]

    def actors_of(self, lines: np.ndarray) -> pa.Array | None:
        """The actors of these lines (their events' actor), None when no actor is given."""
        if self.actor is None:
            return None
        if isinstance(self.actor, str):
            return pa.array([self.actor] * len(lines), pa.string())
        return pa.array(self.actor, pa.string()).take(
            pa.array(lines - self.first_line, pa.int64()))


# ----------------------------------------------------------------------------- columns
class _Columns:
    """The run's columns as numpy: names as dictionary codes with a validity per code, integers
    with a validity mask (null, wrong type or out of range -> invalid)."""

    def __init__(self, batch: pa.Table) -> None:
        self.batch = batch
        self.n = batch.num_rows

    def names(self, name: str) -> tuple[np.ndarray, list[Any], np.ndarray]:
        """(codes with -1 for null, dictionary values, valid name per code)."""
        if name not in self.batch.column_names:
            return np.full(self.n, -1, np.int64), [], np.zeros(0, bool)
        col = _one_array(self.batch.column(name))
        if not pa.types.is_dictionary(col.type):
            col = pc.dictionary_encode(col)
        values = col.dictionary.to_pylist()
        if len(set(values)) != len(values):  # a dictionary may repeat values: make codes unique
            col = pc.dictionary_encode(col.dictionary.take(col.indices))
            values = col.dictionary.to_pylist()
        codes = pc.fill_null(col.indices.cast(pa.int64()), -1).to_numpy(zero_copy_only=False)
        return codes, values, np.array(names_valid(values, name), bool)

    def flags(self, name: str) -> np.ndarray:
        """Lines whose boolean field is given and not false (any other type counts as given:
        such a line is decided per command, which names the bad value)."""
        if name not in self.batch.column_names:
            return np.zeros(self.n, bool)
        col = _one_array(self.batch.column(name))
        if pa.types.is_boolean(col.type):
            return pc.fill_null(col, False).to_numpy(zero_copy_only=False)
        return col.is_valid().to_numpy(zero_copy_only=False)

    def ints(self, name: str, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(values with 0 for invalid, valid mask, present mask: the line has the field)."""
        if name not in self.batch.column_names:
            zero = np.zeros(self.n, bool)
            return np.zeros(self.n, np.int64), zero, zero
        col = _one_array(self.batch.column(name))
        present = col.is_valid().to_numpy(zero_copy_only=False)
        t = col.type
        if not (pa.types.is_signed_integer(t) or t in (pa.uint8(), pa.uint16(), pa.uint32())):
            return np.zeros(self.n, np.int64), np.zeros(self.n, bool), present
        values = pc.fill_null(col.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
        valid = present & (values >= lo) & (values <= hi)
        return np.where(valid, values, 0), valid, present


def _plain(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Dictionary columns decoded (to_pylist on a dictionary array goes value by value)."""
    return col.cast(col.type.value_type) if pa.types.is_dictionary(col.type) else col


def _one_array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        if pa.types.is_dictionary(col.type):
            col = col.unify_dictionaries()
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


# ----------------------------------------------------------------------------- grouped scans
def _grouped_scan(values: list[np.ndarray], rank: np.ndarray, combine: Any) -> list[np.ndarray]:
    """Inclusive prefix of `combine` within groups of consecutive rows (rank: position in the
    group), by doubling: log2(longest group) vector steps."""
    n = len(rank)
    d = 1
    longest = int(rank.max()) + 1 if n else 0
    while d < longest:
        take = np.nonzero(rank[d:] >= d)[0] + d
        earlier = [v[take - d] for v in values]
        later = [v[take] for v in values]
        merged = combine(earlier, later)
        values = [v.copy() for v in values]
        for v, m in zip(values, merged, strict=True):
            v[take] = m
        d *= 2
    return values


def _groups(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ids sorted into groups of equal values: (first row of a group, rank in its group)."""
    first = np.r_[True, ids[1:] != ids[:-1]] if len(ids) else np.zeros(0, bool)
    index = np.arange(len(ids))
    return first, index - np.maximum.accumulate(np.where(first, index, 0)) if len(ids) else index


def stable_order(values: np.ndarray) -> np.ndarray:
    """`np.argsort(values, kind="stable")` for non-negative integers: the default (SIMD, not
    stable) sort of the unique keys value * n + index is about twice as fast as the stable one."""
    n = len(values)
    if not n or int(values.min()) < 0 or int(values.max()) >= (2**62) // n:
        return np.argsort(values, kind="stable")
    return np.argsort(values.astype(np.int64) * n + np.arange(n))


def in_line_order(lines: np.ndarray, picked: np.ndarray, n: int) -> np.ndarray:
    """`picked` (indices into `lines`, each naming a different line below `n`) reordered so
    that their lines ascend: one scatter and one gather, no sort."""
    slot = np.full(n, -1, np.int64)
    slot[lines[picked]] = picked
    ordered = slot[slot >= 0]
    assert len(ordered) == len(picked), "two picked rows name one line"
    return ordered


def _group_ends(ids: np.ndarray) -> np.ndarray:
    """For ids sorted into groups of equal values: the index of each group's last row."""
    return np.nonzero(np.r_[ids[1:] != ids[:-1], True])[0] if len(ids) else np.zeros(0, np.int64)


def _grouped_shift(values: np.ndarray, first: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """The previous row's value within the group; `initial` (per row) for a group's first row."""
    out = np.empty_like(values)
    out[1:] = values[:-1]
    out[first] = initial[first]
    return out


def _max_scan(earlier: list[np.ndarray], later: list[np.ndarray]) -> list[np.ndarray]:
    return [np.maximum(earlier[0], later[0])]


def _compose_pull_maps(earlier: list[np.ndarray], later: list[np.ndarray]) -> list[np.ndarray]:
    """later o earlier for maps x -> min(max(x + a, b), c)."""
    a1, b1, c1 = earlier
    a2, b2, c2 = later
    return [a1 + a2, np.maximum(b1 + a2, b2), np.minimum(np.maximum(c1 + a2, b2), c2)]


# ----------------------------------------------------------------------------- a run
def fold_run(job: Job, batch: pa.Table, line_base: int, resident: Resident) -> RunOutput:
    """Fold one run of lines (no barrier among them) into the ledger's state; `resident` carries
    column-wise positions from run to run."""
    state = job.writer.state
    cols = _Columns(batch)
    n = cols.n
    op_codes, op_values, _ = cols.names("op")
    op_index = {v: i for i, v in enumerate(op_values)}

    def is_op(name: str) -> np.ndarray:
        code = op_index.get(name)
        return op_codes == code if code is not None else np.zeros(n, bool)

    ts, ts_ok, ts_present = cols.ints("ts", 0, TS_MAX)
    ts_col = batch.column("ts") if "ts" in batch.column_names else None
    if ts_col is not None and not pa.types.is_integer(ts_col.type) and ts_col.null_count < n:
        resident.clear()
        return _per_command(job, batch, line_base)  # ISO strings: parsed per line
    # a ts beyond the clock skew fails its line (per command, naming it) unless it may backfill
    ts_ok &= (ts <= job.start_run()) | job.backfill_mask(line_base, n)
    clock = job.writer.now_ms()
    times = np.where(ts_present, ts, clock)
    # an out-of-range ts fails its line, and so does one that could not be decoded: neither
    # writes an event, so neither sets a time
    counted = (~ts_present | ts_ok) & ~job.undecoded(line_base, n)
    # a line's time is max(its ts, the last event's): while that of the lines in order never
    # goes back, it is max(its ts, the run's start) whichever earlier lines wrote events (so a
    # run given times before the ledger's last event, an import of older history, folds too)
    now = np.maximum(times, state.last_ts)
    if np.any(np.diff(now[counted]) < 0):
        resident.clear()
        return _per_command(job, batch, line_base)

    g_codes, g_values, g_ok = cols.names("group")
    t_codes, t_values, t_ok = cols.names("topic")
    c_codes, c_values, c_ok = cols.names("client")
    qid, qid_ok, _ = cols.ints("queue_id", 0, QUEUE_ID_MAX)
    offset, offset_ok, _ = cols.ints("offset", 0, VALUE_MAX)
    pull_max, pull_max_ok, pull_max_present = cols.ints("max", 1, PULL_MAX)
    _, _, generation_present = cols.ints("generation", 0, 0)
    owner_only = cols.flags("owner_only")  # decided per command: who pulled last
    count, count_ok, count_present = cols.ints("count", 1, APPEND_COUNT_MAX)
    _, store_ok, store_present = cols.ints("store_time", 0, TS_MAX)

    def ok(codes: np.ndarray, valid: np.ndarray) -> np.ndarray:
        return (codes >= 0) & (valid[np.maximum(codes, 0)] if len(valid) else False)

    group_ok, topic_ok = ok(g_codes, g_ok), ok(t_codes, t_ok)
    client_ok = ok(c_codes, c_ok)
    client_null = c_codes < 0
    key_ok = group_ok & topic_ok & qid_ok & (~ts_present | ts_ok)
    commit, pull, append = is_op("commit"), is_op("pull"), is_op("queue_append")
    hot = key_ok & (
        (commit & offset_ok & ~generation_present & ~owner_only & (client_ok | client_null))
        | (pull & client_ok & (~pull_max_present | pull_max_ok)))
    pull_max = np.where(pull_max_present, pull_max, 32)
    # appends whose effect is known up front; any other append or truncate pins its queue
    simple_append = (append & topic_ok & qid_ok & (~ts_present | ts_ok)
                     & (~count_present | count_ok) & (~store_present | store_ok))
    count = np.where(count_present, count, 1)

    # ids: a queue is (topic code, queue id), a key (group code, queue); the same in every run
    # of a call (its dictionaries are unified), so that residents keep them
    q_span = QUEUE_ID_MAX + 1
    n_topics = max(len(t_values), 1)
    if (len(g_values) + 1) * n_topics >= 2**31:  # ids would overflow: fold per command
        resident.clear()
        return _per_command(job, batch, line_base)
    queue_id_of = np.unique(t_codes.astype(np.int64) * q_span + qid, return_inverse=True)[1]
    key_id_of = (g_codes.astype(np.int64) * n_topics + t_codes) * q_span + qid
    resident.use(g_values, t_values, c_values)

    pinned_queues = np.unique(queue_id_of[(append & ~simple_append) | is_op("queue_truncate")
                                          | is_op("queue_bounds")])
    sync = is_op("sync")
    syncs = _column_syncs(
        job, batch, resident, sync & key_ok & offset_ok & (client_ok | client_null),
        commit | pull | sync, key_id_of,
        lambda rows: _key_names(g_values, t_values, g_codes, t_codes, qid, rows), offset,
        c_values, c_codes)
    # decided per command: its key leaves the vector path
    touched = ((commit | pull) & ~hot) | (sync & ~syncs.mask)
    pinned_keys = np.unique(key_id_of[touched])

    rows = np.nonzero(hot & ~np.isin(key_id_of, pinned_keys)
                      & ~np.isin(queue_id_of, pinned_queues))[0]
    vec = _VectorRun(job, line_base, rows, now, commit, offset, pull_max, c_codes, c_values, g_codes,
                     g_values, t_codes, t_values, qid, key_id_of, queue_id_of,
                     np.nonzero(simple_append)[0], count, resident)
    vec.fold()
    # the keys the per-command path folds in this run leave the residents first
    per_command = np.ones(n, bool)
    per_command[vec.s[vec.keep]] = False
    resident.evict(key_id_of[per_command & (commit | pull | sync)])
    # appends on queues that no line folded per command reads fold column-wise too
    readers = per_command & (commit | pull)
    appends = plan_appends(
        state, np.nonzero(simple_append & ~np.isin(queue_id_of, pinned_queues)
                          & ~np.isin(queue_id_of, queue_id_of[readers]))[0], queue_id_of,
        lambda row: (t_values[t_codes[row]], int(qid[row])), count)
    store, _, _ = cols.ints("store_time", 0, TS_MAX)
    return _merge(job, batch, line_base, now, vec, ts_ok | ~ts_present, syncs,
                  _Appends(appends, count, store, store_present))


@dataclass
class _Appends:
    """The appends of a run folded column-wise (`append_fold`), with their columns."""

    plan: AppendPlan
    count: np.ndarray
    store: np.ndarray
    store_given: np.ndarray


@dataclass
class _Syncs:
    """The syncs of a run folded column-wise (`sync_fold`): their plan, and their rows."""

    plan: SyncPlan | None
    mask: np.ndarray


def _column_syncs(job: Job, batch: pa.Table, resident: Resident, candidate: np.ndarray,
                  keyed: np.ndarray, key_id_of: np.ndarray,
                  name_of: Callable[[np.ndarray], list[tuple[str, str, int]]],
                  offset: np.ndarray, c_values: list[Any], c_codes: np.ndarray) -> _Syncs:
    """The `candidate` syncs (their values checked) whose keys no other line of the run
    (`keyed`: every line on a key) touches, planned once their keys leave the residents."""
    mask = np.zeros(len(candidate), bool)
    if not candidate.any():
        return _Syncs(None, mask)
    valid_source, source = sources_ok(batch)
    candidate = candidate & valid_source
    candidate &= ~np.isin(key_id_of, key_id_of[keyed & ~candidate])
    rows = np.nonzero(candidate)[0]
    if not len(rows):
        return _Syncs(None, mask)
    resident.evict(key_id_of[rows])  # their Positions current: the plan reads them
    plan = plan_syncs(job.writer.state, job.writer.root, rows, key_id_of, name_of, offset,
                      source, _names_array(c_values, c_codes))
    mask[plan.rows] = True
    return _Syncs(plan, mask)


def _key_names(g_values: list[Any], t_values: list[Any], g_codes: np.ndarray,
               t_codes: np.ndarray, qid: np.ndarray, rows: np.ndarray
               ) -> list[tuple[str, str, int]]:
    return [(g_values[g], t_values[t], q) for g, t, q in zip(
        g_codes[rows].tolist(), t_codes[rows].tolist(), qid[rows].tolist(), strict=True)]


def _per_command(job: Job, batch: pa.Table, line_base: int) -> RunOutput:
    job.start_run()
    buf = EventBuffer()
    results, last_event = [], []
    for i, cmd in enumerate(job.commands_at(batch, np.arange(batch.num_rows), line_base)):
        before = len(buf)
        results.append(job.run(cmd, line_base + i, buf))
        last_event.append(len(buf) - 1 if len(buf) > before else -1)
    return RunOutput(pa.Table.from_batches([buf.to_record_batch(0)]), results,  # type: ignore[arg-type]
                     np.asarray(last_event, np.int64), line_base)


class _VectorRun:
    """The rows of one run that fold column-wise, and their effect."""

    def __init__(self, job: Job, line_base: int, rows: np.ndarray, now: np.ndarray,
                 commit: np.ndarray,
                 offset: np.ndarray, pull_max: np.ndarray, c_codes: np.ndarray,
                 c_values: list[Any], g_codes: np.ndarray, g_values: list[Any],
                 t_codes: np.ndarray, t_values: list[Any], qid: np.ndarray, key_id_of: np.ndarray,
                 queue_id_of: np.ndarray, append_rows: np.ndarray, append_count: np.ndarray,
                 resident: Resident) -> None:
        self.job = job
        self.line_base = line_base  # the line of the run's first row
        self.resident = resident
        self.state = job.writer.state
        self.rows = rows
        self.now_all = now
        self.commit_all, self.offset_all, self.max_all = commit, offset, pull_max
        self.c_codes, self.c_values = c_codes, c_values
        self.g_codes, self.g_values, self.t_codes, self.t_values = g_codes, g_values, t_codes, t_values
        self.qid = qid
        self.key_id_of, self.queue_id_of = key_id_of, queue_id_of
        self.append_rows, self.append_count = append_rows, append_count

    # ---------------------------------------------------------------- MaxOffset at each row
    def _max_offset_at(self, rows: np.ndarray, start_max: np.ndarray) -> np.ndarray:
        """MaxOffset of each row's queue when the row runs: the run's appends before it."""
        a = self.append_rows
        if len(a) == 0:
            return start_max
        aq = self.queue_id_of[a]
        order = np.lexsort((a, aq))
        aq, arow = aq[order], a[order]
        acount = self.append_count[a][order]
        first, rank = _groups(aq)
        group_start = np.arange(len(aq)) - rank
        csum = np.cumsum(acount)
        added = csum - (csum[group_start] - acount[group_start])  # appended so far on the queue
        # the last append of the row's queue before the row: search (queue, row) in (aq, arow)
        span = len(self.queue_id_of) + 1
        pos = np.searchsorted(aq * span + arow, self.queue_id_of[rows] * span + rows) - 1
        hit = (pos >= 0) & (aq[np.maximum(pos, 0)] == self.queue_id_of[rows])
        return start_max + np.where(hit, added[np.maximum(pos, 0)], 0)

    # ---------------------------------------------------------------- the fold
    def fold(self) -> None:
        rows = self.rows
        # rows sorted by key, then by line (one sort: rows are in line order already)
        order = stable_order(self.key_id_of[rows])
        s = rows[order]
        sorted_ids = self.key_id_of[s]
        first, rank = _groups(sorted_ids)
        k = np.cumsum(first) - 1  # each sorted row's key index
        keys = sorted_ids[first]
        first_row = s[first]  # a row of each key, to name the key
        start = self._gather(first_row, self.resident.lookup(keys))
        ok_key = start["ok"]
        at_first = np.zeros(len(keys), np.int64)  # each key's first row
        at_first[k[first]] = np.nonzero(first)[0]
        now = self.now_all[s]
        is_commit = self.commit_all[s]
        off = self.offset_all[s]
        max_at = self._max_offset_at(s, start["max"][k])
        ok_key &= np.bincount(k, max_at > VALUE_MAX, len(keys)) == 0 if len(k) else ok_key
        has_pull = np.bincount(k, ~is_commit, len(keys)) > 0 if len(k) else np.zeros(0, bool)
        unknown = start["exists"] == 0
        appended = np.isin(self.queue_id_of[first_row], self.queue_id_of[self.append_rows])
        # a queue with unknown bounds that no append of this run creates checks no MaxOffset
        # (its keys fold column-wise for commits only); on a queue this run creates, only a
        # new key whose first line is a pull does (its initial offset waits for the append)
        free = unknown & ~appended
        max_at = np.where(free[k], VALUE_MAX, max_at)
        ok_key &= ~(free & has_pull) & ~(unknown & appended & ~start["fresh"])
        ok_key &= ~(start["pulled_null"] & has_pull)  # never pulled: commits only
        fresh = start["fresh"]
        if fresh.any():  # the initial offset, taken at the key's first line (a pull)
            initial = np.where(start["latest"], max_at[at_first], start["min"])
            for name in ("committed", "pulled"):
                start[name] = np.where(fresh, initial, start[name])
            start["last_active"] = np.where(fresh, now[at_first], start["last_active"])
            # a queue this run creates must have its first messages before the key's first line
            # (before them the per-command path checks no MaxOffset for commits)
            ok_key &= ~(fresh & (start["exists"] == 0) & (max_at[at_first] == 0))
        fresh_commit = start["fresh_commit"]
        if fresh_commit.any():  # a new key's first line is a commit: no offset before it
            start["last_active"] = np.where(fresh_commit, now[at_first], start["last_active"])
            # the first commit must be taken (else no Position is made): not above MaxOffset
            ok_key &= ~fresh_commit | (off[at_first] <= max_at[at_first])

        # committed: running maximum of the commits not above MaxOffset
        c0 = start["committed"][k]
        valid = is_commit & (off <= max_at)
        (c_after,) = _grouped_scan([np.where(first, np.maximum(np.where(valid, off, -1), c0),
                                             np.where(valid, off, -1))], rank, _max_scan)
        c_before = _grouped_shift(c_after, first, c0)
        accepted = valid & (off >= c_before)
        event = ~is_commit | accepted
        # offset retention: a gap from the key's last commit or pull longer than retention
        lat0 = start["last_active"][k]
        (active,) = _grouped_scan([np.where(event, now, lat0)], rank, _max_scan)
        active_before = _grouped_shift(active, first, lat0)
        too_late = now - active_before > self.job.writer.settings.offsets_retention_ms
        ok_key &= np.bincount(k, too_late, len(keys)) == 0 if len(k) else ok_key
        client = self.c_codes[s]
        stale = start["stale_clients"]  # (key, client) pairs of an older generation: fenced
        if len(stale):
            span = len(self.c_values) + 2
            fenced = is_commit & np.isin(k * span + client + 1, stale)
            ok_key[k[fenced]] = False

        # pulls: the pulled offset is a prefix composition of per-pull maps
        p = np.nonzero(~is_commit)[0]
        kp = k[p]
        pfirst, prank = _groups(kp)
        pc_client = client[p]
        pnow = now[p]
        prev_client = _grouped_shift(pc_client, pfirst, start["last_client"][kp])
        prev_ts = _grouped_shift(pnow, pfirst, start["last_pull_ts"][kp])
        cont = (prev_client == pc_client) & (pnow - prev_ts <= start["timeout"][kp])
        committed_at = c_after[p]
        m = self.max_all[s][p]
        top = max_at[p]
        restart = np.minimum(committed_at + m, top)
        a = np.where(cont, m, 0)
        b = np.where(cont, committed_at + m, restart)
        c = np.where(cont, top, restart)
        fa, fb, fc = _grouped_scan([a, b, c], prank, _compose_pull_maps)
        p0 = start["pulled"][kp]
        pulled = np.minimum(np.maximum(p0 + fa, fb), fc)
        pulled_before = _grouped_shift(pulled, pfirst, p0)
        next_offset = np.where(cont, np.maximum(pulled_before, committed_at), committed_at)

        keep = ok_key[k]
        self.ok_key, self.keys, self.start = ok_key, keys, start
        self.s, self.k, self.keep = s, k, keep
        self.now, self.is_commit, self.off, self.client = now, is_commit, off, client
        self.accepted, self.c_before, self.c_after, self.event = accepted, c_before, c_after, event
        self.active, self.at_first = active, at_first
        self.reason_invalid = is_commit & ~valid
        self.p, self.pulled, self.pulled_before, self.next_offset = p, pulled, pulled_before, next_offset

    def _gather(self, first_row: np.ndarray, hit: np.ndarray) -> dict[str, Any]:
        """Each key's position at the start of the run (ok: the key may fold column-wise): from
        the residents (`hit`: index, or -1), else from its row of the state's table, read and
        checked as vectors."""
        state = self.state
        n = len(first_row)
        client_code = {v: i for i, v in enumerate(self.c_values)}
        timeouts = np.zeros(max(len(self.g_values), 1), np.int64)
        clustering = np.zeros(max(len(self.g_values), 1), bool)
        policy = np.zeros(max(len(self.g_values), 1), np.int8)  # 1 latest, 2 earliest, 0 other
        for i, name in enumerate(self.g_values):
            settings = state.groups.get(name) or GroupSettings()
            clustering[i] = settings.mode != BROADCAST
            timeouts[i] = settings.client_timeout_ms
            policy[i] = _POLICIES.get(settings.initial, 0)
        # the queues' bounds, per queue of the run
        q_ids = self.queue_id_of[first_row]
        uq, uq_first, uq_of = np.unique(q_ids, return_index=True, return_inverse=True)
        bounds = []
        for t, q in zip(self.t_codes[first_row[uq_first]].tolist(),
                        self.qid[first_row[uq_first]].tolist(), strict=True):
            queue = state.queues.get((self.t_values[t], q))
            bounds.append((1, queue.min_offset, queue.max_offset) if queue is not None
                          else (0, 0, 0))
        qb = np.array(bounds, np.int64).reshape(len(bounds), 3)[uq_of]

        values = np.zeros((n, 6), np.int64)
        ok = np.zeros(n, bool)
        resident = self.resident
        hits = np.nonzero(hit >= 0)[0]
        for j, name in enumerate(Resident.COLUMNS):
            values[hits, j] = resident.columns[name][hit[hits]]
        ok[hits] = True
        miss = np.nonzero(hit < 0)[0]
        names = self._names(first_row[miss])
        get_pos = state.positions.get
        positions = [get_pos(key) for key in names]
        known = np.fromiter((p is not None for p in positions), bool, len(miss))
        at = np.nonzero(known)[0]
        # the known keys' fields, a column at a time from their rows of the state's table
        table = state.table
        prow = rows_of([positions[i] for i in at.tolist()])  # type: ignore[misc]
        committed, pulled = table.committed[prow], table.pulled[prow]
        committed_null, pulled_null = committed == NULL, pulled == NULL
        flags = table.pending[prow] | table.expired[prow]
        rows = miss[at]
        values[rows, 0] = np.where(committed_null, 0, committed)
        values[rows, 1] = np.where(pulled_null, -1, pulled)  # never pulled: -1 for null
        values[rows, 2] = table.generation[prow]
        last_client = table.last_client[prow]
        run_code = np.append(table.known_codes(self.c_values), _NO_CLIENT)
        named = np.where(last_client == NULL, len(run_code) - 1, last_client)
        values[rows, 3] = np.where(run_code[named] < 0, _NO_CLIENT, run_code[named])
        values[rows, 4] = table.last_pull_ts[prow]
        values[rows, 5] = table.last_active_ts[prow]
        ok[rows] = ~committed_null & ~flags
        # a new key whose first line is a pull starts at its group's initial policy (latest or
        # earliest): its offsets are set in `fold`, where MaxOffset at that line is known
        key_policy = policy[self.g_codes[first_row]]
        new = np.zeros(n, bool)
        new[miss[~known]] = True
        fresh = new & (key_policy > 0) & ~self.commit_all[first_row]
        # a new key whose first line is a commit: committed from nothing (-1), never pulled
        fresh_commit = new & self.commit_all[first_row]
        values[fresh | fresh_commit, 3] = _NO_CLIENT
        values[fresh | fresh_commit, 4] = -1
        values[fresh_commit, 0] = -1
        values[fresh_commit, 1] = -1
        committed, pulled = values[:, 0], values[:, 1]
        pulled_null = pulled < 0
        exists = qb[:, 0] == 1
        in_bounds = ((qb[:, 1] <= committed) & (committed <= qb[:, 2])
                     & (pulled_null | ((qb[:, 1] <= pulled) & (pulled <= qb[:, 2]))))
        bounds_ok = (~exists | in_bounds) & (values[:, 5] >= 0)
        # (a new key's queue may be created by this run: `fold` checks it exists by then)
        ok = ((ok & bounds_ok) | fresh | fresh_commit) & (
            clustering[self.g_codes[first_row]] & (qb[:, 2] <= VALUE_MAX))
        # keys with clients of an older generation (rare: after a reset or delete) never reside
        stale: list[int] = []
        span = len(self.c_values) + 2
        generations = values[:, 2].tolist()
        residable = np.zeros(n, bool)
        residable[miss] = True
        for j in np.nonzero(ok[miss] & known)[0].tolist():
            gens = positions[j].client_generations  # type: ignore[union-attr]
            i = int(miss[j])
            generation = generations[i]
            if gens and min(gens.values()) != generation:
                residable[i] = False
                stale += [i * span + client_code[c] + 1 for c, g in gens.items()
                          if g != generation and c in client_code]
        self.miss, self.miss_positions, self.miss_names = miss, positions, names
        self.residable, self.hit = residable, hit
        return {"committed": committed, "pulled": pulled, "generation": values[:, 2],
                "last_client": values[:, 3], "last_pull_ts": values[:, 4],
                "last_active": values[:, 5], "timeout": timeouts[self.g_codes[first_row]],
                "max": qb[:, 2], "min": qb[:, 1], "exists": qb[:, 0], "ok": ok,
                "fresh": fresh & ok, "fresh_commit": fresh_commit & ok,
                "pulled_null": pulled_null,
                "latest": key_policy == 1, "stale_clients": np.asarray(stale, np.int64)}

    # ---------------------------------------------------------------- effects
    def write_back(self) -> int:
        """Record the final position of every key folded here among the residents (their
        Positions are set later, when something reads them); returns the events written."""
        state = self.state
        keep, k = self.keep, self.k
        ev = keep & self.event
        n_keys = len(self.keys)
        ok = self.ok_key
        # each key's last row, its last event row and its last pull row (sorted order)
        last_row = np.full(n_keys, -1, np.int64)
        ends = _group_ends(k)
        last_row[k[ends]] = ends
        any_event = np.zeros(n_keys, bool)
        any_event[k[ev]] = True
        p = self.p[keep[self.p]]
        pk = k[p]
        last_pull = np.full(n_keys, -1, np.int64)
        pull_index = np.full(n_keys, -1, np.int64)
        if len(pk):
            ends = _group_ends(pk)
            last_pull[pk[ends]] = p[ends]
            position_in_p = np.searchsorted(self.p, p[ends])
            pull_index[pk[ends]] = position_in_p
        start = self.start
        if not n_keys:
            return 0
        last = np.maximum(last_row, 0)
        values = {name: start[name] for name in Resident.COLUMNS}
        values["committed"] = np.where(ok, self.c_after[last], start["committed"])
        # the running max of event times from the start value: the last event's, or the start
        values["last_active"] = np.where(ok, self.active[last], start["last_active"])
        if len(pk):
            has_pull = last_pull >= 0
            lp = np.maximum(last_pull, 0)
            values["pulled"] = np.where(has_pull, self.pulled[np.maximum(pull_index, 0)],
                                        start["pulled"])
            values["last_client"] = np.where(has_pull, self.client[lp], start["last_client"])
            values["last_pull_ts"] = np.where(has_pull, self.now[lp], start["last_pull_ts"])
        new = ok & (self.hit < 0)
        miss_slot = np.full(n_keys, -1, np.int64)
        miss_slot[self.miss] = np.arange(len(self.miss))
        new_slots = miss_slot[np.nonzero(new)[0]].tolist()
        fresh = start["fresh"] & ok
        made = miss_slot[np.nonzero(fresh | (start["fresh_commit"] & ok))[0]].tolist()
        # new keys: their Position now
        for j, pos in zip(made, state.new_positions([self.miss_names[j] for j in made]),
                          strict=True):
            self.miss_positions[j] = pos
        self.resident.store(
            self.keys[ok], {name: v[ok] for name, v in values.items()}, any_event[ok],
            [self.miss_positions[j] for j in new_slots], new[ok])  # type: ignore[misc]
        if len(pk):
            self.resident.pulled_by.append((self.keys[pk], self.client[p]))
        # keys with clients of an older generation do not stay: written back at once
        self.resident.evict(self.keys[new & ~self.residable])
        n_events = int(ev.sum()) + int(fresh.sum())  # an `initial` event per new key
        state.events_applied += n_events
        if n_events:
            state.last_ts = max(state.last_ts, int(self.now[ev].max()))
        return n_events

    def _names(self, rows: np.ndarray) -> list[tuple[str, str, int]]:
        return _key_names(self.g_values, self.t_values, self.g_codes, self.t_codes, self.qid,
                          rows)


def _merge(job: Job, batch: pa.Table, line_base: int, now: np.ndarray, vec: _VectorRun,
           time_ok: np.ndarray, syncs: _Syncs, appends: _Appends) -> RunOutput:
    """Fold the other rows per command, in order, then merge all into line order."""
    n = batch.num_rows
    vec_mask = np.zeros(n, bool)
    vec_rows_sorted = vec.s[vec.keep]
    vec_mask[vec_rows_sorted] = True
    vec_mask[appends.plan.rows] = True
    slow = np.nonzero(~vec_mask & ~syncs.mask)[0]
    buf = EventBuffer()
    results: list[Any] = [None] * n
    slow_event_line: list[int] = []
    for row, cmd in zip(slow.tolist(), job.commands_at(batch, slow, line_base), strict=True):
        before = len(buf)
        at = int(now[row]) if time_ok[row] else None
        results[row] = job.run(cmd, line_base + row, buf, now=at)
        slow_event_line.extend([row] * (len(buf) - before))
    n_vec_events = vec.write_back()
    append_events, append_lines, append_results = fold_appends(
        job.writer.state, appends.plan, now, appends.count, appends.store, appends.store_given,
        line_base, lambda rows: job.actors_of(rows + line_base))
    sync_events, sync_lines, sync_results = EVENT_SCHEMA.empty_table(), np.zeros(0, np.int64), None
    if syncs.plan is not None:
        sync_events, sync_lines, sync_results = fold_syncs(
            job.writer.state, syncs.plan, now, line_base,
            lambda rows: job.actors_of(rows + line_base))

    # the vector rows' events and results, in line order (they were folded in (key, line)
    # order; taking the events' rows back into line order from there was 15% of a mixed run)
    keep = in_line_order(vec.s, np.nonzero(vec.keep)[0], n)
    s = vec.s[keep]
    is_commit = vec.is_commit[keep]
    accepted = vec.accepted[keep]
    event = vec.event[keep]
    k = vec.k[keep]
    generation = vec.start["generation"][k]
    off = vec.off[keep]
    c_before = vec.c_before[keep]
    client = vec.client[keep]
    # pulled offsets of the kept pull rows, aligned to the kept rows
    pull_pos = np.full(len(vec.s), -1, np.int64)
    pull_pos[vec.p] = np.arange(len(vec.p))
    ppos = pull_pos[keep]
    is_pull = ~is_commit
    pulled = np.zeros(len(s), np.int64)
    pulled[is_pull] = vec.pulled[ppos[is_pull]]
    next_offset = np.zeros(len(s), np.int64)
    next_offset[is_pull] = vec.next_offset[ppos[is_pull]]
    redeliver = np.zeros(len(s), bool)
    redeliver[is_pull] = next_offset[is_pull] < vec.pulled_before[ppos[is_pull]]
    # the position before each event (stored, so reads derive nothing): committed before a
    # commit, pulled before a pull; -1 stands for none (a new key's first commit)
    prev = c_before.copy()
    prev[is_pull] = vec.pulled_before[ppos[is_pull]]

    ev_rows = s[event]
    vec_events = _vector_events(vec, ev_rows, is_commit[event], np.where(is_commit, off, pulled)[event],
                                prev[event], generation[event], client[event], next_offset[event],
                                redeliver[event])
    init_rows, init_events = _initial_events(vec)
    assert vec_events.num_rows + init_events.num_rows == n_vec_events
    vector = VectorResults(
        rows=s, is_pull=is_pull, accepted=is_commit & accepted,
        invalid=vec.reason_invalid[keep],
        offset=np.where(is_pull, next_offset, np.where(accepted, off, c_before)),
        generation=generation, count=pulled - next_offset)

    slow_table = pa.Table.from_batches([buf.to_record_batch(0)])
    events = pa.concat_tables([slow_table, append_events, sync_events, init_events,
                               vec_events])
    # a line's `initial` event comes before its pull: the stable sort keeps this order
    event_line = np.concatenate((np.asarray(slow_event_line, np.int64), append_lines,
                                 sync_lines, init_rows, ev_rows))
    if ascending(event_line, strict=False):  # a line's events share its number
        sorted_lines = event_line  # one kind of line only (commits): in line order already
    else:
        order = stable_order(event_line)  # merging sorted runs: a take of few jumps
        events = events.take(pa.array(order, pa.int64()))
        sorted_lines = event_line[order]
    last_event = np.full(n, -1, np.int64)
    ends = _group_ends(sorted_lines)
    last_event[sorted_lines[ends]] = ends
    return RunOutput(events, results, last_event, line_base, vector, sync_results,
                     append_results if len(append_lines) else None)


def _initial_events(vec: _VectorRun) -> tuple[np.ndarray, pa.Table]:
    """The `initial` event of each new key, at its first line (a pull): (lines, events)."""
    fresh = np.nonzero(vec.start["fresh"] & vec.ok_key)[0]
    fresh = in_line_order(vec.s[vec.at_first], fresh, len(vec.now_all))
    rows = vec.s[vec.at_first[fresh]]
    n = len(rows)
    details = pa.array(["policy earliest", "policy latest"], pa.string())
    return rows, _event_table(
        vec, rows, pa.array(["initial"] * n, pa.string()), vec.start["committed"][fresh],
        np.full(n, -1, np.int64), np.zeros(n, np.int32), vec.c_codes[rows],
        vec.job.actors_of(rows + vec.line_base) if vec.job.actor is not None
        else pa.nulls(n, pa.string()),
        details.take(pa.array(vec.start["latest"][fresh].astype(np.int8))))


def _vector_events(vec: _VectorRun, rows: np.ndarray, is_commit: np.ndarray, offset: np.ndarray,
                   prev: np.ndarray, generation: np.ndarray, client: np.ndarray,
                   next_offset: np.ndarray, redeliver: np.ndarray) -> pa.Table:
    """The commit and pull events of the lines folded column-wise."""
    n = len(rows)
    detail: list[str | None] = [None] * n
    for i in np.nonzero(redeliver)[0].tolist():
        detail[i] = f"redeliver from {int(next_offset[i])}"
    operator = is_commit & (client < 0)
    actor = _OPERATOR.take(pa.array(np.zeros(n, np.int64), mask=~operator))
    given = vec.job.actors_of(rows + vec.line_base)
    if given is not None:  # the sender's name where one is given, else the default
        actor = pc.if_else(pc.is_valid(given), given, actor)
    return _event_table(
        vec, rows, _KINDS.take(pa.array((~is_commit).astype(np.int8))), offset, prev, generation,
        client, actor, pa.array(detail, pa.string()))


def _event_table(vec: _VectorRun, rows: np.ndarray, kind: pa.Array, offset: np.ndarray,
                 prev: np.ndarray, generation: np.ndarray, client: np.ndarray, actor: pa.Array,
                 detail: pa.Array) -> pa.Table:
    """Events (EVENT_SCHEMA, seq 0 until appended) of `rows`: their time and key from the run;
    `prev` is each event's prev_offset, -1 for null."""
    n = len(rows)
    return pa.Table.from_arrays([
        pa.array(np.zeros(n, np.int64)),
        pa.array(vec.now_all[rows], pa.int64()),
        kind,
        _names_array(vec.g_values, vec.g_codes[rows]),
        _names_array(vec.t_values, vec.t_codes[rows]),
        pa.array(vec.qid[rows], pa.int32()),
        pa.array(offset, pa.int64()),
        pa.array(prev, pa.int64(), mask=prev < 0),
        pa.array(generation, pa.int32()),
        _names_array(vec.c_values, client),
        actor,
        pa.nulls(n, pa.int64()),
        detail,
    ], schema=EVENT_SCHEMA)


def _names_array(values: list[Any], codes: np.ndarray) -> pa.Array:
    return pa.array(values, pa.string()).take(pa.array(codes, pa.int64(), mask=codes < 0))


_KINDS = pa.array(["commit", "pull"], pa.string())
_OPERATOR = pa.array(["operator"], pa.string())


# ----------------------------------------------------------------------------- batches
class _Pacer:
    """Rows per run: a run costs a Python step per key it touches, so runs grow (doubling up to
    the batch) while nearly all rows fold column-wise, and shrink while many keys are new or
    otherwise off the vector path (their later rows in the same run go per command too)."""

    MIN = 4096
    START = 32_768

    def __init__(self, most: int) -> None:
        self.most = max(most, 1)
        self.rows = min(self.START, self.most)

    def after(self, run: RunOutput) -> None:
        share = run.vector_rows / max(len(run.results), 1)
        if share >= 0.9:
            self.rows = min(self.rows * 2, self.most)
        elif share < 0.5:
            self.rows = max(self.rows // 2, min(self.MIN, self.most))


def apply_table(job: Job, table: pa.Table | pa.RecordBatch, batch_commands: int,
                form: str = TYPED, resident: Resident | None = None) -> Iterator[Any]:
    """Apply a command table a batch at a time; yield the results of each appended batch, one
    per line, once its events are durable, in `form`: a list of typed results (TYPED), a
    RESULT_SCHEMA table (ARROW) or a chunked string array of their JSON lines, newlines
    included (JSON). A `resident` given by the caller is shared by the call's tables (one per
    NDJSON block): its keys stay resident from one to the next, their Positions written back
    in between."""
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    table = _unified(table)
    shared = resident is not None
    if resident is None:
        resident = Resident(job.writer.state)
    else:
        resident.resume(job.writer.state)
        table = resident.encode(table)
    pacer = _Pacer(batch_commands)
    done = False
    try:
        for start in range(0, table.num_rows, batch_commands):
            with _collector_paused():
                parts = list(_apply_batch(job, table.slice(start, batch_commands),
                                          job.first_line + start, pacer, form, resident))
                if form == TYPED or shared:
                    resident.write_back()  # the caller may read the state between batches
            yield from parts
        done = True
    finally:
        if shared and done:
            resident.hold()
        else:
            resident.clear()


def _unified(table: pa.Table) -> pa.Table:
    """Name columns dictionary-encoded over the whole table, so that every slice has the same
    codes (resident keys are ids over them)."""
    for name in ("group", "topic", "client"):
        if name not in table.column_names:
            continue
        col = table.column(name)
        if not pa.types.is_dictionary(col.type):
            if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
                continue
            col = pc.dictionary_encode(col.combine_chunks())
            col = pa.chunked_array([col])
        elif col.num_chunks > 1:
            col = col.unify_dictionaries()
            col = pa.chunked_array([col.combine_chunks()])
        table = table.set_column(table.column_names.index(name), name, col)
    return table


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a batch folds: the fold allocates many short-lived
    tuples and lists, and each collection would walk every Position of the state (about 7% of
    the time of a 1M-command bench run). Nothing here makes reference cycles; the collector
    runs again as soon as the batch is done."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _apply_batch(job: Job, batch: pa.Table, line_base: int, pacer: _Pacer,
                 form: str, resident: Resident) -> Iterator[Any]:
    n = batch.num_rows
    if "op" in batch.column_names:
        ops = _one_array(batch.column("op"))
        barrier = pc.is_in(ops.cast(pa.string()) if pa.types.is_dictionary(ops.type) else ops,
                           value_set=pa.array(sorted(BARRIER_OPS), pa.string()))
        barriers = np.nonzero(pc.fill_null(barrier, False).to_numpy(zero_copy_only=False))[0]
        barrier_ops = ops.take(pa.array(barriers, pa.int64())).to_pylist() if len(barriers) else []
    else:
        barriers, barrier_ops = np.zeros(0, np.int64), []
    pending: list[RunOutput] = []
    lo = 0
    rows, ops = barriers.tolist(), barrier_ops
    i = 0
    while True:
        row = rows[i] if i < len(rows) else n
        while lo < row:
            size = min(pacer.rows, row - lo)
            run = fold_run(job, batch.slice(lo, size), line_base + lo, resident)
            pacer.after(run)
            pending.append(run)
            lo += size
        if i == len(rows):
            break
        # adjacent group_set/group_delete lines run together (a reset alone: it reads the log)
        j = i + 1
        if ops[i] != "reset":
            while j < len(rows) and rows[j] == rows[j - 1] + 1 and ops[j] != "reset":
                j += 1
        # a barrier reads and changes its group's keys (and settings, read by every run)
        groups = batch.column("group").slice(row, j - i).to_pylist() \
            if "group" in batch.column_names else [None]
        for group in groups:
            resident.evict_group(group)
        if ops[i] == "reset" and any(p.events.num_rows for p in pending):
            # a reset plans against the log: durable first
            yield _flush(job.writer, pending, form, resident)
            pending = []
        pending.append(_per_command(job, batch.slice(row, j - i), line_base + row))
        lo = row + (j - i)
        i = j
    yield _flush(job.writer, pending, form, resident)


def _flush(writer: Writer, runs: list[RunOutput], form: str, resident: Resident) -> Any:
    """Append the runs' events as one batch; then their results, with seqs. An Arrow or JSON
    form's results are built on the results thread while the batch is written and fsynced
    (their seqs are known before: the log numbers from its next seq), and returned only once
    the batch is durable; a 1M-line apply's results cost 0.2-0.45 s of Arrow kernels that let
    the GIL go, and its appends about as long."""
    tables = [r.events for r in runs if r.events.num_rows]
    first = writer.log.next_seq
    if not tables:
        return _results(runs, form, first)
    events = pa.concat_tables(tables).combine_chunks()
    seqs = pa.array(np.arange(first, first + events.num_rows, dtype=np.int64))
    batch = events.set_column(0, EVENT_SCHEMA.field("seq"), seqs).to_batches()[0]
    ahead = _results_thread().submit(_results, runs, form, first) if form != TYPED else None
    try:
        appended = writer.append(batch, before_derived=resident.write_back)
    finally:
        built = ahead.exception() if ahead is not None else None  # waited for, even on error
    if ahead is None or appended != first or built is not None:
        return _results(runs, form, appended)
    return ahead.result()


def _results(runs: list[RunOutput], form: str, first: int) -> Any:
    """The runs' results in `form`, their first event numbered `first`."""
    if form == ARROW:
        tables = []
        for run in runs:
            tables.append(run.result_table(first))
            first += run.events.num_rows
        return pa.concat_tables(tables) if tables else RESULT_SCHEMA.empty_table()
    if form == JSON:  # (the lines, how many of them carry an error)
        lines, errors = [], 0
        for run in runs:
            lines.append(run.json_lines(first))
            errors += run.errors()
            first += run.events.num_rows
        return pa.chunked_array(lines, pa.string()), errors
    out: list[Any] = []
    for run in runs:
        out += run.final_results(first)
        first += run.events.num_rows
    return out


_RESULTS_THREAD: ThreadPoolExecutor | None = None
_RESULTS_LOCK = threading.Lock()


def _results_thread() -> ThreadPoolExecutor:
    """One thread for the process's result building beside appends (its tasks submit none)."""
    global _RESULTS_THREAD
    with _RESULTS_LOCK:
        if _RESULTS_THREAD is None:
            _RESULTS_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="apply-results")
        return _RESULTS_THREAD


def _forget_results_thread() -> None:
    """In a forked child: the parent's thread is not there, so a new one is made when asked."""
    global _RESULTS_THREAD, _RESULTS_LOCK
    _RESULTS_THREAD, _RESULTS_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_results_thread)
