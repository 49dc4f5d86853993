"""`verify_ledger`: `storage.verify.verify_log` (every page, checksum and seq of the log) plus what
only the ledger knows: the newest checkpoint equals a replay of the log up to its seq, and the
DuckDB view equals a replay of the log up to the position it records.

Read only and lock free: it runs next to a writer (the view is then "not checked", as DuckDB lets
no second process open it) and answers for the snapshot the manifest gave when it started.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from ledger.errors import LedgerError
from ledger.fold.events import EVENT_SCHEMA
from ledger.fold.state import State
from ledger.store import settings as settings_mod
from ledger.store import tier
from ledger.store.checkpoint import state_to_table, table_to_state
from ledger.store.replay import fold_events
from ledger.store.writer import VIEW_FILE, view_witness
from storage import SegmentedLog, StorageError
from storage.fs import FileSystem
from storage.verify import LogVerifyReport, Problem, verify_log

VIEW_TABLES = ("offsets", "client_offsets", "queues", "groups")
DIFFERENCES_SHOWN = 3


class VerifyReport(msgspec.Struct):
    """The storage report plus the checkpoint and view checks; `problems` holds them all."""

    log: LogVerifyReport
    checkpoint_seq: int | None = None
    checkpoint_checked: bool = False
    view_position: int | None = None
    view_checked: bool = False
    problems: list[Problem] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> dict[str, Any]:
        """The figures as one JSON-able object (what `verify --json` prints)."""
        log = self.log
        return {
            "ok": self.ok, "data_dir": log.root, "segments": log.segments,
            "events": log.events, "wal_events": log.wal_events, "bytes": log.bytes,
            "row_groups": log.row_groups, "start_seq": log.start_seq, "next_seq": log.next_seq,
            "checkpoints": log.checkpoints, "checkpoint_replayed_seq":
                self.checkpoint_seq if self.checkpoint_checked else None,
            "view_position": self.view_position, "view_checked": self.view_checked,
            "torn_tail_bytes": log.torn_tail_bytes,
            "problems": [str(p) for p in self.problems], "notes": self.notes,
        }


def verify_ledger(root: str | Path, *, fs: FileSystem | None = None) -> VerifyReport:
    """Check the ledger at `root`; never raises for bad data (it becomes a problem)."""
    root = Path(root)
    fs = tier.filesystem(root, settings_mod.load(root), fs)
    try:
        witness = view_witness(root)
    except LedgerError:  # a writer holds the view: only frames and checkpoints can prove then
        witness = None
    log_report = verify_log(root, EVENT_SCHEMA, fs, durability=_durability(root),
                            witness=witness)
    if _durability(root) != "always":  # a power cut may lose an unsynced tail: not corruption
        for problem in [p for p in log_report.problems if p.kind == "beyond_end"]:
            log_report.problems.remove(problem)
            log_report.notes.append(f"{problem} (durability {_durability(root)}: an unsynced "
                                    "tail was lost; dropped on the next writer open)")
    report = VerifyReport(log=log_report, problems=list(log_report.problems),
                          notes=list(log_report.notes))
    if log_report.problems:
        report.notes.append("checkpoint and view not replayed: the log itself has problems")
        return report
    try:
        log = SegmentedLog.open(root, EVENT_SCHEMA, None, writer=False, fs=fs)
    except StorageError as exc:
        report.problems.append(Problem("log/MANIFEST", f"cannot open the log: {exc}"))
        return report
    with log:
        if log_report.manifest is not None and log.next_seq != log_report.next_seq:
            report.notes.append(f"a writer appended while verifying: replayed up to seq "
                                f"{log.next_seq}, checked pages up to {log_report.next_seq}")
        try:
            _replay_checks(root, log, report)
        except StorageError as exc:
            report.problems.append(Problem("log", f"replay failed: {exc}"))
    return report


def _replay_checks(root: Path, log: SegmentedLog, report: VerifyReport) -> None:
    """Fold the log once, stopping at the newest checkpoint and at the view's position."""
    checkpoints = log.checkpoints()
    start = log.start_seq
    state, folded = State(), start
    if start > 0:
        # the first checkpoint the retained log reaches: the log holds every event after it
        anchors = [c for c in checkpoints if c >= start]
        if not anchors:
            report.problems.append(Problem(
                "checkpoints", f"the log starts at seq {start} and no checkpoint covers it: "
                "the state cannot be rebuilt", 0, start))
            return
        folded = anchors[0]
        state = table_to_state(log.read_checkpoint(folded))
    stops: list[tuple[int, Callable[[State], None]]] = []
    if checkpoints and checkpoints[-1] > folded:
        newest = checkpoints[-1]
        report.checkpoint_seq = newest
        stops.append((newest, lambda s: _check_checkpoint(log, newest, s, report)))
    elif checkpoints:
        report.checkpoint_seq = checkpoints[-1]
        report.notes.append(f"checkpoint at seq {checkpoints[-1]} is where the log starts: "
                            "no events to replay it against")
    view = _snapshot_view(root, report)
    if view is not None:
        position = view.position
        report.view_position = position
        if position is None:
            report.notes.append("view: empty (written on the next writer open)")
        elif position > log.next_seq and _durability(root) == "always":
            report.problems.append(Problem(
                VIEW_FILE, f"the view is at seq {position}, beyond the log end {log.next_seq}: "
                "it saw events the log lost (durability always: they were acknowledged)",
                log.next_seq, position))
        elif position > log.next_seq:
            report.notes.append(
                f"view: at seq {position}, beyond the log end {log.next_seq}: a crash lost "
                f"unsynced events (durability {_durability(root)}); rebuilt on the next open")
        elif position < folded:
            report.notes.append(f"view: at seq {position}, before the log start {folded}: "
                                "rebuilt on the next writer open")
        else:
            stops.append((position, lambda s: _check_view(view, position, s, report)))
    for stop, check in sorted(stops, key=lambda item: item[0]):
        if stop > folded:
            fold_events(state, log.read(seq_gte=folded, seq_lt=stop))
            folded = stop
        check(state)


