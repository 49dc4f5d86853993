"""`verify_log`: read every byte the log holds and check it against the manifest; skip nothing.

Checked: the manifest (its checksum and invariants); each sealed segment (present, size and
crc32c as listed, every page read with its Parquet page checksum verified, row count, seqs
exactly the segment's range with no gap or duplicate, ts extremes, the row-group statistics
that reads prune by equal to the data); the seq chain (log start, segments, active WAL, all
contiguous); the active WAL's frames (checksums, seqs continuing the last segment); each listed
checkpoint (present, size and crc32c, every page). A torn last WAL write is a note (a crash
leaves one and the next writer open cuts it) unless a later frame, a checkpoint or the caller's
witness proves it acknowledged (then the writer refuses it: a problem); files no manifest lists
are notes (deleted on the next writer open). Everything else is a problem naming the file and the seq range.

Read only: takes no lock and changes nothing, so it runs next to a writer (on the snapshot the
manifest gave when it started).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import crc32c
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage import manifest as manifest_io
from storage import names
from storage.acknowledged import Witness, acknowledged_by
from storage.errors import StorageError
from storage.frames import SeqChain, decode_frames
from storage.fs import FileSystem, OsFileSystem
from storage.manifest import Manifest, SegmentEntry


class Problem(msgspec.Struct, frozen=True):
    """Something wrong, where: a file and the seqs [seq_min, seq_end) it concerns."""

    file: str
    what: str
    seq_min: int | None = None
    seq_end: int | None = None
    # "beyond_end": a checkpoint past the log end, which a power cut can leave under durability
    # "batch" or "none" (the next writer open drops it) but which means lost acknowledged
    # events under "always"; the caller, who knows the durability, decides.
    kind: str = "corrupt"

    def __str__(self) -> str:
        if self.seq_min is None:
            where = ""
        elif self.seq_end is None:
            where = f" (seq {self.seq_min}..)"
        else:
            where = f" (seq {self.seq_min}..{self.seq_end})"
        return f"{self.file}{where}: {self.what}"


class LogVerifyReport(msgspec.Struct):
    """What `verify_log` read and found."""

    root: str
    start_seq: int = 0
    next_seq: int = 0
    segments: int = 0
    segment_events: int = 0
    row_groups: int = 0
    wal_events: int = 0
    wal_bytes: int = 0
    torn_tail_bytes: int = 0
    checkpoints: int = 0
    bytes: int = 0
    problems: list[Problem] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)
    manifest: Manifest | None = None

    @property
    def events(self) -> int:
        return self.segment_events + self.wal_events

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_log(
    root: str | Path, schema: pa.Schema, fs: FileSystem | None = None, *,
    durability: str = "always", witness: Witness | None = None,
) -> LogVerifyReport:
    """Check everything the log at `root` holds (see the module doc); never raises for bad data.

    A damaged last WAL frame is judged as a writer open would (`storage.acknowledged`): with the
    log's `durability` and the caller's `witness` of what was acknowledged."""
    fs = fs if fs is not None else OsFileSystem()
    root = Path(root)
    log_dir, checkpoint_dir = names.log_dir(root), names.checkpoint_dir(root)
    report = LogVerifyReport(root=str(root))
    manifest_file = manifest_io.manifest_path(log_dir)
    try:
        manifest = manifest_io.load(fs, log_dir)
    except StorageError as exc:
        report.problems.append(Problem(_rel(root, manifest_file), str(exc)))
        return report
    except OSError as exc:
        report.problems.append(Problem(_rel(root, manifest_file), f"unreadable: {exc}"))
        return report
    if manifest is None:
        report.problems.append(Problem(_rel(root, manifest_file), "missing: no log here"))
        return report
    report.manifest = manifest
    report.start_seq = manifest.log_start_seq
    stored = manifest.arrow_schema()
    if not stored.equals(schema, check_metadata=False):
        report.problems.append(Problem(_rel(root, manifest_file),
                                       f"the log's schema is {stored}, expected {schema}"))
        return report
    for entry in manifest.segments:
        _verify_segment(fs, root, log_dir / entry.file, entry, schema, report)
    acknowledged = partial(acknowledged_by, checkpoints=[c.seq for c in manifest.checkpoints],
                           durability=durability, witness=witness)
    _verify_wal(fs, root, log_dir / names.wal_name(manifest.active_base_seq), manifest, schema,
                report, acknowledged)
    report.next_seq = manifest.active_base_seq + report.wal_events
    for checkpoint in manifest.checkpoints:
        path = checkpoint_dir / checkpoint.file
        if checkpoint.seq > report.next_seq:
            report.problems.append(Problem(
                _rel(root, path), f"checkpoint at seq {checkpoint.seq} is beyond the log end "
                f"{report.next_seq}: the events it includes are not in the log", checkpoint.seq,
                kind="beyond_end"))
        if _verify_whole_file(fs, root, path, checkpoint.bytes, checkpoint.crc32c, None, None,
                              report) is not None:
            report.checkpoints += 1
    _note_unlisted(fs, root, manifest, report)
    return report


def _rel(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _verify_whole_file(
    fs: FileSystem, root: Path, path: Path, size: int | None, crc: int | None,
    seq_min: int | None, seq_end: int | None, report: LogVerifyReport,
) -> pa.Table | None:
    """Size and crc32c as listed, then every page with its checksum; the table, or None."""
    name = _rel(root, path)
    try:
        data = fs.read_bytes(path)
    except FileNotFoundError:
        report.problems.append(Problem(name, "listed in the manifest but missing", seq_min,
                                       seq_end))
        return None
    except OSError as exc:
        report.problems.append(Problem(name, f"unreadable: {exc}", seq_min, seq_end))
        return None
    report.bytes += len(data)
    if size is not None and len(data) != size:
        report.problems.append(Problem(
            name, f"file holds {len(data)} bytes, the manifest says {size}", seq_min, seq_end))
    elif crc is not None and crc32c.crc32c(data) != crc:
        report.problems.append(Problem(
            name, f"crc32c {crc32c.crc32c(data)} differs from the manifest's {crc}: the file "
            "changed after it was written", seq_min, seq_end))
    try:
        reader = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        pieces = [reader.read_row_group(i, use_threads=False)
                  for i in range(reader.metadata.num_row_groups)]
    except (OSError, pa.ArrowException, ValueError) as exc:
        report.problems.append(Problem(name, f"unreadable Parquet: {_one_line(exc)}", seq_min,
                                       seq_end))
        return None
    report.row_groups += len(pieces)
    table = pa.concat_tables(pieces) if pieces else reader.schema_arrow.empty_table()
    if seq_min is not None:
        _verify_statistics(reader.metadata, pieces, name, seq_min, seq_end, report)
    return table


def _verify_segment(
    fs: FileSystem, root: Path, path: Path, entry: SegmentEntry, schema: pa.Schema,
    report: LogVerifyReport,
) -> None:
    base, end = entry.base_seq, entry.end_seq
    name = _rel(root, path)
    problems_before = len(report.problems)
    table = _verify_whole_file(fs, root, path, entry.bytes, entry.crc32c, base, end, report)
    report.segments += 1
    if table is None:
        return
    if table.schema.names != schema.names or any(
        not table.schema.field(f.name).type.equals(f.type) for f in schema
    ):
        report.problems.append(Problem(name, f"columns {table.schema} differ from the log's",
                                       base, end))
        return
    if table.num_rows != entry.events:
        report.problems.append(Problem(
            name, f"holds {table.num_rows} rows, the manifest says {entry.events}", base, end))
    seqs = table.column("seq")
    if seqs.null_count or table.column("ts").null_count:
        report.problems.append(Problem(name, "null seq or ts", base, end))
        return
    ordered = np.sort(seqs.to_numpy())
    expected = np.arange(base, end, dtype=np.int64)
    if len(ordered) != len(expected) or not np.array_equal(ordered, expected):
        report.problems.append(Problem(name, _seq_difference(ordered, base, end), base, end))
    if table.num_rows:
        ts = pc.min_max(table.column("ts"))
        if (ts["min"].as_py(), ts["max"].as_py()) != (entry.ts_min, entry.ts_max):
            report.problems.append(Problem(
                name, f"ts {ts['min'].as_py()}..{ts['max'].as_py()}, the manifest says "
                f"{entry.ts_min}..{entry.ts_max}", base, end))
    if len(report.problems) == problems_before:
        report.segment_events += table.num_rows


def _seq_difference(ordered: np.ndarray, base: int, end: int) -> str:
    if len(ordered) == 0:
        return "holds no rows"
    unique, counts = np.unique(ordered, return_counts=True)
    duplicates = unique[counts > 1][:3].tolist()
    missing = np.setdiff1d(np.arange(base, end, dtype=np.int64), unique)[:3].tolist()
    outside = unique[(unique < base) | (unique >= end)][:3].tolist()
    parts = []
    if missing:
        parts.append(f"missing seqs {missing}")
    if duplicates:
        parts.append(f"duplicate seqs {duplicates}")
    if outside:
        parts.append(f"seqs {outside} outside the segment")
    return "seqs are not exactly the segment's range: " + ", ".join(parts)


def _verify_statistics(
    md: pq.FileMetaData, pieces: list[pa.Table], name: str, base: int, end: int | None,
    report: LogVerifyReport,
) -> None:
    """Row-group min/max of seq and ts (what reads prune by) equal the rows' own: the footer has
    no page checksum, and a damaged statistic would make reads skip rows silently."""
    for rg, data in enumerate(pieces):
        for column in ("seq", "ts"):
            if column not in md.schema.names or data.num_rows == 0:
                continue
            stats = md.row_group(rg).column(md.schema.names.index(column)).statistics
            if stats is None or not stats.has_min_max:
                continue
            actual = pc.min_max(data.column(column))
            if (stats.min, stats.max) != (actual["min"].as_py(), actual["max"].as_py()):
                report.problems.append(Problem(
                    name, f"row group {rg} statistics say {column} {stats.min}..{stats.max}, "
                    f"its rows hold {actual['min'].as_py()}..{actual['max'].as_py()} (reads "
                    "would prune wrongly)", base, end))


def _verify_wal(
    fs: FileSystem, root: Path, path: Path, manifest: Manifest, schema: pa.Schema,
    report: LogVerifyReport, acknowledged: Callable[[int], str | None],
) -> None:
    base = manifest.active_base_seq
    name = _rel(root, path)
    try:
        data = fs.read_bytes(path)
    except FileNotFoundError:
        return  # nothing appended since the last seal
    except OSError as exc:
        report.problems.append(Problem(name, f"unreadable: {exc}", base, None))
        return
    chain = SeqChain(base, schema.get_field_index("seq"), schema.get_field_index("ts"))
    decoded = decode_frames(data, schema, validate=chain)
    report.wal_bytes = decoded.end_offset
    report.bytes += len(data)
    report.wal_events = chain.next_seq - base
    if decoded.error is None:
        return
    proof = acknowledged(chain.next_seq) if decoded.torn else None
    if decoded.torn and proof is None:
        report.torn_tail_bytes = decoded.bytes_cut
        report.notes.append(
            f"{name}: {decoded.bytes_cut} bytes of a torn last write after seq {chain.next_seq} "
            f"({decoded.error}); never acknowledged, cut on the next writer open")
        return
    what = f"acknowledged ({proof})" if proof is not None else "corrupt"
    report.problems.append(Problem(
        name, f"{decoded.error}, {decoded.bytes_cut} bytes from there to the end: {what}, not a "
        "torn last write (a writer open refuses it)", chain.next_seq, None))


def _note_unlisted(fs: FileSystem, root: Path, manifest: Manifest, report: LogVerifyReport) -> None:
    live = {e.file for e in manifest.segments}
    live |= {names.wal_name(manifest.active_base_seq), names.MANIFEST_FILE}
    live_checkpoints = {c.file for c in manifest.checkpoints}
    for directory, listed, ours in (
        (names.log_dir(root), live, names.is_log_file),
        (names.checkpoint_dir(root), live_checkpoints, names.is_checkpoint_file),
    ):
        try:
            found = sorted(fs.listdir(directory))
        except OSError:
            continue
        for file in found:
            if ours(file) and file not in listed:
                report.notes.append(
                    f"{directory.name}/{file}: not in the manifest (a seal a running writer has "
                    "not listed yet, or left by an interrupted seal, checkpoint or swap); "
                    "deleted on the next writer open")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
