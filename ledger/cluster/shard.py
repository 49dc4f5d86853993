"""What a cluster asks of one shard, and that shard as a data directory opened here.

A shard answers in documents: the JSON shapes `--json` prints and the server answers
(ledger/reads/documents.py), so a shard opened from its root (`LocalShard`) and one reached
through its server (`server.client.RemoteShard`) answer alike, and the cluster merges the same
shapes whatever the transport. The CLI reads one data directory through a `LocalShard` too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import msgspec
import pyarrow as pa

from ledger.cluster.config import ShardSpec
from ledger.commands.command import Command, Reset
from ledger.commands.results import ResetResult, Result, to_dict
from ledger.errors import InvalidInput, LedgerError, RefusedError
from ledger.importers.result import ImportResult
from ledger.ledger import Ledger
from ledger.reads.documents import groups_doc, history_doc, progress_doc, state_doc


class ShardUnavailable(LedgerError):
    """A shard did not answer: its server is down or unreachable, or its root holds no ledger.
    Names the shard; the cluster's other shards go on."""

    def __init__(self, spec: ShardSpec, why: str) -> None:
        super().__init__(f"{spec.name} is unavailable: {why}")
        self.spec = spec
        self.why = why


class Shard(Protocol):
    """One shard's writes and reads, in documents."""

    spec: ShardSpec

    def submit(self, commands: Sequence[Command | dict[str, Any]]) -> list[dict[str, Any]]:
        """Commands (typed, or dicts checked here), one batch; one `apply` object per command,
        once durable."""
        ...

    def submit_one(self, command: Command) -> Result:
        """One command; its error raised as the ledger's exception."""
        ...

    def run_reset(self, command: Reset) -> ResetResult: ...

    def sync(self, rows: Sequence[tuple[str, str, int, int | None]], *, source: str,
             broadcast_groups: Iterable[str] = ()) -> list[dict[str, Any]]: ...

    def submit_import(self, imported: ImportResult) -> dict[str, Any]: ...

    def queues(self, topic: str | None = None) -> list[dict[str, Any]]: ...

    def groups(self) -> list[dict[str, Any]]: ...

    def progress(self, group: str, topic: str | None = None) -> list[dict[str, Any]]: ...

    def lag(self, *, group: str | None = None, topic: str | None = None,
            at_ms: int | str | None = None, window: int = 10, allowed_lag: int = 0
            ) -> list[dict[str, Any]]: ...

    def lag_series(self, *, since_ms: int | str, until_ms: int | str, every_ms: int | str,
                   group: str | None = None, topic: str | None = None
                   ) -> list[dict[str, Any]]: ...

    def history(self, *, group: str | None = None, topic: str | None = None,
                queue_id: int | None = None, kind: str | None = None,
                since_ms: int | str | None = None, until_ms: int | str | None = None,
                limit: int | None = None, queue_events: bool = True) -> list[dict[str, Any]]: ...

    def state_at(self, *, ts: int | str, group: str | None = None) -> list[dict[str, Any]]: ...

    def offsets_for_time(self, topic: str, ts: int | str) -> list[dict[str, Any]]: ...

    def export_rows(self, group: str) -> list[dict[str, Any]]: ...

    def generations(self, group: str, topic: str | None = None) -> list[dict[str, Any]]: ...

    def sql(self, query: str, *, timeout_s: float | None = None) -> pa.Table: ...

    def close(self) -> None: ...


def check_results(doc: dict[str, Any], result: Result) -> Result:
    """A one-command answer as `Ledger.submit_one` gives it: a rule's refusal of a commit is a
    result (`accepted` false), any other error is raised (RefusedError where a rule refused)."""
    if result.error is None or "accepted" in doc:
        return result
    if result.refused is not None:
        raise RefusedError(result.refused, result.error)
    raise InvalidInput(result.error)


