"""Results of a column-wise run: typed results (one per line) or one Arrow table
(`apply_arrow`), built from the run's per-command results and its column-wise ones."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.commands.results import (
    CommitResult,
    PullResult,
    QueueResult,
    Result,
    SyncResult,
)
from ledger.fold.position import NULL

#: Results of an Arrow apply, one row per line; `detail` holds any other field of the line's
#: result as JSON (a queue's bounds, a reset's plan, a group's settings).
RESULT_SCHEMA: pa.Schema = pa.schema([
    pa.field("line", pa.int64(), nullable=False),
    pa.field("op", pa.string()),
    pa.field("seq", pa.int64()),
    pa.field("error", pa.string()),
    pa.field("accepted", pa.bool_()),
    pa.field("reason", pa.string()),
    pa.field("offset", pa.int64()),
    pa.field("next_offset", pa.int64()),
    pa.field("generation", pa.int64()),
    pa.field("count", pa.int64()),
    pa.field("detail", pa.string()),
])
_RESULT_FIELDS = frozenset(RESULT_SCHEMA.names)
_encode_json = msgspec.json.Encoder().encode


def set_seqs(results: Iterable[Result], seqs: Iterable[int]) -> None:
    """A line's `seq` is its last event's: set on lines that wrote one (seq >= 0) and succeeded."""
    for result, seq in zip(results, seqs, strict=True):
        if seq >= 0 and result.error is None:
            result.seq = seq


def results_table(typed: list[Result]) -> pa.Table:
    """Typed results (the per-command form) as RESULT_SCHEMA rows."""
    results: list[dict[str, Any]] = [msgspec.to_builtins(r) for r in typed]
    columns: dict[str, list[Any]] = {name: [r.get(name) for r in results]
                                     for name in RESULT_SCHEMA.names[:-1]}
    columns["op"] = [op if op is None or type(op) is str else str(op) for op in columns["op"]]
    columns["detail"] = [
        None if _RESULT_FIELDS.issuperset(r) else
        _encode_json({k: v for k, v in r.items() if k not in _RESULT_FIELDS}).decode()
        for r in results]
    return pa.Table.from_pydict(columns, schema=RESULT_SCHEMA)


#: A refused commit's reason, by `invalid` (0: stale, 1: invalid).
_REASONS = pa.array(["stale", "invalid"], pa.string())


def ascending(values: np.ndarray, *, strict: bool = True) -> bool:
    """Whether `values` are in ascending order (`strict`: no two equal): rows already in line
    order need no take."""
    if len(values) < 2:
        return True
    later, earlier = values[1:], values[:-1]
    return bool((later > earlier).all() if strict else (later >= earlier).all())


def _join(mask: np.ndarray, *pieces: str | pa.Array) -> pa.Array:
    """The rows of `mask`, each the concatenation of the pieces (literals or arrays)."""
    picked = pa.array(mask)
    parts = [pa.scalar(p, pa.string()) if isinstance(p, str) else p.filter(picked)
             for p in pieces]
    if not any(isinstance(p, pa.Array) for p in parts):
        return pa.array([], pa.string())
    return pc.binary_join_element_wise(*parts, "")


def _in_line_order(parts: list[tuple[np.ndarray, Any]], concat: Any) -> Any:
    """Parts of a run's results (each: its lines' indices, ascending, and their rows), every
    line in exactly one, joined in line order: the inverse permutation, or no copy at all when
    the parts are in order already (a run of one kind)."""
    at = np.concatenate([rows for rows, _ in parts])
    joined = concat([part for _, part in parts])
    if ascending(at):
        return joined
    order = np.empty(len(at), np.int64)
    order[at] = np.arange(len(at))
    return joined.take(pa.array(order, pa.int64()))


@dataclass
class VectorResults:
    """Results of the lines folded column-wise, as columns: dicts are built once seqs are known."""

    rows: np.ndarray  # line index in the run, ascending
    is_pull: np.ndarray
    accepted: np.ndarray
    invalid: np.ndarray
    offset: np.ndarray  # commit: the offset, or the committed offset when refused; pull: next
    generation: np.ndarray
    count: np.ndarray


@dataclass
class SyncResults:
    """Results of the syncs folded column-wise (ledger/executor/sync_fold.py), as columns."""

    rows: np.ndarray  # line index in the run, ascending
    group: pa.Array
    topic: pa.Array
    queue_id: np.ndarray
    before: np.ndarray  # the committed offset before, NULL for none
    offset: np.ndarray
    changed: np.ndarray

    def typed(self, line_base: int, seqs: np.ndarray) -> list[SyncResult]:
        """Each row's SyncResult (`seqs`: each line's seq, -1 for none)."""
        return [SyncResult(line=line_base + row, op="sync", seq=seq if changed else None,
                           consumer_group=g, topic=t, queue_id=q,
                           from_offset=None if b == NULL else b, to_offset=o,
                           changed=changed)
                for row, seq, g, t, q, b, o, changed in zip(
                    self.rows.tolist(), seqs[self.rows].tolist(), self.group.to_pylist(),
                    self.topic.to_pylist(), self.queue_id.tolist(), self.before.tolist(),
                    self.offset.tolist(), self.changed.tolist(), strict=True)]

    def _fields(self) -> list[str | pa.Array]:
        """The pieces of `"consumer_group":...,"changed":` (without its value) per row."""
        before = pa.array(self.before, pa.int64())
        from_offset = pc.if_else(pc.equal(before, NULL), "null", before.cast(pa.string()))
        return ['"consumer_group":"', self.group, '","topic":"', self.topic, '","queue_id":',
                pa.array(self.queue_id, pa.int64()).cast(pa.string()), ',"from_offset":',
                from_offset, ',"to_offset":', pa.array(self.offset, pa.int64()).cast(pa.string()),
                ',"changed":']

    def json_lines(self, line_base: int, seqs: np.ndarray) -> list[tuple[np.ndarray, pa.Array]]:
        """The rows' JSON lines as msgspec writes their SyncResult: (rows, lines) of the changed
        ones (with a seq), then the others."""
        line = pa.array(self.rows + line_base, pa.int64()).cast(pa.string())
        seq = pa.array(seqs[self.rows], pa.int64()).cast(pa.string())
        fields, changed = self._fields(), self.changed
        return [
            (self.rows[changed], _join(changed, '{"line":', line, ',"op":"sync","seq":', seq, ",",
                                       *fields, "true}\n")),
            (self.rows[~changed], _join(~changed, '{"line":', line, ',"op":"sync",', *fields,
                                        "false}\n")),
        ]

    def table(self, line_base: int, seqs: np.ndarray) -> pa.Table:
        """The rows as RESULT_SCHEMA rows, their own fields as `detail`."""
        n = len(self.rows)
        every = np.ones(n, bool)
        detail = _join(every, "{", *self._fields(),
                       pc.if_else(pa.array(self.changed), "true}", "false}"))
        return pa.table([
            pa.array(self.rows + line_base, pa.int64()),
            pa.repeat(pa.scalar("sync", pa.string()), n),
            pa.array(seqs[self.rows], pa.int64(), mask=~self.changed),
            *(pa.nulls(n, f.type) for f in RESULT_SCHEMA if f.name not in
              ("line", "op", "seq", "detail")),
            detail,
        ], schema=RESULT_SCHEMA)


@dataclass
class AppendResults:
    """Results of the queue appends folded column-wise (ledger/executor/append_fold.py)."""

    rows: np.ndarray  # line index in the run, ascending
    topic: pa.Array
    queue_id: np.ndarray
    min_offset: np.ndarray
    max_offset: np.ndarray  # after the append

    def typed(self, line_base: int, seqs: np.ndarray) -> list[QueueResult]:
        """Each row's QueueResult (`seqs`: each line's seq)."""
        return [QueueResult(line=line_base + row, op="queue_append", seq=seq, topic=t,
                            queue_id=q, min_offset=lo, max_offset=hi)
                for row, seq, t, q, lo, hi in zip(
                    self.rows.tolist(), seqs[self.rows].tolist(), self.topic.to_pylist(),
                    self.queue_id.tolist(), self.min_offset.tolist(), self.max_offset.tolist(),
                    strict=True)]

    def _fields(self) -> list[str | pa.Array]:
        return ['"topic":"', self.topic, '","queue_id":',
                pa.array(self.queue_id, pa.int64()).cast(pa.string()), ',"min_offset":',
                pa.array(self.min_offset, pa.int64()).cast(pa.string()), ',"max_offset":',
                pa.array(self.max_offset, pa.int64()).cast(pa.string()), "}"]

    def json_lines(self, line_base: int, seqs: np.ndarray) -> list[tuple[np.ndarray, pa.Array]]:
        """The rows' JSON lines as msgspec writes their QueueResult."""
        every = np.ones(len(self.rows), bool)
        line = pa.array(self.rows + line_base, pa.int64()).cast(pa.string())
        seq = pa.array(seqs[self.rows], pa.int64()).cast(pa.string())
        return [(self.rows, _join(every, '{"line":', line, ',"op":"queue_append","seq":', seq,
                                  ",", *self._fields(), "\n"))]

    def table(self, line_base: int, seqs: np.ndarray) -> pa.Table:
        """The rows as RESULT_SCHEMA rows, their own fields as `detail`."""
        n = len(self.rows)
        return pa.table([
            pa.array(self.rows + line_base, pa.int64()),
            pa.repeat(pa.scalar("queue_append", pa.string()), n),
            pa.array(seqs[self.rows], pa.int64()),
            *(pa.nulls(n, f.type) for f in RESULT_SCHEMA if f.name not in
              ("line", "op", "seq", "detail")),
            _join(np.ones(n, bool), "{", *self._fields()),
        ], schema=RESULT_SCHEMA)


