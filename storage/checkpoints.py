"""Checkpoints: a caller's state at a seq, as `checkpoints/<20-digit seq>.checkpoint.parquet`.

A checkpoint exists once the manifest lists it (with its size and crc32c): the file is written
atomically first, so a crash before the commit leaves an unlisted file that the next open
deletes. Retention deletes old segments only behind a checkpoint, so the state at any seq still
held can be rebuilt from one plus the log. A writer may have its checkpoint's file written on a
thread of its own (`CheckpointThread`) and listed once durable; whoever lists checkpoints, and
close, waits for it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
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
    path = checkpoint_to_write(segments, seq)
    if path is None:
        return checkpoint_path(segments, seq)
    size, crc = write_checkpoint_file(segments, settings, path, table)
    list_checkpoint(segments, seq, path, size, crc)
    return path


def checkpoint_to_write(segments: LogSegments, seq: int) -> Path | None:
    """Where the checkpoint at `seq` is to be written; None when one is listed already. Raises
    for a seq outside the log."""
    next_seq = segments.active.end_seq
    if seq < 0 or seq > next_seq:
        raise StorageError(f"checkpoint seq {seq} is outside 0..{next_seq} (the next seq)")
    if segments.manifest.checkpoint_file(seq) is not None:
        return None
    return segments.checkpoint_dir / names.checkpoint_name(seq)


def write_checkpoint_file(
    segments: LogSegments, settings: LogSettings, path: Path, table: pa.Table
) -> tuple[int, int]:
    """The checkpoint's file, durable (atomic write, the directory fsynced): (size, crc32c).
    Touches nothing the manifest lists, so it may run beside appends."""
    size, crc = write_parquet_checked(segments.fs, path, table, settings,
                                      settings.row_group_events)
    sync_dir(segments.fs, segments.checkpoint_dir)
    return size, crc


def list_checkpoint(segments: LogSegments, seq: int, path: Path, size: int, crc: int) -> None:
    """List a written checkpoint file in the manifest (its file is removed if that fails)."""
    listed = sorted(
        (*(c for c in segments.manifest.checkpoints if c.seq != seq),
         CheckpointEntry(seq, path.name, bytes=size, crc32c=crc)),
        key=lambda c: c.seq,
    )
    try:
        segments.commit(checkpoints=tuple(listed))
    except Exception as exc:  # not on KeyboardInterrupt: it may have committed
        if not isinstance(exc, FsyncError):
            remove_quietly(segments.fs, path)
        raise


class CheckpointThread:
    """At most one checkpoint written at a time on a thread of its own (`start`), so that a
    writer does not wait for its Parquet and fsyncs; `wait` returns once it is done (listed,
    or its failure logged by the job itself). Safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._job: Future[None] | None = None
        self._seq: int | None = None

    @property
    def pending_seq(self) -> int | None:
        """The seq of the checkpoint being written, if one is."""
        with self._lock:
            return self._seq if self._job is not None and not self._job.done() else None

    def start(self, seq: int, job: Callable[[], None]) -> None:
        """Run `job` (which writes and lists the checkpoint at `seq`) once the one before ended."""
        self.wait()
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint")
            self._job, self._seq = self._pool.submit(job), seq

    def wait(self) -> None:
        """Block until no checkpoint is being written."""
        with self._lock:
            job = self._job
        if job is None:
            return
        futures_wait([job])
        with self._lock:
            if self._job is job:
                self._job = self._seq = None

    def stop(self) -> None:
        """`wait`, then end the thread."""
        self.wait()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


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