def _check_checkpoint(log: SegmentedLog, seq: int, state: State, report: VerifyReport) -> None:
    path = log.checkpoint_path(seq)
    name = f"checkpoints/{path.name}"
    stored = log.read_checkpoint(seq)
    differences = _row_differences(state_to_table(state), stored)
    report.checkpoint_checked = True
    if differences:
        report.problems.append(Problem(
            name, f"disagrees with a replay of the log up to seq {seq}: {differences}", 0, seq))


def _canonical_rows(table: pa.Table) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in table.to_pylist())


def _row_differences(replayed: pa.Table, stored: pa.Table) -> str | None:
    """None when the tables hold the same rows (any order); else what differs, briefly."""
    if stored.schema.names != replayed.schema.names:
        return f"columns {stored.schema.names}, a replay gives {replayed.schema.names}"
    want, got = _canonical_rows(replayed), _canonical_rows(stored)
    if want == got:
        return None
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    return (f"{len(extra)} row(s) only in the file, e.g. {extra[:DIFFERENCES_SHOWN]}; "
            f"{len(missing)} only in the replay, e.g. {missing[:DIFFERENCES_SHOWN]}")


def _durability(root: Path) -> str:
    from ledger.store import settings as settings_mod

    try:
        return settings_mod.load(root).durability
    except Exception:  # an unreadable settings file is the CLI's error to report, not ours
        return "always"


class ViewSnapshot(msgspec.Struct):
    """The view's rows and position, read in one short read-only connection."""

    position: int | None
    tables: dict[str, list[tuple]]


def _snapshot_view(root: Path, report: VerifyReport) -> ViewSnapshot | None:
    """Read the view file and close it at once: a read-only DuckDB connection blocks a writer
    from opening the file, so it is never held while the log is replayed."""
    import duckdb

    path = root / VIEW_FILE
    if not path.exists():
        report.notes.append("view: no view file yet (written on the next writer open)")
        return None
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        report.notes.append(f"view: not checked ({' '.join(str(exc).split())[:160]})")
        return None
    try:
        try:
            row = con.execute("SELECT max(next_seq) FROM view_position").fetchone()
        except duckdb.Error:  # a view file without the table: never written
            return ViewSnapshot(None, {})
        tables = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                  for t in VIEW_TABLES}
        return ViewSnapshot(row[0] if row else None, tables)
    finally:
        con.close()


def _check_view(view: ViewSnapshot, position: int, state: State, report: VerifyReport) -> None:
    from ledger.store.view import View

    replay = View.open(None)
    try:
        replay.write_full(state, position)
        for table in VIEW_TABLES:
            got = view.tables[table]
            want = replay.con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
            if got != want:
                only_view = sorted(set(got) - set(want))[:DIFFERENCES_SHOWN]
                only_replay = sorted(set(want) - set(got))[:DIFFERENCES_SHOWN]
                report.problems.append(Problem(
                    VIEW_FILE, f"table {table} differs from a replay of the log up to seq "
                    f"{position}: only in the view {only_view}, only in the replay {only_replay}",
                    0, position))
    finally:
        replay.close()
    report.view_checked = True