@dataclass
class RunOutput:
    """A folded run: its events (EVENT_SCHEMA, seq not yet assigned) and one result per line
    (None where `vector` holds it), with the index of the line's last event in `events` (-1:
    none)."""

    events: pa.Table
    results: list[Result | None]
    last_event: np.ndarray
    line_base: int
    vector: VectorResults | None = None
    syncs: SyncResults | None = None
    appends: AppendResults | None = None

    @property
    def _apart(self) -> list[SyncResults | AppendResults]:
        """The results of the other kinds folded column-wise."""
        return [r for r in (self.syncs, self.appends) if r is not None]

    @property
    def vector_rows(self) -> int:
        """Lines folded column-wise."""
        return (sum(len(r.rows) for r in self._apart)
                + (0 if self.vector is None else len(self.vector.rows)))

    def _per_command_results(self, first_seq: int) -> tuple[np.ndarray, np.ndarray]:
        """(each line's seq or -1, the lines folded per command), those lines' seqs set."""
        seqs = np.where(self.last_event >= 0, self.last_event + first_seq, -1)
        per_command = np.ones(len(self.results), bool)
        if self.vector is not None:
            per_command[self.vector.rows] = False
        for apart in self._apart:
            per_command[apart.rows] = False
        rows = np.nonzero(per_command)[0]
        set_seqs([self.results[i] for i in rows.tolist()], seqs[rows].tolist())  # type: ignore[misc]
        return seqs, rows

    def final_results(self, first_seq: int) -> list[Result]:
        """Every line's result, with `seq` (its last event's) once the events are durable."""
        seqs, _ = self._per_command_results(first_seq)
        if self.vector is not None:
            self._fill_vector(self.vector, seqs)
        for apart in self._apart:
            for row, result in zip(apart.rows.tolist(), apart.typed(self.line_base, seqs),
                                   strict=True):
                self.results[row] = result
        return self.results  # type: ignore[return-value]

    def errors(self) -> int:
        """Lines whose result carries an error (refused commits included)."""
        slow = sum(1 for r in self.results if r is not None and r.error is not None)
        v = self.vector
        return slow + (0 if v is None else int((~v.is_pull & ~v.accepted).sum()))

    def json_lines(self, first_seq: int) -> pa.Array:
        """Every line's result as the JSON `apply` prints, its newline included (one string
        per line, in line order, exactly msgspec's encoding of its typed result): the lines
        folded column-wise are written by Arrow string kernels, without a result object each."""
        seqs, rows = self._per_command_results(first_seq)
        slow = pa.array([_encode_json(self.results[i]).decode() + "\n" for i in rows.tolist()],
                        pa.string())
        parts = [(rows, slow)]
        v = self.vector
        if v is not None:
            line = pa.array(v.rows + self.line_base, pa.int64()).cast(pa.string())
            offset = pa.array(v.offset, pa.int64()).cast(pa.string())
            pull, accepted = v.is_pull, v.accepted & ~v.is_pull
            refused = ~v.is_pull & ~v.accepted
            seq = pa.array(seqs[v.rows], pa.int64()).cast(pa.string())
            # (a string per row made in numpy, then converted, was a fifth of the results' time)
            reason = _REASONS.take(pa.array(v.invalid.astype(np.int8)))
            parts += [
                (v.rows[pull], _join(
                    pull, '{"line":', line, ',"op":"pull","seq":', seq, ',"next_offset":',
                    offset, ',"generation":',
                    pa.array(v.generation, pa.int64()).cast(pa.string()), ',"count":',
                    pa.array(v.count, pa.int64()).cast(pa.string()), "}\n")),
                (v.rows[accepted], _join(accepted, '{"line":', line, ',"op":"commit","seq":', seq,
                                         ',"accepted":true,"reason":null,"offset":', offset,
                                         "}\n")),
                (v.rows[refused], _join(refused, '{"line":', line,
                                        ',"op":"commit","error":"commit refused: ', reason,
                                        '","accepted":false,"reason":"', reason, '","offset":',
                                        offset, "}\n")),
            ]
        for apart in self._apart:
            parts += apart.json_lines(self.line_base, seqs)
        return _in_line_order(parts, pa.concat_arrays)

    def result_table(self, first_seq: int) -> pa.Table:
        """`final_results` as RESULT_SCHEMA columns, without a dict per line folded column-wise."""
        seqs, rows = self._per_command_results(first_seq)
        parts = [(rows, results_table([self.results[i] for i in rows.tolist()]))]  # type: ignore[misc]
        v = self.vector
        if v is not None:
            refused = ~v.is_pull & ~v.accepted
            reason = np.where(v.invalid, 1, 2)
            reasons = pa.array([None, "invalid", "stale"], pa.string())
            errors = pa.array([None, "commit refused: invalid", "commit refused: stale"],
                              pa.string())
            code = pa.array(np.where(refused, reason, 0).astype(np.int8))
            pull, commit = v.is_pull, ~v.is_pull
            parts.append((v.rows, pa.table([
                pa.array(v.rows + self.line_base, pa.int64()),
                pa.array(["commit", "pull"], pa.string()).take(pa.array(pull.astype(np.int8))),
                pa.array(seqs[v.rows], pa.int64(), mask=refused),
                errors.take(code),
                pa.array(v.accepted, pa.bool_(), mask=pull),
                reasons.take(code),
                pa.array(v.offset, pa.int64(), mask=pull),
                pa.array(v.offset, pa.int64(), mask=commit),
                pa.array(v.generation, pa.int64(), mask=commit),
                pa.array(v.count, pa.int64(), mask=commit),
                pa.nulls(len(v.rows), pa.string()),
            ], schema=RESULT_SCHEMA)))
        for apart in self._apart:
            parts.append((apart.rows, apart.table(self.line_base, seqs)))
        return _in_line_order(parts, pa.concat_tables)

    def _fill_vector(self, v: VectorResults, seqs: np.ndarray) -> None:
        results, base = self.results, self.line_base
        p = v.is_pull
        rows = v.rows[p]
        for row, line, nxt, gen, cnt, seq in zip(
                rows.tolist(), (rows + base).tolist(), v.offset[p].tolist(),
                v.generation[p].tolist(), v.count[p].tolist(), seqs[rows].tolist(), strict=True):
            results[row] = PullResult(line=line, op="pull", seq=seq, next_offset=nxt,
                                      generation=gen, count=cnt)
        a = v.accepted
        rows = v.rows[a]
        for row, line, off, seq in zip(rows.tolist(), (rows + base).tolist(),
                                       v.offset[a].tolist(), seqs[rows].tolist(), strict=True):
            results[row] = CommitResult(line=line, op="commit", seq=seq, accepted=True,
                                        reason=None, offset=off)
        refused = ~p & ~a
        rows = v.rows[refused]
        for row, line, off, bad in zip(rows.tolist(), (rows + base).tolist(),
                                       v.offset[refused].tolist(), v.invalid[refused].tolist(),
                                       strict=True):
            reason = "invalid" if bad else "stale"
            results[row] = CommitResult(line=line, op="commit", accepted=False, reason=reason,
                                        offset=off, error=f"commit refused: {reason}")
