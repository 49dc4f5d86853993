"""`Cluster`: N ledgers (shards) used as one. The routing lives here, once; the CLI's
`--cluster` and `server.client.open_cluster` are two ways in.

- A group's writes and reads go to the group's shard, `abs(java_string_hash(group)) % N`
  (Kafka's placement of a group in `__consumer_offsets`).
- Queue commands (append, truncate, bounds) go to every shard: any shard's groups may read any
  queue. Every shard must take them; a shard that cannot is named in the error, and the others
  keep what they wrote.
- Other reads ask every shard and merge the answers as one ledger would answer
  (ledger/cluster/merge.py, ledger/cluster/sql.py). A shard that does not answer fails the
  read, naming it, unless the cluster is `partial`: then the others answer and `missing` names
  the shards left out.
- Writes to the other shards go on while a shard is down: a batch answers per command.

Shards are opened lazily (a group's read touches its shard only) and asked in parallel.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, TypeVar

import msgspec
import pyarrow as pa

from ledger.cluster import merge
from ledger.cluster import sql as cluster_sql
from ledger.cluster.config import ClusterSpec, ShardSpec, load_cluster
from ledger.cluster.placement import shard_of
from ledger.cluster.shard import LocalShard, Shard, ShardUnavailable
from ledger.commands.command import (
    BY_OP,
    Command,
    Commit,
    Pull,
    Reset,
    decode_lines,
    from_arrow_rows,
    from_obj,
    op_of,
)
from ledger.commands.ndjson import line_blocks, split_lines
from ledger.commands.results import CommitResult, PullResult, ResetResult, Result, to_dict
from ledger.errors import InvalidInput, LedgerError
from ledger.importers.result import ImportResult
from ledger.limits import APPLY_BATCH_COMMANDS_MAX, check_name
from ledger.store.writer import wall_clock_ms
from storage import StorageError

T = TypeVar("T")
Connect = Callable[[ShardSpec], Shard]
#: What a shard's failure to write a batch may raise: the batch's lines for that shard fail.
WRITE_FAILURES = (LedgerError, StorageError, OSError)


class ShardsUnavailable(LedgerError):
    """Shards did not answer: each named, with why."""

    def __init__(self, down: Sequence[ShardUnavailable], then: str = "") -> None:
        super().__init__("; ".join(str(e) for e in down) + then)
        self.down = tuple(down)


class Cluster:
    """The shards of a cluster file as one ledger."""

    def __init__(self, spec: ClusterSpec, *, connect: Connect | None = None,
                 partial: bool = False, threads: int | None = None) -> None:
        self.spec = spec
        self.partial = partial
        self._connect = connect
        self._shards: dict[int, Shard] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads or min(len(spec.shards), 16),
                                        thread_name_prefix="cluster")
        self._local = threading.local()

    @classmethod
    def open(cls, path: str | Path, **kw: Any) -> Cluster:
        """The cluster a cluster file describes."""
        return cls(load_cluster(path), **kw)

    def close(self) -> None:
        with self._lock:
            shards, self._shards = list(self._shards.values()), {}
        for s in shards:
            s.close()
        self._pool.shutdown()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ shards
    @property
    def size(self) -> int:
        return len(self.spec.shards)

    @property
    def missing(self) -> tuple[ShardUnavailable, ...]:
        """The shards this thread's last fan-out read left out (a `partial` cluster)."""
        return getattr(self._local, "missing", ())

    def shard(self, index: int) -> Shard:
        """Shard `index`: its root opened here, or its server through `connect`."""
        with self._lock:
            found = self._shards.get(index)
            if found is None:
                spec = self.spec.shards[index]
                if spec.server is None:
                    found = LocalShard(spec)
                elif self._connect is None:
                    raise InvalidInput(f"{spec.name} is served by {spec.server}: open the "
                                       "cluster with a client (the CLI, or "
                                       "server.client.open_cluster)")
                else:
                    found = self._connect(spec)
                self._shards[index] = found
            return found

    def index_of(self, group: str) -> int:
        """The index of the shard that holds `group` (a checked name)."""
        return shard_of(check_name(group, "group"), self.size)

    def _routed(self, group: str) -> Shard:
        return self.shard(self.index_of(group))

    def _each(self, indexes: Iterable[int], fn: Callable[[Shard], T],
              catch: tuple[type[BaseException], ...] = ()) -> dict[int, T | BaseException]:
        """`fn` on each shard in parallel; a shard's ShardUnavailable (and `catch`) is its
        answer, any other error is raised once every shard has answered."""
        def call(index: int) -> T | BaseException:
            try:
                return fn(self.shard(index))
            except (ShardUnavailable, *catch) as e:
                return e

        chosen = list(indexes)
        if len(chosen) == 1:
            return {chosen[0]: call(chosen[0])}
        futures = {i: self._pool.submit(call, i) for i in chosen}
        got: dict[int, T | BaseException] = {}
        failed: BaseException | None = None
        for i, future in futures.items():
            try:
                got[i] = future.result()
            except BaseException as e:
                failed = failed or e
        if failed is not None:
            raise failed
        return got

    def _answered(self, got: dict[int, Any]) -> list[tuple[int, Any]]:
        """The answers of the shards that answered, by index; the others fail the read unless
        the cluster is partial (then they are `missing`)."""
        down = [e for _, e in sorted(got.items()) if isinstance(e, ShardUnavailable)]
        answered = [(i, v) for i, v in sorted(got.items()) if not isinstance(v, ShardUnavailable)]
        if down and not answered:
            raise ShardsUnavailable(down, ": no shard answered")
        if down and not self.partial:
            raise ShardsUnavailable(down, ": answer from the other shards with --partial "
                                          "(Python: partial=True)")
        self._local.missing = tuple(down)
        return answered

    def _fan_out(self, fn: Callable[[Shard], T]) -> list[tuple[int, T]]:
        return self._answered(self._each(range(self.size), fn))

    def _fan_out_primary(self, fn: Callable[[Shard, bool], T]) -> list[tuple[int, T]]:
        """A fan-out whose queue data comes from the primary: shard 0, or (partial) the
        lowest-numbered shard that answered."""
        answered = self._answered(self._each(range(self.size),
                                             lambda s: fn(s, s.spec.index == 0)))
        first = answered[0][0]
        if first != 0:
            answered[0] = (first, fn(self.shard(first), True))
        return answered

    def _first(self, fn: Callable[[Shard], T]) -> T:
        """A queue read: every shard holds every queue, so the lowest-numbered shard that
        answers answers it."""
        down: list[ShardUnavailable] = []
        for index in range(self.size):
            try:
                return fn(self.shard(index))
            except ShardUnavailable as e:
                down.append(e)
        raise ShardsUnavailable(down, ": no shard answered")

    # ------------------------------------------------------------------ writes
    def submit(self, commands: Sequence[Command | LedgerError | dict[str, Any]], *,
               first_line: int = 1) -> list[dict[str, Any]]:
        """A batch of commands (typed, dicts, or the errors of lines that could not be read):
        each routed, each shard's share in one batch, all shards at once. One `apply` object
        per command, in order, with the `shard` that holds it; a command whose shard is down
        fails naming it while the others are written. A dict is routed as it is (by its
        `group`) and checked by the shard that takes it, once: the router only reads its op and
        group."""
        size = self.size
        items: list[Command | LedgerError | dict[str, Any]] = list(commands)
        out: list[dict[str, Any] | None] = [None] * len(items)
        share: list[list[int]] = [[] for _ in range(size)]
        queue: set[int] = set()
        for pos, c in enumerate(items):  # the hot loop of a router: a few dict reads a command
            if type(c) is dict:
                group = c.get("group")
                if c.get("op") in BY_OP and (group is None or type(group) is str):
                    if group is not None:
                        share[shard_of(group, size)].append(pos)
                        continue
                    queue.add(pos)
                    for positions in share:
                        positions.append(pos)
                    continue
            if not isinstance(c, Command | LedgerError):
                c = items[pos] = _decoded(c)
            if isinstance(c, LedgerError):
                out[pos] = to_dict(Result(line=first_line + pos, error=str(c)))
                continue
            group = getattr(c, "group", None)
            if group is not None:
                share[shard_of(group, size)].append(pos)
                continue
            queue.add(pos)
            for positions in share:
                positions.append(pos)
        asked = [i for i in range(size) if share[i]]
        got = self._each(asked, lambda s: s.submit([items[p] for p in share[s.spec.index]]),
                         catch=WRITE_FAILURES)
        held: dict[int, list[tuple[int, dict[str, Any]]]] = {p: [] for p in queue}
        missed: dict[int, list[str]] = {p: [] for p in queue}
        for index in asked:
            answer = got[index]
            if isinstance(answer, BaseException):
                why = str(answer) if isinstance(answer, ShardUnavailable) else \
                    f"{self.spec.shards[index].name} failed: {answer}"
                for pos in share[index]:
                    if pos in queue:
                        missed[pos].append(why)
                    else:
                        out[pos] = _failed(first_line + pos, items[pos], index, why)
                continue
            for pos, doc in zip(share[index], answer, strict=True):  # type: ignore[arg-type]
                doc["line"] = first_line + pos  # a fresh object of the shard's answer
                doc["shard"] = index
                if queue and pos in queue:
                    held[pos].append((index, doc))
                else:
                    out[pos] = doc
        for pos in queue:
            if missed[pos]:
                out[pos] = _failed(first_line + pos, items[pos], None, _partial_queue_write(
                    _op(items[pos]), [i for i, _ in held[pos]], missed[pos]))
            else:
                out[pos] = merge.queue_result(held[pos])
        return out  # type: ignore[return-value]

    def commands(self, commands: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """`apply` objects in, one result object per command out (`POST /v1/commands`'s twin)."""
        return self.submit(commands)

    def submit_one(self, command: Command | dict[str, Any]) -> Result:
        """One command, routed (a queue command: to every shard); its error raised."""
        cmd = from_obj(command)
        group = getattr(cmd, "group", None)
        if group is not None:
            return self._routed(group).submit_one(cmd)
        got = self._each(range(self.size), lambda s: s.submit_one(cmd))
        down = [e for e in got.values() if isinstance(e, ShardUnavailable)]
        done = sorted(i for i, r in got.items() if not isinstance(r, ShardUnavailable))
        if down and not done:
            raise ShardsUnavailable(down, ": nothing was written")
        if down:
            raise LedgerError(_partial_queue_write(op_of(cmd), done, [str(e) for e in down]))
        return got[done[0]]  # type: ignore[return-value]

    def pull(self, group: str, topic: str, queue_id: int, *, client: str | None = None,
             max: int = 32) -> PullResult:
        r = self.submit_one(Pull(group=group, topic=topic, queue_id=queue_id, client=client,
                                 max=max))
        assert isinstance(r, PullResult)
        return r

    def commit(self, group: str, topic: str, queue_id: int, offset: int, *,
               client: str | None = None, generation: int | None = None) -> CommitResult:
        r = self.submit_one(Commit(group=group, topic=topic, queue_id=queue_id, offset=offset,
                                   client=client, generation=generation))
        assert isinstance(r, CommitResult)
        return r

    def run_reset(self, command: Reset | dict[str, Any]) -> ResetResult:
        """A reset (planned, or executed) on the group's shard."""
        cmd = from_obj(command)
        if not isinstance(cmd, Reset):
            raise InvalidInput(f"run_reset takes a reset command, not {type(cmd).__name__}")
        return self._routed(cmd.group).run_reset(cmd)

    def sync(self, rows: Sequence[tuple[str, str, int, int | None]], *, source: str,
             broadcast_groups: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Overwrite offsets from a snapshot: each shard its groups' rows, at once; the changed
        keys in the snapshot's order."""
        rows_of: dict[int, list[tuple[str, str, int, int | None]]] = {}
        for row in rows:
            rows_of.setdefault(self.index_of(row[0]), []).append(row)
        broadcast_of: dict[int, list[str]] = {}
        for g in broadcast_groups:
            broadcast_of.setdefault(self.index_of(g), []).append(g)
        got = self._each(set(rows_of) | set(broadcast_of), lambda s: s.sync(
            rows_of.get(s.spec.index, []), source=source,
            broadcast_groups=broadcast_of.get(s.spec.index, [])))
        down = [e for e in got.values() if isinstance(e, ShardUnavailable)]
        if down:
            raise ShardsUnavailable(down, ": the other shards' offsets were written")
        order = {(g, t, q): n for n, (g, t, q, _) in reversed(list(enumerate(rows)))}
        changes = [c for answer in got.values() for c in answer]  # type: ignore[union-attr]
        return sorted(changes, key=lambda c: order.get(
            (c["consumer_group"], c["topic"], c["queue_id"]), -1))

    def submit_import(self, imported: ImportResult | list[dict[str, Any]], *,
                      on_progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        """An importer's commands: runs of queue commands to every shard, runs of group
        commands each to its group's shard; one summary, as one ledger gives it."""
        if isinstance(imported, list):
            imported = ImportResult(imported, len(imported), {}, (), ())
        served = [s for s in self.spec.shards if s.server is not None]
        if served and any(c.get("op") == "sync" and isinstance(c.get("ts"), int)
                          for c in imported.commands):
            raise InvalidInput(
                f"{served[0].name} is served: an import of history (syncs with their own "
                "time) skips what a shard already holds, which needs the shard's writer; "
                "run it with --data-dir on each shard's root while its server is stopped")
        group_runs: list[tuple[int, dict[str, Any]]] = []
        queue_runs: list[dict[str, Any]] = []
        for is_queue, run in itertools.groupby(imported.commands, lambda c: "group" not in c):
            run_commands = list(run)
            share: dict[int, list[dict[str, Any]]] = {}
            for c in run_commands:
                for index in (range(self.size) if is_queue
                              else [shard_of(str(c["group"]), self.size)]):
                    share.setdefault(index, []).append(c)
            got = self._each(share, lambda s, share=share: s.submit_import(
                ImportResult(share[s.spec.index], 0, {}, (), ())))
            down = [e for e in got.values() if isinstance(e, ShardUnavailable)]
            if down:
                raise ShardsUnavailable(down, ": the import stopped there; the other shards "
                                              "kept what they wrote")
            if is_queue:
                queue_runs.append(got[min(got)])  # type: ignore[arg-type]
            else:
                group_runs += sorted(got.items())  # type: ignore[arg-type]
            if on_progress is not None:
                on_progress(len(run_commands))
        return merge.import_summaries(imported.records, imported.skipped, imported.groups,
                                      imported.notes, group_runs, queue_runs)

    def apply_ndjson(self, stream: IO[bytes], *, on_bytes: Callable[[int], None] | None = None
                     ) -> Iterator[tuple[bytes, int, int]]:
        """`Ledger.apply_ndjson` over the cluster: (the results' JSON lines, lines, lines with
        an error) a batch at a time, once durable on every shard it touched."""
        line = 1
        for block, n_lines in line_blocks(stream, APPLY_BATCH_COMMANDS_MAX):
            if on_bytes is not None:
                on_bytes(len(block))
            yield _lines(self.submit(decode_lines(split_lines(block), line), first_line=line))
            line += n_lines

    def apply_table(self, table: pa.Table) -> Iterator[tuple[bytes, int, int]]:
        """A command table (a column per field, null = absent), as `apply_ndjson` answers."""
        for start in range(0, table.num_rows, APPLY_BATCH_COMMANDS_MAX):
            part = table.slice(start, APPLY_BATCH_COMMANDS_MAX)
            decoded = from_arrow_rows(part.to_pydict(), range(part.num_rows))
            yield _lines(self.submit(decoded, first_line=start + 1))

    def now_ms(self) -> int:
        return wall_clock_ms()

    # ------------------------------------------------------------------ shards' upkeep
    def _local_shards(self, what: str) -> list[int]:
        served = [s for s in self.spec.shards if s.server is not None]
        if served:
            raise InvalidInput(f"{what} runs on a shard's root: {served[0].name} is served, "
                               f"so run it there (offset-ledger --data-dir {served[0].root} "
                               f"{what}) while its server is stopped")
        return list(range(self.size))

    def init(self, **settings: Any) -> list[dict[str, Any]]:
        """Create (or re-configure) every shard's data directory."""
        indexes = self._local_shards("init")
        got = self._each(indexes, lambda s: s.init(**settings))  # type: ignore[attr-defined]
        return [got[i] for i in indexes]  # type: ignore[misc]

    def retention(self, **limits: Any) -> list[dict[str, Any]]:
        """Retention on every shard: one summary per shard."""
        indexes = self._local_shards("retention")
        got = self._each(indexes, lambda s: s.retention(**limits))  # type: ignore[attr-defined]
        down = [e for e in got.values() if isinstance(e, ShardUnavailable)]
        if down:
            raise ShardsUnavailable(down)
        return [{"shard": i, **got[i]} for i in indexes]  # type: ignore[dict-item]

    # ------------------------------------------------------------------ reads
    def queues(self, topic: str | None = None) -> list[dict[str, Any]]:
        return self._first(lambda s: s.queues(topic))

    def offsets_for_time(self, topic: str, ts: int | str) -> list[dict[str, Any]]:
        return self._first(lambda s: s.offsets_for_time(topic, ts))

    def groups(self) -> list[dict[str, Any]]:
        return merge.by_group(part for _, part in self._fan_out(lambda s: s.groups()))

    def progress(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        return self._routed(group).progress(group, topic)

    def export_rows(self, group: str) -> list[dict[str, Any]]:
        return self._routed(group).export_rows(group)

    def generations(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        return self._routed(group).generations(group, topic)

    def lag(self, *, group: str | None = None, topic: str | None = None,
            at_ms: int | str | None = None, window: int = 10, allowed_lag: int = 0
            ) -> list[dict[str, Any]]:
        def ask(s: Shard) -> list[dict[str, Any]]:
            return s.lag(group=group, topic=topic, at_ms=at_ms, window=window,
                         allowed_lag=allowed_lag)

        if group is not None:
            return ask(self._routed(group))
        return merge.by_group(part for _, part in self._fan_out(ask))

    def lag_series(self, *, since_ms: int | str, until_ms: int | str, every_ms: int | str,
                   group: str | None = None, topic: str | None = None
                   ) -> list[dict[str, Any]]:
        def ask(s: Shard) -> list[dict[str, Any]]:
            return s.lag_series(since_ms=since_ms, until_ms=until_ms, every_ms=every_ms,
                                group=group, topic=topic)

        if group is not None:
            return ask(self._routed(group))
        return merge.by_key(part for _, part in self._fan_out(ask))

    def history(self, *, group: str | None = None, topic: str | None = None,
                queue_id: int | None = None, kind: str | None = None,
                since_ms: int | str | None = None, until_ms: int | str | None = None,
                limit: int | None = None) -> list[dict[str, Any]]:
        """Events oldest first (by time, shard, seq); each shard's newest `limit` suffice for
        the newest `limit` of all."""
        def ask(s: Shard, primary: bool) -> list[dict[str, Any]]:
            return s.history(group=group, topic=topic, queue_id=queue_id, kind=kind,
                             since_ms=since_ms, until_ms=until_ms, limit=limit,
                             queue_events=primary)

        if group is not None:
            index = self.index_of(group)
            return merge.history([(index, ask(self.shard(index), False))], None)
        return merge.history(self._fan_out_primary(ask), limit)

    def state_at(self, *, ts: int | str, group: str | None = None) -> list[dict[str, Any]]:
        if group is not None:
            return self._routed(group).state_at(ts=ts, group=group)
        return merge.by_key(part for _, part in self._fan_out(
            lambda s: s.state_at(ts=ts, group=None)))

    def sql(self, query: str, *, timeout_s: float | None = None) -> pa.Table:
        """One read-only query over the union of the shards' tables (ledger/cluster/sql.py),
        each shard's part and the union each stopped after `timeout_s` seconds."""
        names = cluster_sql.tables_named(query)

        def fetch(s: Shard, primary: bool) -> dict[str, pa.Table]:
            asked = {n: cluster_sql.shard_query(n, primary) for n in names}
            return {n: s.sql(q, timeout_s=timeout_s) for n, q in asked.items() if q is not None}

        tables: dict[str, list[tuple[int, pa.Table]]] = {n: [] for n in names}
        for index, fetched in self._fan_out_primary(fetch):
            for name, table in fetched.items():
                tables[name].append((index, table))
        return cluster_sql.run(query, tables, timeout_s)


def _decoded(item: Any) -> Command | LedgerError:
    try:
        return from_obj(item)
    except LedgerError as e:
        return e


def _op(command: Command | LedgerError | dict[str, Any]) -> str | None:
    if isinstance(command, Command):
        return op_of(command)
    return command.get("op") if isinstance(command, dict) else None


def _failed(line: int, command: Command | LedgerError | dict[str, Any], shard: int | None,
            why: str) -> dict[str, Any]:
    doc = to_dict(Result(line=line, op=_op(command), error=why))
    if shard is not None:
        doc["shard"] = shard
    return doc


def _listed(indexes: Sequence[int]) -> str:
    return ", ".join(str(i) for i in indexes) or "none"


def _partial_queue_write(op: str, done: Sequence[int], missed: Sequence[str]) -> str:
    if not done:
        return f"{op} was written to no shard: {'; '.join(missed)}"
    return (f"{op} was written to shards {_listed(done)} only: {'; '.join(missed)}; once it is "
            "back, bring its bounds level with a queue_bounds command")


_encode = msgspec.json.Encoder().encode


def _lines(results: list[dict[str, Any]]) -> tuple[bytes, int, int]:
    return (b"".join(_encode(r) + b"\n" for r in results), len(results),
            sum(r.get("error") is not None for r in results))
