"""Seeded, pinned workload of ledger commands (the `apply` NDJSON) for benchmarks.

Why: figures must compare across runs and turns, so a stream is a pure function of
`(n_commands, seed, groups, topics, queues)` and its shape is pinned here (DESIGN.md,
"Performance notes"); bump `GEN_VERSION` whenever the stream for a given key changes.

Shape: G groups x T topics x Q queues (default 200 x 10 x 8 = 16,000 keys) chosen uniformly.
Group 0 is a broadcast group (4 clients, each its own offsets), the others cluster with 4 clients
each (a pool of 4*G = 800 client ids); a key is pulled and committed by its owner, and now and
then a group rebalances (its queues move to another client, whose first pull restarts from the
committed offset). Consumers pull 32 ahead and commit behind their pulls, each commit advancing
its key by 1-32; producers append messages (store time = the ledger clock) and always stay ahead of
the fastest consumer; an operator resets a few keys (to-datetime, shift-by) and retention
truncates a queue now and then (never past a committed offset). Every command carries `ts`,
the injected ledger clock (about 10 commands per ms).

The stream is valid against the ledger's rules by construction: the generator carries the state
the ledger would have (committed, pulled, MaxOffset, MinOffset, append history) and emits only
commits that the fold accepts: increase-only per key and generation, <= the pulled offset, <=
MaxOffset. `bench.baselines.common.events_from_commands` re-checks this with a reference fold.
What it relies on (DESIGN.md, Rules): every group is set to `initial: earliest` first (so a first
pull starts at MinOffset, which retention keeps at 0 until every key of a queue has an offset);
a pull continues from the pulled offset for the client that pulled last (gaps are seconds, well
within client_timeout; the broadcast group gets PT10M) and otherwise, or after a reset, starts at
the committed offset; a pull returns min(start + max, MaxOffset) and producers make sure that is
start + max; a commit takes the generation of its client's last pull.

Generation is column-wise (numpy) in epochs of `EPOCH_SLOTS` slots; each epoch starts with the
retention truncations and one append per queue, and only keys hit by a reset or a rebalance take
a per-key Python path. NDJSON text is built with Arrow compute kernels.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
import pyarrow.parquet as pq

#: Bump when the stream produced for a given (n, seed, shape) changes: cached files carry it.
GEN_VERSION: int = 1

T0_MS: int = 1_700_000_000_000  # 2023-11-14T22:13:20Z: the injected clock's start
EPOCH_SLOTS: int = 32_768  # slots per epoch: a consumer step, an append, a reset, a rebalance
MS_TICK_P: float = 0.15  # per slot, chance the clock advances 1 ms (about 10 commands per ms)
P_APPEND: float = 0.006  # per slot: a producer append
P_RESET: float = 1.5e-5  # per slot: an operator reset (about 10 per 1M commands)
TRUNCATES_PER_EPOCH: float = 0.4  # Poisson mean of retention truncations per epoch
P_REBALANCE: float = 1e-5  # per slot: a clustering group moves its queues to other clients
PULL_MAX: int = 32  # pull batch size ("max" of a pull)
MAX_STEP: int = 32  # a commit advances its key by 1..MAX_STEP
CLIENTS_PER_GROUP: int = 4  # also the broadcast group's number of clients
PRODUCER_HEADROOM: float = 1.3  # producers append this much more than a key consumes on average
BACKLOG_APPENDS: int = 4  # preamble appends per queue, store times in the hour before T0
BACKLOG_PER_APPEND: int = 250
BROADCAST_TIMEOUT: str = "PT10M"  # the broadcast group's client_timeout (the others: default)
RESET_BACK_MS: tuple[int, int] = (60_000, 600_000)  # to-datetime: 1-10 minutes back
SHIFT_BACK: tuple[int, int] = (1, 1000)  # shift-by: -1..-1000

OPS: tuple[str, ...] = (
    "queue_append",
    "queue_truncate",
    "pull",
    "commit",
    "reset",
    "group_set",
)
OP_APPEND, OP_TRUNCATE, OP_PULL, OP_COMMIT, OP_RESET, OP_GROUP_SET = range(6)

_DICT_STR = pa.dictionary(pa.int32(), pa.string())

#: Column-wise form of a command stream (`load_arrow`); null where a field does not apply.
COMMAND_SCHEMA: pa.Schema = pa.schema(
    [
        ("op", pa.dictionary(pa.int8(), pa.string())),
        ("group", _DICT_STR),
        ("topic", _DICT_STR),
        ("queue_id", pa.int32()),
        ("client", _DICT_STR),
        ("offset", pa.int64()),
        ("count", pa.int64()),
        ("store_time", pa.int64()),
        ("min_offset", pa.int64()),
        ("max", pa.int32()),
        ("to_datetime", pa.int64()),
        ("shift_by", pa.int64()),
        ("execute", pa.bool_()),
        ("mode", pa.string()),
        ("initial", pa.string()),
        ("client_timeout", pa.string()),
        ("ts", pa.int64()),
    ]
)
_DICT_COLUMNS = ("op", "group", "topic", "client")

DATA_DIR: Path = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Shape:
    """Dimensions of a workload and the names it uses (`A-Z a-z 0-9 . _ - % |` only)."""

    groups: int = 200
    topics: int = 10
    queues: int = 8

    @property
    def n_keys(self) -> int:
        return self.groups * self.topics * self.queues

    @property
    def n_queues(self) -> int:
        return self.topics * self.queues

    @property
    def n_clients(self) -> int:
        return self.groups * CLIENTS_PER_GROUP

    def group_name(self, g: int) -> str:
        """Group 0 is the broadcast group."""
        width = max(3, len(str(self.groups - 1)))
        return f"GID_bcast-{g:0{width}d}" if g == 0 else f"GID_app-{g:0{width}d}"

    def topic_name(self, t: int) -> str:
        return f"topic-{t:02d}"

    def client_name(self, c: int) -> str:
        """RocketMQ-like `ip|pid` client ids."""
        return f"10.0.{c // 250}.{c % 250 + 1}|{20000 + c}"

    def group_names(self) -> list[str]:
        return [self.group_name(g) for g in range(self.groups)]

    def topic_names(self) -> list[str]:
        return [self.topic_name(t) for t in range(self.topics)]

    def client_names(self) -> list[str]:
        return [self.client_name(c) for c in range(self.n_clients)]


@dataclass
class Chunk:
    """Commands of one epoch, column-wise. `a`/`b` depend on `op`:
    append: count, store_time; truncate: min_offset; pull: max; commit: offset;
    reset: to_datetime ms or shift_by, mode (0 to_datetime, 1 shift_by);
    group_set: 1 if broadcast else 0."""

    op: np.ndarray
    group: np.ndarray
    topic: np.ndarray
    queue: np.ndarray
    client: np.ndarray
    a: np.ndarray
    b: np.ndarray
    ts: np.ndarray

    def __len__(self) -> int:
        return len(self.op)

    def head(self, n: int) -> Chunk:
        return Chunk(*(getattr(self, f)[:n] for f in _CHUNK_FIELDS))


_CHUNK_FIELDS = ("op", "group", "topic", "queue", "client", "a", "b", "ts")


@dataclass
class _State:
    """What the ledger would know, as far as the generator needs it to stay valid."""

    shape: Shape
    rng: np.random.Generator
    ts: int = T0_MS
    committed: np.ndarray = field(init=False)
    pulled: np.ndarray = field(init=False)
    pending: np.ndarray = field(init=False)  # a reset awaits the slot's next pull
    puller: np.ndarray = field(init=False)  # client of the slot's last pull (-1: none yet)
    touched: np.ndarray = field(init=False)
    rot: np.ndarray = field(init=False)  # per group rotation of queue -> client ownership
    max_off: np.ndarray = field(init=False)
    min_off: np.ndarray = field(init=False)
    stores: list[list[int]] = field(init=False)  # per queue: store_time of each append
    firsts: list[list[int]] = field(init=False)  # per queue: first offset of each append

    def __post_init__(self) -> None:
        s = self.shape
        n_slots = s.n_keys + s.n_queues * CLIENTS_PER_GROUP
        self.committed = np.zeros(n_slots, np.int64)
        self.pulled = np.zeros(n_slots, np.int64)
        self.pending = np.zeros(n_slots, bool)
        self.puller = np.full(n_slots, -1, np.int64)
        self.touched = np.zeros(n_slots, bool)
        self.rot = np.zeros(s.groups, np.int64)
        self.max_off = np.zeros(s.n_queues, np.int64)
        self.min_off = np.zeros(s.n_queues, np.int64)
        self.stores = [[] for _ in range(s.n_queues)]
        self.firsts = [[] for _ in range(s.n_queues)]
        per_group = s.topics * s.queues
        # Slot layout: clustering key k = g*T*Q + qg (g >= 1); broadcast client b of queue qg at
        # n_keys + qg*C + b. Slots of group 0 below n_keys are never used.
        qg = np.arange(s.n_keys) % per_group
        bq = np.repeat(np.arange(s.n_queues), CLIENTS_PER_GROUP)
        self.slot_group = np.concatenate([np.arange(s.n_keys) // per_group, np.zeros_like(bq)])
        self.slot_qg = np.concatenate([qg, bq])
        self.slot_b = np.concatenate(
            [np.full(s.n_keys, -1), np.tile(np.arange(CLIENTS_PER_GROUP), s.n_queues)]
        )
        self.is_bcast = self.slot_b >= 0

    def clients(self, slots: np.ndarray) -> np.ndarray:
        """Owner client of each slot under the current rotations."""
        g = self.slot_group[slots]
        owner = (self.slot_qg[slots] + self.rot[g]) % CLIENTS_PER_GROUP
        return g * CLIENTS_PER_GROUP + np.where(self.slot_b[slots] >= 0, self.slot_b[slots], owner)


def _mean_append_count(shape: Shape) -> float:
    """Messages per append so that producers outrun the average key by PRODUCER_HEADROOM."""
    per_key = (1 - P_APPEND - P_RESET) * (1 + MAX_STEP) / 2 / shape.n_keys
    return max(1.0, PRODUCER_HEADROOM * per_key * shape.n_queues / P_APPEND)


def _to_datetime_target(st: _State, qg: int, t_ms: int) -> tuple[int, int]:
    """(T, offset): the first message stored at or after T, from history before this epoch.

    T is moved back to the last store time known before the epoch if it is later, so the
    answer never depends on appends of the current epoch (whose sizes are decided last)."""
    stores = st.stores[qg]
    if t_ms > stores[-1]:
        t_ms = stores[-1]
    i = bisect.bisect_left(stores, t_ms)
    return t_ms, st.firsts[qg][i]


def _epoch(st: _State, preamble: bool) -> Chunk:
    """One epoch of commands; advances `st`."""
    s, rng = st.shape, st.rng
    per_group = s.topics * s.queues
    head: list[tuple[int, int, int, int, int, int, int]] = []  # op, g, topic, queue, c, a, b
    ts0 = st.ts

    if preamble:
        for g in range(s.groups):
            head.append((OP_GROUP_SET, g, -1, -1, -1, 1 if g == 0 else 0, 0))
        for k in range(BACKLOG_APPENDS):
            store = T0_MS - (BACKLOG_APPENDS - k) * 900_000
            for qg in range(s.n_queues):
                head.append((OP_APPEND, -1, qg // s.queues, qg % s.queues, -1,
                             BACKLOG_PER_APPEND, store))
                st.stores[qg].append(store)
                st.firsts[qg].append(int(st.max_off[qg]))
                st.max_off[qg] += BACKLOG_PER_APPEND
        # Broadcast clients pull every queue once first, so each starts at the group's
        # (earliest) offset rather than at another client's position. The backlog
        # (>= PULL_MAX) covers these pulls.
        for b in range(CLIENTS_PER_GROUP):
            for qg in range(s.n_queues):
                slot = s.n_keys + qg * CLIENTS_PER_GROUP + b
                head.append((OP_PULL, 0, qg // s.queues, qg % s.queues, b, PULL_MAX, 0))
                st.committed[slot] = 0
                st.pulled[slot] = PULL_MAX
                st.pending[slot] = False
                st.puller[slot] = b
                st.touched[slot] = True
    else:
        n_trunc = min(int(rng.poisson(TRUNCATES_PER_EPOCH)), s.n_queues)
        for qg in sorted(rng.choice(s.n_queues, n_trunc, replace=False).tolist()):
            slots = np.flatnonzero(st.slot_qg == qg)
            slots = slots[(st.slot_group[slots] != 0) | st.is_bcast[slots]]
            target = int(st.committed[slots].min())
            if target > st.min_off[qg]:
                st.min_off[qg] = target
                head.append((OP_TRUNCATE, -1, qg // s.queues, qg % s.queues, -1, target, 0))

    # Slots: consumer steps, appends, resets, rebalances (no command); a clock per slot.
    u = rng.random(EPOCH_SLOTS)
    is_app = u < P_APPEND
    is_reset = (u >= P_APPEND) & (u < P_APPEND + P_RESET)
    is_rebal = (u >= P_APPEND + P_RESET) & (u < P_APPEND + P_RESET + P_REBALANCE)
    is_step = ~(is_app | is_reset | is_rebal)
    ts_slot = ts0 + np.cumsum(rng.random(EPOCH_SLOTS) < MS_TICK_P)
    st.ts = int(ts_slot[-1])

    pos_s = np.flatnonzero(is_step)
    ns = len(pos_s)
    key = rng.integers(0, s.n_keys, ns)
    bcast = key < per_group  # group 0
    slot_s = np.where(
        bcast,
        s.n_keys + (key % per_group) * CLIENTS_PER_GROUP + rng.integers(0, CLIENTS_PER_GROUP, ns),
        key,
    )
    d = rng.integers(1, MAX_STEP + 1, ns)

    # Per slot in position order: committed = C0 + cumsum(d); the pulls needed follow.
    order = np.argsort(slot_s, kind="stable")
    ss, ds = slot_s[order], d[order]
    pos_sorted = pos_s[order]
    g_steps = st.slot_group[ss]
    # Owner of each step: rotations change at rebalances, for the steps after them.
    rebalances: list[tuple[int, int]] = []  # pos, group
    clients = st.clients(ss)
    for p in np.flatnonzero(is_rebal).tolist():
        if s.groups < 2:
            break
        g = int(rng.integers(1, s.groups))
        st.rot[g] += 1 + int(rng.integers(0, CLIENTS_PER_GROUP - 1))
        rebalances.append((p, g))
        moved = (g_steps == g) & (pos_sorted > p)
        clients[moved] = st.clients(ss[moved])
    start = np.ones(ns, bool)
    start[1:] = ss[1:] != ss[:-1]
    starts = np.flatnonzero(start)
    gid = np.cumsum(start) - 1
    cs = np.cumsum(ds)
    cum = cs - (cs[starts] - ds[starts])[gid]
    uslots = ss[starts]
    c0 = st.committed[uslots]
    # A pull continues from the pulled offset only for the same client with no pending reset
    # (clients pull well within client_timeout: the clock makes gaps of seconds).
    forced = st.pending[uslots] | (st.puller[uslots] != clients[starts])
    base = np.where(forced, c0, st.pulled[uslots])
    c = c0[gid] + cum
    npull = np.maximum(0, -((base[gid] - c) // PULL_MAX))  # ceil((c - base) / PULL_MAX)
    prev = np.empty_like(npull)
    prev[0:1] = 0
    prev[1:] = npull[:-1]
    prev[starts] = 0
    pull = npull > prev
    ptarget = base[gid] + PULL_MAX * npull
    last = np.r_[starts[1:] - 1, ns - 1] if ns else starts
    end_c = c[last]
    end_p = ptarget[last]
    end_pending = np.zeros(len(uslots), bool)
    end_puller = clients[last]

    # Resets and rebalances are rare: replay each touched slot through a small state machine.
    specials: dict[int, list[tuple[int, int, int]]] = {}  # slot -> (pos, kind, ref)
    for p, g in rebalances:
        for slot in range(g * per_group, (g + 1) * per_group):
            specials.setdefault(slot, []).append((p, 1, 0))
    reset_rows: list[tuple[int, int, int, int]] = []  # pos, slot, value, mode
    pos_r = np.flatnonzero(is_reset)
    if len(pos_r):
        known = st.touched[: s.n_keys] & (st.slot_group[: s.n_keys] != 0)
        first_pos = pos_sorted[starts]
        clustering = uslots < s.n_keys
        for p in pos_r.tolist():
            cand = np.union1d(np.flatnonzero(known), uslots[clustering & (first_pos < p)])
            if len(cand) == 0:
                continue
            slot = int(rng.choice(cand))
            if rng.random() < 0.5:
                value, mode = int(ts_slot[p]) - int(rng.integers(*RESET_BACK_MS)), 0
            else:
                value, mode = -int(rng.integers(*SHIFT_BACK)), 1
            specials.setdefault(slot, []).append((p, 0, len(reset_rows)))
            reset_rows.append((p, slot, value, mode))
    where = {int(x): i for i, x in enumerate(uslots.tolist())}
    for slot, evs in specials.items():
        qg = int(st.slot_qg[slot])
        lo = int(st.min_off[qg])
        gi = where.get(slot)
        steps = range(0) if gi is None else range(int(starts[gi]), int(last[gi]) + 1)
        evs = sorted(evs + [(int(pos_sorted[j]), 2, j) for j in steps])
        cur = int(st.committed[slot])
        pending = bool(st.pending[slot])
        puller = int(st.puller[slot])
        b = int(st.pulled[slot])
        k = 0
        for _, kind, j in evs:
            if kind == 0:
                p, _, value, mode = reset_rows[j]
                if mode == 0:
                    value, target = _to_datetime_target(st, qg, value)
                else:
                    target = cur + value
                reset_rows[j] = (p, slot, value, mode)
                cur = max(target, lo)
                pending = True
                continue
            if kind == 1:
                continue  # the owner changes: steps after it carry the new client
            client = int(clients[j])
            if pending or client != puller:
                b, k, pending, puller = cur, 0, False, client
            cur += int(ds[j])
            nk = max(0, -((b - cur) // PULL_MAX))
            c[j] = cur
            pull[j] = nk > k
            ptarget[j] = b + PULL_MAX * nk
            k = nk
        if gi is None:
            st.committed[slot] = cur
            st.pending[slot] = pending
        else:
            end_c[gi] = cur
            end_p[gi] = b + PULL_MAX * k
            end_pending[gi] = pending
            end_puller[gi] = puller

    st.committed[uslots] = end_c
    st.pulled[uslots] = end_p
    st.pending[uslots] = end_pending
    st.puller[uslots] = end_puller
    st.touched[uslots] = True

    # Producers: one append per queue at the epoch's start, then appends at their slots; each
    # append covers every pull up to the queue's next append (M_k = max(M_{k-1} + r_k, L_k)).
    pos_a = np.flatnonzero(is_app)
    qa = rng.integers(0, s.n_queues, len(pos_a))
    head_q = rng.permutation(s.n_queues)
    mean = _mean_append_count(s)
    hi = max(2, int(round(2 * mean)))
    app_q = np.concatenate([head_q, qa])
    app_pos = np.concatenate([np.full(s.n_queues, -1), pos_a])
    r = rng.integers(1, hi, len(app_q))
    stride = EPOCH_SLOTS + 1
    akey = app_q * stride + app_pos + 1
    aorder = np.argsort(akey)
    akey_s = akey[aorder]
    need = np.zeros(len(akey), np.int64)
    pull_sorted = np.flatnonzero(pull)
    pq_ = st.slot_qg[ss[pull_sorted]]
    pkey = pq_ * stride + pos_sorted[pull_sorted] + 1
    cover = np.searchsorted(akey_s, pkey, side="right") - 1
    np.maximum.at(need, cover, ptarget[pull_sorted])
    aq = app_q[aorder]
    rs = r[aorder]
    astart = np.ones(len(aq), bool)
    astart[1:] = aq[1:] != aq[:-1]
    agid_first = np.flatnonzero(astart)
    agid = np.cumsum(astart) - 1
    rc = np.cumsum(rs)
    rrel = rc - (rc[agid_first] - rs[agid_first])[agid]
    v = need - rrel
    m_start = st.max_off[aq[agid_first]]
    v[agid_first] = np.maximum(v[agid_first], m_start)
    big = np.int64(1) << 42
    acc = np.maximum.accumulate(v + aq * big) - aq * big
    m_after = rrel + acc
    m_before = np.empty_like(m_after)
    m_before[1:] = m_after[:-1]
    m_before[agid_first] = m_start
    counts_sorted = m_after - m_before
    counts = np.empty_like(counts_sorted)
    counts[aorder] = counts_sorted
    firsts = np.empty_like(m_before)
    firsts[aorder] = m_before
    last_a = np.r_[agid_first[1:] - 1, len(aq) - 1]
    st.max_off[aq[agid_first]] = m_after[last_a]
    app_ts = np.where(app_pos < 0, ts0, ts_slot[np.maximum(app_pos, 0)])
    for j in aorder.tolist():  # chronological within a queue (akey order)
        q = int(app_q[j])
        st.stores[q].append(int(app_ts[j]))
        st.firsts[q].append(int(firsts[j]))

    # Layout: head, epoch-start appends, then slots in order (a step's pull before its commit).
    n_head = len(head) + s.n_queues
    per_slot = np.zeros(EPOCH_SLOTS, np.int64)
    per_slot[pos_a] = 1
    pull_by_pos = np.zeros(EPOCH_SLOTS, bool)
    pull_by_pos[pos_sorted] = pull
    per_slot[pos_s] = 1 + pull_by_pos[pos_s]
    for p, *_ in reset_rows:
        per_slot[p] = 1
    slot_first = n_head + np.cumsum(per_slot) - per_slot
    m = n_head + int(per_slot.sum())
    op = np.empty(m, np.int8)
    grp = np.full(m, -1, np.int32)
    top = np.full(m, -1, np.int32)
    que = np.full(m, -1, np.int32)
    cli = np.full(m, -1, np.int32)
    a = np.zeros(m, np.int64)
    b = np.zeros(m, np.int64)
    ts = np.empty(m, np.int64)
    if head:
        h = np.array(head, np.int64)
        nh = len(head)
        op[:nh], grp[:nh], top[:nh], que[:nh] = h[:, 0], h[:, 1], h[:, 2], h[:, 3]
        cli[:nh], a[:nh], b[:nh] = h[:, 4], h[:, 5], h[:, 6]
        ts[:nh] = ts0
    # Epoch-start appends, then slot appends (unsorted app_* arrays: head_q first).
    idx_head_app = np.arange(len(head), n_head)
    idx_app = np.concatenate([idx_head_app, slot_first[pos_a]])
    op[idx_app] = OP_APPEND
    top[idx_app] = app_q // s.queues
    que[idx_app] = app_q % s.queues
    a[idx_app] = counts
    b[idx_app] = app_ts
    ts[idx_head_app] = ts0
    ts[slot_first[pos_a]] = ts_slot[pos_a]
    # Consumer steps.
    steps_slot = ss
    steps_pos = pos_sorted
    first = slot_first[steps_pos]
    commit_idx = first + pull
    qg_steps = st.slot_qg[steps_slot]
    for idx, code in ((commit_idx, OP_COMMIT), (first[pull], OP_PULL)):
        sel = slice(None) if code == OP_COMMIT else pull
        op[idx] = code
        grp[idx] = g_steps[sel]
        top[idx] = qg_steps[sel] // s.queues
        que[idx] = qg_steps[sel] % s.queues
        cli[idx] = clients[sel]
        ts[idx] = ts_slot[steps_pos[sel]]
    a[commit_idx] = c
    a[first[pull]] = PULL_MAX
    for p, slot, value, mode in reset_rows:
        i = int(slot_first[p])
        qg = int(st.slot_qg[slot])
        op[i] = OP_RESET
        grp[i] = int(st.slot_group[slot])
        top[i], que[i] = qg // s.queues, qg % s.queues
        a[i], b[i] = value, mode
        ts[i] = ts_slot[p]
    return Chunk(op, grp, top, que, cli, a, b, ts)


def chunks(n_commands: int, seed: int = 7, shape: Shape | None = None) -> Iterator[Chunk]:
    """The stream as column-wise chunks (one per epoch), exactly `n_commands` in total."""
    shape = shape or Shape()
    if shape.groups < 2 or shape.topics < 1 or shape.queues < 1:
        raise ValueError("a workload needs >= 2 groups (group 0 is broadcast), >= 1 topic, queue")
    st = _State(shape, np.random.default_rng(seed))
    left = n_commands
    preamble = True
    while left > 0:
        ch = _epoch(st, preamble)
        preamble = False
        if len(ch) > left:
            ch = ch.head(left)
        left -= len(ch)
        yield ch


def _dicts(ch: Chunk, shape: Shape, names: tuple[list[str], list[str], list[str]]) -> list[dict]:
    gn, tn, cn = names
    out: list[dict] = []
    rows = zip(*(getattr(ch, f).tolist() for f in _CHUNK_FIELDS), strict=True)
    for op, g, t, q, c, a, b, ts in rows:
        if op == OP_COMMIT:
            out.append({"op": "commit", "group": gn[g], "topic": tn[t], "queue_id": q,
                        "offset": a, "client": cn[c], "ts": ts})
        elif op == OP_PULL:
            out.append({"op": "pull", "group": gn[g], "topic": tn[t], "queue_id": q,
                        "client": cn[c], "max": a, "ts": ts})
        elif op == OP_APPEND:
            out.append({"op": "queue_append", "topic": tn[t], "queue_id": q, "count": a,
                        "store_time": b, "ts": ts})
        elif op == OP_TRUNCATE:
            out.append({"op": "queue_truncate", "topic": tn[t], "queue_id": q,
                        "min_offset": a, "ts": ts})
        elif op == OP_RESET:
            d = {"op": "reset", "group": gn[g], "topic": tn[t], "queue_id": q}
            d["to_datetime" if b == 0 else "shift_by"] = a
            d["execute"] = True
            d["ts"] = ts
            out.append(d)
        else:
            d = {"op": "group_set", "group": gn[g],
                 "mode": "broadcast" if a else "clustering", "initial": "earliest"}
            if a:
                d["client_timeout"] = BROADCAST_TIMEOUT
            d["ts"] = ts
            out.append(d)
    return out


def _names(shape: Shape) -> tuple[list[str], list[str], list[str]]:
    return shape.group_names(), shape.topic_names(), shape.client_names()


def generate(
    n_commands: int, seed: int = 7, groups: int = 200, topics: int = 10, queues: int = 8
) -> Iterator[dict]:
    """The command stream as dicts (the `apply` NDJSON objects), deterministic per arguments."""
    shape = Shape(groups, topics, queues)
    names = _names(shape)
    for ch in chunks(n_commands, seed, shape):
        yield from _dicts(ch, shape, names)


def _lit(s: str) -> pa.Scalar:
    return pa.scalar(s, pa.string())


def _istr(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def chunk_ndjson(ch: Chunk, shape: Shape, names: tuple[list[str], list[str], list[str]]) -> bytes:
    """NDJSON text of a chunk, identical to `json.dumps(d, separators=(",", ":"))` per dict."""
    gn, tn, cn = (pa.array(x, pa.string()) for x in names)
    parts: list[pa.Array] = []
    perm: list[np.ndarray] = []

    def name(arr: pa.Array, idx: np.ndarray) -> pa.Array:
        return arr.take(pa.array(idx))

    for code in (OP_COMMIT, OP_PULL, OP_APPEND, OP_TRUNCATE):
        idx = np.flatnonzero(ch.op == code)
        if len(idx) == 0:
            continue
        t, q, ts = name(tn, ch.topic[idx]), _istr(ch.queue[idx]), _istr(ch.ts[idx])
        if code == OP_COMMIT:
            pieces = [_lit('{"op":"commit","group":"'), name(gn, ch.group[idx]),
                      _lit('","topic":"'), t, _lit('","queue_id":'), q,
                      _lit(',"offset":'), _istr(ch.a[idx]),
                      _lit(',"client":"'), name(cn, ch.client[idx]), _lit('","ts":'), ts]
        elif code == OP_PULL:
            pieces = [_lit('{"op":"pull","group":"'), name(gn, ch.group[idx]),
                      _lit('","topic":"'), t, _lit('","queue_id":'), q,
                      _lit(',"client":"'), name(cn, ch.client[idx]),
                      _lit('","max":'), _istr(ch.a[idx]), _lit(',"ts":'), ts]
        elif code == OP_APPEND:
            pieces = [_lit('{"op":"queue_append","topic":"'), t, _lit('","queue_id":'), q,
                      _lit(',"count":'), _istr(ch.a[idx]),
                      _lit(',"store_time":'), _istr(ch.b[idx]), _lit(',"ts":'), ts]
        else:
            pieces = [_lit('{"op":"queue_truncate","topic":"'), t, _lit('","queue_id":'), q,
                      _lit(',"min_offset":'), _istr(ch.a[idx]), _lit(',"ts":'), ts]
        pieces.append(_lit("}\n"))
        parts.append(pc.binary_join_element_wise(*pieces, ""))
        perm.append(idx)
    rare = np.flatnonzero((ch.op == OP_RESET) | (ch.op == OP_GROUP_SET))
    if len(rare):
        sub = Chunk(*(getattr(ch, f)[rare] for f in _CHUNK_FIELDS))
        lines = [json.dumps(d, separators=(",", ":")) + "\n" for d in _dicts(sub, shape, names)]
        parts.append(pa.array(lines, pa.string()))
        perm.append(rare)
    allp = np.concatenate(perm)
    inv = np.empty_like(allp)
    inv[allp] = np.arange(len(allp))
    lines_arr = pa.concat_arrays(parts).take(pa.array(inv))
    return string_bytes(lines_arr)


def string_bytes(arr: pa.Array) -> bytes:
    """The concatenated values of a string array without a Python object per line."""
    arr = pa.concat_arrays([arr])  # fresh, offset 0
    offsets = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1)
    return arr.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]]


def chunk_arrow(ch: Chunk, shape: Shape, dicts: tuple[pa.Array, ...]) -> pa.RecordBatch:
    """A chunk as a record batch of COMMAND_SCHEMA (fixed dictionaries across batches)."""
    ops_d, gn, tn, cn = dicts
    op = ch.op
    n = len(op)

    def col(values: np.ndarray, mask: np.ndarray, typ: pa.DataType) -> pa.Array:
        return pa.array(values, typ, mask=~mask)

    def dcol(codes: np.ndarray, dictionary: pa.Array, mask: np.ndarray) -> pa.Array:
        idx = pa.array(codes.astype(np.int32), pa.int32(), mask=~mask)
        return pa.DictionaryArray.from_arrays(idx, dictionary)

    is_g = (op == OP_COMMIT) | (op == OP_PULL) | (op == OP_RESET) | (op == OP_GROUP_SET)
    is_q = op != OP_GROUP_SET
    is_c = (op == OP_COMMIT) | (op == OP_PULL)
    is_gs = op == OP_GROUP_SET
    is_r = op == OP_RESET
    bcast = is_gs & (ch.a == 1)
    arrays = [
        pa.DictionaryArray.from_arrays(pa.array(op, pa.int8()), ops_d),
        dcol(ch.group, gn, is_g),
        dcol(ch.topic, tn, is_q),
        col(ch.queue, is_q, pa.int32()),
        dcol(ch.client, cn, is_c),
        col(ch.a, op == OP_COMMIT, pa.int64()),
        col(ch.a, op == OP_APPEND, pa.int64()),
        col(ch.b, op == OP_APPEND, pa.int64()),
        col(ch.a, op == OP_TRUNCATE, pa.int64()),
        col(ch.a, op == OP_PULL, pa.int32()),
        col(ch.a, is_r & (ch.b == 0), pa.int64()),
        col(ch.a, is_r & (ch.b == 1), pa.int64()),
        pa.array(np.ones(n, bool), pa.bool_(), mask=~is_r),
        pa.array(np.where(bcast, "broadcast", "clustering"), pa.string(), mask=~is_gs),
        pa.array(np.full(n, "earliest"), pa.string(), mask=~is_gs),
        pa.array(np.full(n, BROADCAST_TIMEOUT), pa.string(), mask=~bcast),
        pa.array(ch.ts, pa.int64()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=COMMAND_SCHEMA)


def _dictionaries(shape: Shape) -> tuple[pa.Array, ...]:
    return (pa.array(list(OPS), pa.string()),) + tuple(
        pa.array(x, pa.string()) for x in _names(shape)
    )


def file_stem(n_commands: int, seed: int = 7, shape: Shape | None = None) -> str:
    shape = shape or Shape()
    return (f"commands-n{n_commands}-s{seed}-{shape.groups}x{shape.topics}x{shape.queues}"
            f"-v{GEN_VERSION}")


def write_files(
    n_commands: int, seed: int, shape: Shape, ndjson: Path, parquet: Path | None
) -> None:
    """Write the stream as NDJSON (and its column-wise Parquet twin), epoch by epoch."""
    names = _names(shape)
    dicts = _dictionaries(shape)
    writer = None
    try:
        with open(ndjson, "wb") as f:
            if parquet is not None:
                writer = pq.ParquetWriter(parquet, COMMAND_SCHEMA, compression="zstd")
            for ch in chunks(n_commands, seed, shape):
                f.write(chunk_ndjson(ch, shape, names))
                if writer is not None:
                    writer.write_batch(chunk_arrow(ch, shape, dicts))
    finally:
        if writer is not None:
            writer.close()


def ensure_file(
    n_commands: int,
    seed: int = 7,
    groups: int = 200,
    topics: int = 10,
    queues: int = 8,
    data_dir: Path | None = None,
) -> Path:
    """NDJSON of the stream under bench/data/, written once and reused (its Parquet twin too)."""
    shape = Shape(groups, topics, queues)
    d = Path(data_dir) if data_dir is not None else DATA_DIR
    d.mkdir(parents=True, exist_ok=True)
    return publish_twins(d, file_stem(n_commands, seed, shape),
                         lambda nd, pqt: write_files(n_commands, seed, shape, nd, pqt))


def publish_twins(d: Path, stem: str, write: Callable[[Path, Path], None]) -> Path:
    """`d/stem.ndjson` and its Parquet twin, written once by `write(ndjson, parquet)` into
    temporary names and renamed into place (a killed run leaves no half file to reuse)."""
    nd, pqt = d / f"{stem}.ndjson", d / f"{stem}.parquet"
    if nd.exists() and pqt.exists():
        return nd
    tmp_nd, tmp_pq = d / f".{stem}.ndjson.{os.getpid()}", d / f".{stem}.parquet.{os.getpid()}"
    try:
        write(tmp_nd, tmp_pq)
        os.replace(tmp_pq, pqt)
        os.replace(tmp_nd, nd)
    finally:
        for p in (tmp_nd, tmp_pq):
            if p.exists():
                p.unlink()
    return nd


def read_ndjson_arrow(path: Path) -> pa.Table:
    """Parse command NDJSON into COMMAND_SCHEMA (slower than the Parquet twin; any source)."""
    plain = pa.schema(
        [pa.field(f.name, pa.string()) if f.name in _DICT_COLUMNS else f for f in COMMAND_SCHEMA]
    )
    opts = pajson.ParseOptions(explicit_schema=plain, unexpected_field_behavior="ignore")
    t = pajson.read_json(path, parse_options=opts).select(plain.names)
    cols = []
    for f in COMMAND_SCHEMA:
        col = t.column(f.name)
        cols.append(col.dictionary_encode() if f.name in _DICT_COLUMNS else col)
    t = pa.table(cols, names=COMMAND_SCHEMA.names)
    return t.cast(COMMAND_SCHEMA)


def load_arrow(path: Path | str) -> pa.Table:
    """Column-wise commands: the Parquet twin of an NDJSON file when present, else parsed."""
    path = Path(path)
    if path.suffix == ".parquet":
        return pq.read_table(path)
    twin = path.with_suffix(".parquet")
    if twin.exists():
        return pq.read_table(twin)
    return read_ndjson_arrow(path)


def commands_table(
    n_commands: int, seed: int = 7, groups: int = 200, topics: int = 10, queues: int = 8
) -> pa.Table:
    """The stream column-wise in memory, without files (tests, small sizes)."""
    shape = Shape(groups, topics, queues)
    dicts = _dictionaries(shape)
    batches = [chunk_arrow(ch, shape, dicts) for ch in chunks(n_commands, seed, shape)]
    return pa.Table.from_batches(batches, schema=COMMAND_SCHEMA)


def main(argv: list[str] | None = None) -> None:
    """`python -m bench.workload N [seed]`: write (or reuse) the file and print its path."""
    import argparse
    import time

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("n_commands", type=int)
    ap.add_argument("seed", type=int, nargs="?", default=7)
    ns = ap.parse_args(argv)
    t = time.perf_counter()
    path = ensure_file(ns.n_commands, ns.seed)
    print(f"{path} ({time.perf_counter() - t:.1f} s)")


if __name__ == "__main__":
    main()
