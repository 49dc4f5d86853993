"""Compaction's swap: a run of live segments replaced by new Parquet files in ONE manifest commit.

As Kafka's cleaner swaps cleaned segments in (`replaceSegments`), except that the atomic step is
the manifest, not a rename of suffixes. A file name is never reused: a new file whose base seq a
live file has is named `<base>.<n>.parquet`, so a reader holding an older manifest still finds
its files.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Sequence
from pathlib import Path

import crc32c

from storage import names
from storage.errors import FsyncError, StorageError
from storage.fs import FileSystem, remove_quietly, sync_dir, sync_file, write_file_durably
from storage.manifest import SegmentEntry
from storage.sealed import inspect_file
from storage.segments import LogSegments, SegmentInfo

log = logging.getLogger(__name__)


def replace_segments(
    segments: LogSegments, old: Sequence[SegmentInfo], new_files: Sequence[Path]
) -> list[SegmentInfo]:
    """Swap the run `old` of live segments for `new_files` (see `SegmentedLog.replace`).

    Verify the new files, move them into `log/` under free names, fsync, commit; then delete
    the old files. A crash before the commit leaves the old set live (the moved files are
    unlisted and deleted on open), after it the new set; a failure before it, other than a
    failed fsync (which fails the log), moves the files back.
    """
    fs, log_dir = segments.fs, segments.log_dir
    start, stop = _locate_run(segments, old)
    base, end = old[0].base_seq, old[-1].end_seq
    sources = [Path(p) for p in new_files]
    if not sources:
        raise StorageError("replace needs at least one new file")
    for source in sources:
        if source.resolve().parent == log_dir.resolve():
            raise StorageError(f"{source} is inside {log_dir}: stage new files elsewhere")
    facts = sorted(
        ((inspect_file(fs, p, segments.schema), p) for p in sources),
        key=lambda item: item[0].seq_min,
    )
    expected = base
    for fact, path in facts:
        if not fact.dense or fact.seq_min != expected:
            raise StorageError(
                f"{path} holds seqs {fact.seq_min}..{fact.seq_max} ({fact.rows} rows, "
                f"dense={fact.dense}); expected a dense run starting at {expected}"
            )
        expected = fact.seq_max + 1
    if expected != end:
        raise StorageError(
            f"new files cover seqs {base}..{expected}, the replaced segments {base}..{end}"
        )
    taken = set(fs.listdir(log_dir))
    moves: list[tuple[Path, Path, bool]] = []
    entries: list[SegmentEntry] = []
    try:
        for fact, source in facts:
            # the revision of the commit that lists it: a name no swap has used before, so a
            # reader holding an older manifest never finds other rows under a name it knows
            variant = segments.manifest.revision + 1
            while names.parquet_name(fact.seq_min, variant) in taken:
                variant += 1
            name = names.parquet_name(fact.seq_min, variant)
            taken.add(name)
            destination = log_dir / name
            copied = _move_in(fs, source, destination)
            moves.append((source, destination, copied))
            sync_file(fs, destination)
            content = fs.read_bytes(destination)
            entries.append(SegmentEntry(
                base_seq=fact.seq_min, end_seq=fact.seq_max + 1, ts_min=fact.ts_min,
                ts_max=fact.ts_max, events=fact.rows,
                bytes=len(content), file=name, crc32c=crc32c.crc32c(content),
            ))
        sync_dir(fs, log_dir)
        live = segments.manifest.segments
        segments.commit(segments=live[:start] + tuple(entries) + live[stop:])
    except Exception as exc:  # not on KeyboardInterrupt: the commit may have happened
        if not isinstance(exc, FsyncError):
            _undo_moves(fs, moves)
        raise
    for entry in live[start:stop]:
        remove_quietly(fs, log_dir / entry.file)
    for source, _, copied in moves:
        if copied:
            remove_quietly(fs, source)
    return [segments.info(e) for e in entries]


def _locate_run(segments: LogSegments, old: Sequence[SegmentInfo]) -> tuple[int, int]:
    """Index range of `old` among the live segments; it must be a contiguous run of them."""
    if not old:
        raise StorageError("replace needs at least one old segment")
    live = segments.manifest.segments
    start = next((i for i, e in enumerate(live) if e.base_seq == old[0].base_seq), None)
    if start is None:
        raise StorageError(f"segment at seq {old[0].base_seq} is not live")
    for offset, info in enumerate(old):
        index = start + offset
        if index >= len(live):
            raise StorageError(f"segment at seq {info.base_seq} is not live")
        entry = live[index]
        if (entry.base_seq, entry.end_seq, entry.file) != (
            info.base_seq, info.end_seq, info.path.name
        ):
            raise StorageError(
                f"segments to replace must be a contiguous run of live ones: "
                f"{info.path.name} ({info.base_seq}..{info.end_seq}) is not live at that place"
            )
    return start, start + len(old)


def _move_in(fs: FileSystem, source: Path, destination: Path) -> bool:
    """Rename `source` into log/ (copy across file systems); True if it was copied."""
    try:
        fs.rename(source, destination)
        return False
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    tmp = destination.with_name(names.tmp_name(destination.name))
    write_file_durably(fs, tmp, fs.read_bytes(source))
    fs.rename(tmp, destination)
    return True


def _undo_moves(fs: FileSystem, moves: list[tuple[Path, Path, bool]]) -> None:
    """Put moved files back where the caller had them (best effort) after a failed swap."""
    for source, destination, copied in reversed(moves):
        try:
            if copied:
                fs.remove(destination)
            else:
                fs.rename(destination, source)
        except OSError:
            log.warning("could not move %s back to %s", destination, source)