class LocalShard:
    """A data directory opened here: as a reader (no lock) until a write needs its writer."""

    def __init__(self, spec: ShardSpec, *, ledger: Ledger | None = None) -> None:
        self.spec = spec
        self._ledger = ledger
        self._owned = ledger is None  # a ledger handed in is closed by whoever opened it

    # ------------------------------------------------------------------ opening
    def _exists(self) -> bool:
        return (self.spec.root / "log").is_dir()

    def reader(self) -> Ledger:
        """The ledger to read: the one open here, else a read-only snapshot of the root."""
        if self._ledger is None:
            if not self._exists():
                raise ShardUnavailable(self.spec, f"no ledger at {self.spec.root}")
            self._ledger = Ledger.open(self.spec.root, readonly=True)
        return self._ledger

    def writer(self, *, create: bool = False, **settings: Any) -> Ledger:
        """The root's writer (the lock); a cluster's shard is created only by `init`."""
        if self._ledger is not None and not self._ledger.readonly and not settings:
            return self._ledger
        if not create and not self._exists():
            raise ShardUnavailable(self.spec, f"no ledger at {self.spec.root} (create the "
                                              "shards with `init`)")
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None
        self._ledger = Ledger.open(self.spec.root, **settings)
        return self._ledger

    def close(self) -> None:
        if self._ledger is not None and self._owned:
            self._ledger.close()
        self._ledger = None

    # ------------------------------------------------------------------ writes
    def submit(self, commands: Sequence[Command | dict[str, Any]]) -> list[dict[str, Any]]:
        return [to_dict(r) for r in self.writer().submit(commands)]

    def submit_one(self, command: Command) -> Result:
        return self.writer().submit_one(command)

    def run_reset(self, command: Reset) -> ResetResult:
        led = self.writer() if command.execute else self.reader()
        return led.run_reset(command)

    def sync(self, rows: Sequence[tuple[str, str, int, int | None]], *, source: str,
             broadcast_groups: Iterable[str] = ()) -> list[dict[str, Any]]:
        return self.writer().sync(rows, source=source, broadcast_groups=broadcast_groups)

    def submit_import(self, imported: ImportResult) -> dict[str, Any]:
        return self.writer().submit_import(imported)

    def init(self, **settings: Any) -> dict[str, Any]:
        """Create (or re-configure) the shard's data directory."""
        led = self.writer(create=True, **settings)
        return {"shard": self.spec.index, "data_dir": str(led.root),
                **msgspec.structs.asdict(led.settings)}

    def retention(self, **limits: Any) -> dict[str, Any]:
        return self.writer().retention(**limits)

    def now_ms(self) -> int:
        return (self._ledger or self.reader()).now_ms()

    # ------------------------------------------------------------------ reads
    def queues(self, topic: str | None = None) -> list[dict[str, Any]]:
        return self.reader().queues(topic)

    def groups(self) -> list[dict[str, Any]]:
        return groups_doc(self.reader().groups())

    def progress(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        return progress_doc(self.reader().progress(group, topic))

    def lag(self, *, group: str | None = None, topic: str | None = None,
            at_ms: int | str | None = None, window: int = 10, allowed_lag: int = 0
            ) -> list[dict[str, Any]]:
        return self.reader().lag(group=group, topic=topic, at_ms=at_ms, window=window,
                                 allowed_lag=allowed_lag)

    def lag_series(self, *, since_ms: int | str, until_ms: int | str, every_ms: int | str,
                   group: str | None = None, topic: str | None = None
                   ) -> list[dict[str, Any]]:
        return self.reader().lag_series(since_ms=since_ms, until_ms=until_ms,
                                        every_ms=every_ms, group=group, topic=topic)

    def history(self, *, group: str | None = None, topic: str | None = None,
                queue_id: int | None = None, kind: str | None = None,
                since_ms: int | str | None = None, until_ms: int | str | None = None,
                limit: int | None = None, queue_events: bool = True) -> list[dict[str, Any]]:
        return history_doc(self.reader().history(
            group=group, topic=topic, queue_id=queue_id, kind=kind, since_ms=since_ms,
            until_ms=until_ms, limit=limit, queue_events=queue_events))

    def state_at(self, *, ts: int | str, group: str | None = None) -> list[dict[str, Any]]:
        return state_doc(self.reader().state_at(ts=ts, group=group))

    def offsets_for_time(self, topic: str, ts: int | str) -> list[dict[str, Any]]:
        return self.reader().offsets_for_time(topic, ts)

    def export_rows(self, group: str) -> list[dict[str, Any]]:
        return self.reader().export_rows(group)

    def generations(self, group: str, topic: str | None = None) -> list[dict[str, Any]]:
        return msgspec.to_builtins(self.reader().generations(group, topic=topic))

    def sql(self, query: str, *, timeout_s: float | None = None) -> pa.Table:
        return self.reader().sql(query, timeout_s=timeout_s)
