"""Checkpoints: a caller's state at a seq, as `checkpoints/<20-digit seq>.checkpoint.parquet`.

A checkpoint exists once the manifest lists it (with its size and crc32c): the file is written
atomically first, so a crash before the commit leaves an unlisted file that the next open
deletes. Retention deletes old segments only behind a checkpoint, so the state at any seq still
held can be rebuilt from one plus the log.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from storage import names
from storage.errors import CorruptSegmentError, FsyncError, StorageError
from storage.fs import remove_quietly, sync_dir
from storage.manifest import CheckpointEntry
from storage.sealed import read_table, write_parquet_checked
from storage.segments import LogSegments
from storage.settings import LogSettings


def write_checkpoint(
    segments: LogSegments, settings: LogSettings, seq: int, table: pa.Table
) -> Path:
    """Store `table` as the checkpoint at `seq` (atomic file, then listed in the manifest).

    A listed checkpoint is never rewritten: the log before a seq never changes, so neither does
    the state at it, and replacing the listed file in place could leave it torn by a crash
    between the rename and the manifest commit."""
    next_seq = segments.active.end_seq
    if seq < 0 or seq > next_seq:
        raise StorageError(f"checkpoint seq {seq} is outside 0..{next_seq} (the next seq)")
    fs, directory = segments.fs, segments.checkpoint_dir
    name = names.checkpoint_name(seq)
    path = directory / name
    if segments.manifest.checkpoint_file(seq) is not None:
        return path
    size, crc = write_parquet_checked(fs, path, table, settings, settings.row_group_events)
    sync_dir(fs, directory)
    listed = sorted(
        (*(c for c in segments.manifest.checkpoints if c.seq != seq),
         CheckpointEntry(seq, name, bytes=size, crc32c=crc)),
        key=lambda c: c.seq,
    )
    try:
        segments.commit(checkpoints=tuple(listed))
    except Exception as exc:  # not on KeyboardInterrupt: it may have committed
        if not isinstance(exc, FsyncError):
            remove_quietly(fs, path)
        raise
    return path


def checkpoint_seqs(segments: LogSegments) -> list[int]:
    """Seqs of the listed checkpoints, ascending."""
    return [c.seq for c in segments.manifest.checkpoints]


def checkpoint_path(segments: LogSegments, seq: int) -> Path:
    """Where the checkpoint at `seq` is (or would be)."""
    name = segments.manifest.checkpoint_file(seq) or names.checkpoint_name(seq)
    return segments.checkpoint_dir / name


def readable_checkpoint_path(segments: LogSegments, seq: int) -> Path:
    """`checkpoint_path`, as a local copy on an object store when the checkpoint is listed."""
    path = checkpoint_path(segments, seq)
    entry = next((c for c in segments.manifest.checkpoints if c.seq == seq), None)
    if entry is None:
        return path
    try:
        return segments.fs.local_copy(path, entry.crc32c)
    except FileNotFoundError:
        raise CorruptSegmentError(segments.where(path), None, None,
                                  f"checkpoint at seq {seq} is missing") from None


def read_checkpoint(segments: LogSegments, seq: int) -> pa.Table:
    """The table listed as the checkpoint at `seq`, checked against its size and crc32c.

    FileNotFoundError if its file is gone: a reader's snapshot may be older than a retention
    that deleted it (the caller takes a newer snapshot, or reports it missing).
    """
    entry = next((c for c in segments.manifest.checkpoints if c.seq == seq), None)
    if entry is None:
        raise StorageError(
            f"no checkpoint at seq {seq}; checkpoints are at {checkpoint_seqs(segments)}"
        )
    return read_table(segments.fs, segments.checkpoint_dir / entry.file, size=entry.bytes,
                      crc=entry.crc32c, seq=seq)
