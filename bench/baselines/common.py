"""Shared by the baselines: the event rows they all store, timing, and the state-at-T answer.

Why: a baseline is only comparable if it stores the same rows as the ledger would and answers the
same question. `events_from_commands` is a small reference fold (the ledger's rules as far as the
bench workload exercises them: initial, pull, commit, reset, queue append/truncate, group config)
that turns commands into rows of the ledger's event schema, and counts anything the workload
generator should never produce (`anomalies`): stale or fenced commits, commits above MaxOffset or
above the pulled offset, pulls capped by MaxOffset or clamped by MinOffset, client timeouts
(and pulls where "timeout since the last pull" and "since the client was last seen" disagree).
It is also the generator's validator.

State at T (what every baseline answers): the latest event per (consumer_group, topic, queue_id)
at or before ledger time T among the kinds that set the committed offset. For the one broadcast
group this is the latest position written by any of its clients (the broadcast minimum over
clients is left out of the comparison; it would be the same extra step for every baseline).
"""

from __future__ import annotations

import bisect
import gc
import json
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ledger.fold.events import EVENT_SCHEMA

#: Every baseline stores rows of the ledger's own event schema.
COLUMNS: tuple[str, ...] = tuple(EVENT_SCHEMA.names)
#: Kinds that set the committed offset (DESIGN.md, Events).
COMMITTED_KINDS: tuple[str, ...] = ("initial", "commit", "reset", "sync", "clamp", "expire",
                                    "delete")
DEFAULT_CLIENT_TIMEOUT_MS: int = 120_000
#: Bump when `events_from_commands` produces different rows: cached event files carry it.
EVENTS_VERSION: int = 1
OPERATOR: str = "operator"
SYSTEM: str = "system"
Key = tuple[str, str, int]
State = dict[Key, int | None]


@dataclass
class EventRows:
    """Event rows of a command stream, with the command that produced each row."""

    table: pa.Table
    cmd_index: np.ndarray
    n_commands: int
    anomalies: Counter[str] = field(default_factory=Counter)

    @property
    def n_events(self) -> int:
        return self.table.num_rows

    def batches(self, commands_per_batch: int = 10_000) -> Iterator[pa.Table]:
        """Slices of the rows per `commands_per_batch` commands (the baselines' transactions)."""
        bounds = np.searchsorted(
            self.cmd_index, np.arange(0, self.n_commands + commands_per_batch, commands_per_batch)
        )
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            if hi > lo:
                yield self.table.slice(lo, hi - lo)

    def time_at(self, fraction: float) -> int:
        """A ledger time T at this fraction of the stream (for state-at-T questions)."""
        i = min(self.n_events - 1, max(0, int(self.n_events * fraction)))
        return int(self.table.column("ts")[i].as_py())


def pylist(col: pa.ChunkedArray | pa.Array) -> list:
    """Values as a Python list; dictionary columns without a scalar object per value (fast)."""
    if isinstance(col, pa.ChunkedArray):
        out: list = []
        for chunk in col.chunks:
            out.extend(pylist(chunk))
        return out
    if pa.types.is_dictionary(col.type):
        values = col.dictionary.to_pylist() + [None]
        idx = col.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False)
        return [values[i] for i in idx.tolist()]
    return col.to_pylist()


def parse_duration_ms(text: str | int | None) -> int:
    """ISO-8601 `PnDTnHnMnS` (or ms as a number) to milliseconds; None is the default."""
    if text is None:
        return DEFAULT_CLIENT_TIMEOUT_MS
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", text)
    if not m:
        raise ValueError(f"bad duration {text!r}")
    d, h, mi, s = (float(x) if x else 0.0 for x in m.groups())
    return int(((d * 24 + h) * 60 + mi) * 60_000 + s * 1000)


class _Key:
    """Positions of one key (or one broadcast client of a key)."""

    __slots__ = ("committed", "pulled", "gen", "client", "pull_ts", "seen_ts", "pending", "cgen")

    def __init__(self, offset: int, client: int, ts: int) -> None:
        self.committed = offset
        self.pulled = offset
        self.gen = 0
        self.client = client
        self.pull_ts = ts
        self.seen_ts = ts
        self.pending = False
        self.cgen: dict[int, int] = {}  # generation of each client's last pull


def events_from_commands(commands: pa.Table | Iterable[pa.Table | pa.RecordBatch],
                         block: int = 100_000) -> EventRows:
    """Fold commands (COMMAND_SCHEMA columns; a table or batches) into event rows; see the
    module docstring."""
    enabled = gc.isenabled()
    gc.disable()  # millions of row tuples: the cyclic collector would rescan them all
    try:
        return _events_from_commands(commands, block)
    finally:
        if enabled:
            gc.enable()


