"""Running an importer's commands through the one command path, and what to tell the user.

Importers parse a whole file first (all or nothing), so the commands they return are already
checked; here they are decoded into typed commands, submitted in batches (one fsync each) and
counted: which syncs changed an offset, which bounds moved, which history the ledger already
held (not recorded again), which commands came with a time earlier than the ledger's last event
(the ledger's time never goes backwards: those are recorded at that last time, and the summary
says how many). A record whose time is beyond the clock skew (a commitTimestamp of year 9999)
refuses the whole import, naming the record, before anything is appended: it would stamp
every later event with that time (DESIGN.md, Security rules), and skipping it would record
an offset the group did not end at. A ledger opened with `backfill` takes such times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ledger.commands.command import from_obj
from ledger.commands.results import GroupDeleteResult, QueueResult, Result, SyncResult
from ledger.errors import InvalidInput, LedgerError
from ledger.executor.batch import execute
from ledger.executor.handlers import ts_limit_of
from ledger.importers.result import ImportResult
from ledger.store.writer import Writer
from ledger.timeparse import parse_time

IMPORT_BATCH_COMMANDS = 65_536


def submit_import(writer: Writer, imported: ImportResult | list[dict[str, Any]], *,
                  on_progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Apply an importer's commands (or a bare list of command dicts); returns the summary
    that `sync` and `import` print."""
    if isinstance(imported, list):
        imported = ImportResult(imported, len(imported), {}, (), ())
    _check_times(writer, imported.commands)
    commands, already = _not_yet_recorded(writer, imported.commands)
    last_ts = writer.state.last_ts
    counts = BatchTally()
    for start in range(0, len(commands), IMPORT_BATCH_COMMANDS):
        part = commands[start:start + IMPORT_BATCH_COMMANDS]
        counts.add(writer, part, first_line=start + 1)
        if on_progress is not None:
            on_progress(len(part))
    return import_summary(imported, commands, already, last_ts, counts)


class ImportCounts:
    """What the results of an import's commands say: offsets changed or not (a group delete
    changes each of its queues), bounds raised, errors (the first one named)."""

    def __init__(self) -> None:
        self.changed = self.unchanged = self.bounds = self.errors = 0
        self.first_error: str | None = None

    def count(self, results: Iterable[Result]) -> None:
        for r in results:
            if r.error is not None:
                self.errors += 1
                self.first_error = self.first_error or f"command {r.line}: {r.error}"
            elif isinstance(r, SyncResult):
                self.changed += r.changed
                self.unchanged += not r.changed
            elif isinstance(r, QueueResult) and r.seq is not None:
                self.bounds += 1
            elif isinstance(r, GroupDeleteResult):
                self.changed += r.queues_deleted


class BatchTally(ImportCounts):
    """ImportCounts over batches of importer commands, each folded and made durable as one
    append."""

    def add(self, writer: Writer, commands: list[dict[str, Any]], first_line: int = 1) -> None:
        """One batch (at most IMPORT_BATCH_COMMANDS): decoded, folded, one append (one fsync),
        so it is durable whole or not at all (a follower's position rides in it)."""
        if len(commands) > IMPORT_BATCH_COMMANDS:
            raise ValueError(f"{len(commands)} commands: one batch takes at most "
                             f"{IMPORT_BATCH_COMMANDS}")
        batch: list[Any] = []
        for c in commands:
            try:
                batch.append(from_obj(c))
            except LedgerError as e:
                batch.append(e)
        self.count(execute(writer, batch, first_line=first_line).results)


def import_summary(imported: ImportResult, commands: list[dict[str, Any]], already: int,
                   last_ts: int, counts: ImportCounts) -> dict[str, Any]:
    """The summary of an import whose `commands` (those not recorded yet) were applied to a
    ledger whose last event was at `last_ts` before it."""
    late = sum(1 for c in commands if isinstance(c.get("ts"), int) and c["ts"] < last_ts)
    summary = {"records": imported.records, "commands": len(commands),
               "changed": counts.changed, "unchanged": counts.unchanged,
               "already_recorded": already, "bounds_raised": counts.bounds,
               "errors": counts.errors, "recorded_late": late, "skipped": imported.skipped,
               "groups": list(imported.groups), "notes": list(imported.notes)}
    if late:
        summary["notes"].append(
            f"{late} record(s) carry a time before the ledger's last event ({last_ts} ms): the "
            "ledger's time never goes backwards, so they are recorded at that time")
    if counts.errors:
        summary["first_error"] = counts.first_error
    return summary


def _check_times(writer: Writer, commands: list[dict[str, Any]]) -> None:
    """Every record's time within the clock skew (unless the ledger may backfill), else
    InvalidInput naming the first record beyond it: nothing of the import is appended."""
    limit = ts_limit_of(writer, False)
    if limit is None:
        return
    for c in commands:
        ts = c.get("ts")
        if ts is None:
            continue
        try:
            writer.check_ts(parse_time(ts), ts, limit)
        except InvalidInput as e:
            record = ", ".join(f"{k} {c[k]!r}" for k in ("group", "topic", "queue_id", "offset")
                               if c.get(k) is not None)
            raise InvalidInput(f"the {c.get('op')} record of {record}: {e}; nothing imported "
                               "(--backfill records it as given)") from None


def _not_yet_recorded(writer: Writer, commands: list[dict[str, Any]]
                      ) -> tuple[list[dict[str, Any]], int]:
    """History (syncs with their own time) the ledger already holds is not recorded again: a
    sync at or before the last change of its key, as the ledger stood before this import (a
    second import of the same dump appends nothing; a newer dump adds what is new)."""
    positions = writer.state.positions
    kept: list[dict[str, Any]] = []
    already = 0
    for c in commands:
        ts = c.get("ts")
        if c.get("op") == "sync" and isinstance(ts, int):
            pos = positions.get((c.get("group"), c.get("topic"), c.get("queue_id")))
            if pos is not None and ts <= pos.last_update_ts:
                already += 1
                continue
        kept.append(c)
    return kept, already