_NAMES = ("op", "group", "topic", "queue_id", "client", "offset", "count", "store_time",
          "min_offset", "max", "to_datetime", "shift_by", "execute", "mode", "initial",
          "client_timeout", "ts")
_OPS = ("queue_append", "queue_truncate", "pull", "commit", "reset", "group_set")


class _Codes:
    """Global integer ids for names, stable across blocks whatever their dictionaries."""

    def __init__(self) -> None:
        self.ids: dict[str | None, int] = {}
        self.names: list[str | None] = []

    def __call__(self, col: pa.ChunkedArray | pa.Array) -> np.ndarray:
        """Ids of a string or dictionary column (null has an id too, its name None)."""
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if not pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_encode()
        values = arr.dictionary.to_pylist() + [None]
        lut = np.empty(len(values), np.int64)
        for i, v in enumerate(values):
            j = self.ids.get(v)
            if j is None:
                j = self.ids[v] = len(self.names)
                self.names.append(v)
            lut[i] = j
        idx = arr.indices.fill_null(len(values) - 1).to_numpy(zero_copy_only=False)
        return lut[idx.astype(np.int64)]


def _values(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    if len(col) == 0:
        return np.zeros(0, np.int64)
    return col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def _blocks(commands: pa.Table | Iterable[pa.Table | pa.RecordBatch],
            block: int) -> Iterator[pa.Table | pa.RecordBatch]:
    if isinstance(commands, pa.Table):
        for start in range(0, commands.num_rows, block):
            yield commands.slice(start, block)
    else:
        yield from commands


def _events_from_commands(commands: pa.Table | Iterable[pa.Table | pa.RecordBatch],
                          block: int) -> EventRows:
    anomalies: Counter[str] = Counter()
    ops, groups_c, topics_c, clients_c = _Codes(), _Codes(), _Codes(), _Codes()
    gn, tn, cn = groups_c.names, topics_c.names, clients_c.names
    op_code = {name: i for i, name in enumerate(_OPS)}
    # Per group id: [broadcast?, initial policy, client timeout ms]; the ledger's defaults.
    gcfg: list[list] = []
    queues: dict[int, list] = {}  # queue code -> [min, max, store times, first offsets]
    keys: dict[int | tuple[int, int], _Key] = {}
    bcast_members: dict[int, list[_Key]] = {}
    batches: list[pa.RecordBatch] = []
    cmd_blocks: list[np.ndarray] = []
    seq = 0
    last_ts = 0
    start = 0
    for part in _blocks(commands, block):
        n_part = part.num_rows
        op_ids = ops(part.column("op"))
        op_lut = np.array([op_code.get(x, -1) for x in ops.names], np.int64)
        op = op_lut[op_ids]
        gi = groups_c(part.column("group"))
        while len(gcfg) < len(gn):
            gcfg.append([False, "latest", DEFAULT_CLIENT_TIMEOUT_MS])
        ti = topics_c(part.column("topic"))
        ci_ = clients_c(part.column("client"))
        q = _values(part.column("queue_id").fill_null(-1))
        qcode = (ti << 24) + (q + 1)  # queue ids below 2**24
        base = (gi << 44) + qcode  # topics below 2**20
        val = np.select(
            [op == 3, op == 2, op == 0, op == 1],
            [_values(part.column("offset")), _values(part.column("max")),
             _values(part.column("count")), _values(part.column("min_offset"))],
            0,
        )
        ts_col = part.column("ts").fill_null(0).to_numpy().astype(np.int64)
        store = part.column("store_time")
        rare = {n: part.column(n) for n in ("to_datetime", "shift_by", "execute", "mode",
                                            "initial", "client_timeout")}
        rows: list[tuple] = []
        cmd_of: list[int] = []
        ci = start - 1
        for o, g, t, qq, c, qc, kb, v, ts in zip(
            op.tolist(), gi.tolist(), ti.tolist(), q.tolist(), ci_.tolist(), qcode.tolist(),
            base.tolist(), val.tolist(), ts_col.tolist(), strict=True,
        ):
            ci += 1
            if ts < last_ts:
                ts = last_ts
            last_ts = ts
            if o == 3:  # commit
                cfg = gcfg[g]
                k = (kb, c) if cfg[0] else kb
                st = keys.get(k)
                if st is None:
                    anomalies["commit_unknown_key"] += 1
                    continue
                if st.pending or st.cgen.get(c) != st.gen:
                    anomalies["commit_fenced"] += 1
                    continue
                if v < st.committed:
                    anomalies["commit_stale"] += 1
                    continue
                qs = queues.get(qc)
                if qs is not None and v > qs[1]:
                    anomalies["commit_above_max"] += 1
                    continue
                if v > st.pulled:
                    anomalies["commit_above_pulled"] += 1
                st.committed = v
                st.seen_ts = ts
                rows.append((seq, ts, "commit", gn[g], tn[t], qq, v, None, st.gen, cn[c], None,
                             None, None))
                cmd_of.append(ci)
                seq += 1
            elif o == 2:  # pull
                bc, policy, timeout_ms = gcfg[g]
                k = (kb, c) if bc else kb
                qs = queues.get(qc)
                if qs is None:
                    anomalies["pull_unknown_queue"] += 1
                    qs = [0, None, [], []]
                st = keys.get(k)
                if st is None:
                    start_off = None
                    if bc:
                        others = [m.committed for m in bcast_members.get(kb, ())
                                  if ts - m.seen_ts <= timeout_ms]
                        start_off = min(others) if others else None
                    if start_off is None:
                        start_off = qs[0] if policy == "earliest" else (qs[1] or 0)
                    st = keys[k] = _Key(start_off, c, ts)
                    if bc:
                        bcast_members.setdefault(kb, []).append(st)
                    rows.append((seq, ts, "initial", gn[g], tn[t], qq, start_off, None, 0,
                                 cn[c], None, None, policy))
                    cmd_of.append(ci)
                    seq += 1
                    begin = start_off
                elif st.pending:
                    begin = st.committed
                    st.pending = False
                elif st.client == c and ts - st.pull_ts <= timeout_ms:
                    begin = st.pulled
                    if ts - st.seen_ts <= timeout_ms < ts - st.pull_ts:
                        anomalies["timeout_ambiguous"] += 1
                else:
                    begin = st.committed
                    if st.client == c:  # the generator assumes clients never time out
                        anomalies["pull_after_timeout"] += 1
                        if ts - st.seen_ts <= timeout_ms:
                            anomalies["timeout_ambiguous"] += 1
                if begin < qs[0]:
                    anomalies["pull_clamped_min"] += 1
                    begin = qs[0]
                end = begin + (v or 32)
                if qs[1] is not None and end > qs[1]:
                    anomalies["pull_capped_max"] += 1
                    end = max(begin, qs[1])
                st.pulled = end
                st.client = c
                st.pull_ts = st.seen_ts = ts
                st.cgen[c] = st.gen
                rows.append((seq, ts, "pull", gn[g], tn[t], qq, end, None, st.gen, cn[c], None,
                             None, None))
                cmd_of.append(ci)
                seq += 1
            elif o == 0:  # queue_append
                qs = queues.get(qc)
                if qs is None:
                    qs = queues[qc] = [0, 0, [], []]
                prev = qs[1]
                st_ms = store[ci - start].as_py()
                qs[2].append(st_ms)
                qs[3].append(prev)
                qs[1] = prev + v
                rows.append((seq, ts, "queue_append", None, tn[t], qq, qs[1], prev, None, None,
                             SYSTEM, st_ms, None))
                cmd_of.append(ci)
                seq += 1
            elif o == 1:  # queue_truncate
                qs = queues.get(qc)
                if qs is None:
                    qs = queues[qc] = [0, 0, [], []]
                if v <= qs[0]:
                    anomalies["truncate_not_forward"] += 1
                    continue
                if v > qs[1]:
                    anomalies["truncate_above_max"] += 1
                prev = qs[0]
                qs[0] = v
                rows.append((seq, ts, "queue_truncate", None, tn[t], qq, v, prev, None, None,
                             SYSTEM, None, None))
                cmd_of.append(ci)
                seq += 1
            elif o == 4:  # reset
                if gcfg[g][0]:
                    anomalies["reset_broadcast"] += 1
                    continue
                st = keys.get(kb)
                qs = queues.get(qc)
                if st is None or qs is None:
                    anomalies["reset_unknown_key"] += 1
                    continue
                i = ci - start
                to_dt = rare["to_datetime"][i].as_py()
                shift = rare["shift_by"][i].as_py()
                if to_dt is not None:
                    j = bisect.bisect_left(qs[2], to_dt)
                    target = qs[3][j] if j < len(qs[3]) else qs[1]
                    detail = f"to-datetime {to_dt}"
                elif shift is not None:
                    target = st.committed + shift
                    detail = f"shift-by {shift}"
                else:
                    anomalies["reset_unsupported"] += 1
                    continue
                target = min(max(target, qs[0]), qs[1])
                if not rare["execute"][i].as_py():
                    continue
                prev = st.committed
                st.gen += 1
                st.committed = target
                st.pending = True
                rows.append((seq, ts, "reset", gn[g], tn[t], qq, target, prev, st.gen, None,
                             OPERATOR, None, detail))
                cmd_of.append(ci)
                seq += 1
            elif o == 5:  # group_set
                i = ci - start
                cfg = gcfg[g]
                mode = rare["mode"][i].as_py()
                if mode is not None:
                    cfg[0] = mode == "broadcast"
                cfg[1] = rare["initial"][i].as_py() or cfg[1]
                timeout = rare["client_timeout"][i].as_py()
                if timeout is not None:
                    cfg[2] = parse_duration_ms(timeout)
                detail = json.dumps({"mode": "broadcast" if cfg[0] else "clustering",
                                     "initial": cfg[1], "client_timeout_ms": cfg[2]})
                rows.append((seq, ts, "group_config", gn[g], None, None, None, None, None, None,
                             OPERATOR, None, detail))
                cmd_of.append(ci)
                seq += 1
            else:
                anomalies["unknown_op"] += 1
        if rows:
            arrays = [pa.array(col, f.type)
                      for col, f in zip(zip(*rows, strict=True), EVENT_SCHEMA, strict=True)]
            batches.append(pa.RecordBatch.from_arrays(arrays, schema=EVENT_SCHEMA))
            cmd_blocks.append(np.asarray(cmd_of, np.int64))
        start += n_part
    table = pa.Table.from_batches(batches, schema=EVENT_SCHEMA).combine_chunks()
    cmd_index = np.concatenate(cmd_blocks) if cmd_blocks else np.zeros(0, np.int64)
    return EventRows(table, cmd_index, start, anomalies)


def ensure_events(commands_path: Path) -> EventRows:
    """Event rows of a command file, cached next to it (`.events-v<EVENTS_VERSION>.parquet`)."""
    from bench.workload import load_arrow

    commands_path = Path(commands_path)
    cache = commands_path.with_name(f"{commands_path.stem}.events-v{EVENTS_VERSION}.parquet")
    if cache.exists():
        t = pq.read_table(cache)
        meta = t.schema.metadata or {}
        n = int(meta[b"n_commands"])
        anomalies = Counter(json.loads(meta[b"anomalies"]))
        cmd_index = t.column("cmd").to_numpy()
        return EventRows(t.drop_columns(["cmd"]).cast(EVENT_SCHEMA), cmd_index, n, anomalies)
    twin = commands_path.with_suffix(".parquet")
    if commands_path.suffix == ".ndjson" and twin.exists():  # stream it: memory stays modest
        rows = events_from_commands(pq.ParquetFile(twin).iter_batches(batch_size=100_000))
    else:
        rows = events_from_commands(load_arrow(commands_path))
    out = rows.table.append_column("cmd", pa.array(rows.cmd_index, pa.int64()))
    out = out.replace_schema_metadata(
        {"n_commands": str(rows.n_commands), "anomalies": json.dumps(dict(rows.anomalies))}
    )
    tmp = cache.with_name("." + cache.name + ".tmp")
    pq.write_table(out, tmp, compression="zstd")
    tmp.replace(cache)
    return rows


def timings(fn: Callable[[], object], repeat: int) -> tuple[dict[str, float], object]:
    """Run `fn` `repeat` times: seconds as min/median/max, and the last result."""
    times = []
    result: object = None
    for _ in range(max(1, repeat)):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return summary(times), result


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def percentiles_us(samples_ns: list[int]) -> dict[str, float]:
    """p50/p99 of latency samples, in microseconds."""
    a = np.asarray(samples_ns, np.float64) / 1000.0
    return {"p50_us": float(np.percentile(a, 50)), "p99_us": float(np.percentile(a, 99)),
            "n": len(samples_ns)}


def sample_keys(events: EventRows, n: int, seed: int = 1) -> list[Key]:
    """Keys with a committed offset, sampled for lookup latencies."""
    t = events.table
    mask = np.isin(t.column("kind").to_numpy(zero_copy_only=False), COMMITTED_KINDS)
    idx = np.flatnonzero(mask)
    rng = np.random.default_rng(seed)
    pick = rng.choice(idx, min(n, len(idx)), replace=True) if len(idx) else idx
    sub = t.take(pa.array(pick))
    return list(zip(sub.column("consumer_group").to_pylist(), sub.column("topic").to_pylist(),
                    sub.column("queue_id").to_pylist(), strict=True))
