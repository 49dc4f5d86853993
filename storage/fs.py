"""The file layer every storage module goes through, so faults can be injected in tests.

`OsFileSystem` is the real one. A test subclasses it and raises ENOSPC, EIO, a failed fsync, a
failed rename or returns a short write from any method; the log must then either undo what it
did or refuse further changes (`LogFailedError`) rather than act as if the data were safe.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from storage import names
from storage.errors import FsyncError

Buffer = bytes | bytearray | memoryview | pa.Buffer


class FileHandle(Protocol):
    """An open file written sequentially (append or fresh)."""

    def write(self, data: Buffer) -> int:
        """Write once; may write fewer bytes than given (a short write)."""
        ...

    def fsync(self) -> None:
        """Flush to stable storage; raises OSError if the data may not be safe."""
        ...

    def truncate(self, size: int) -> None:
        """Cut the file to `size` bytes (undo of a failed write, torn tail cut)."""
        ...

    def close(self) -> None:
        """Release the descriptor; no fsync implied."""
        ...


_datasync = getattr(os, "fdatasync", os.fsync)


class OsFileHandle:
    """`FileHandle` over a raw descriptor (no Python buffering: a write is a syscall)."""

    def __init__(self, fd: int, path: Path):
        self.fd = fd
        self.path = path

    def write(self, data: Buffer) -> int:
        return os.write(self.fd, data)

    def fsync(self) -> None:
        # fdatasync where there is one (as PostgreSQL's WAL): the data and what reading it
        # back needs (an append's new size) reach the disk; only timestamps may not
        _datasync(self.fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


class FileSystem:
    """The operations the storage layer performs on files and directories.

    This base class is the real (OS) implementation; `OsFileSystem` names it. Subclass and
    override single methods to inject faults.
    """

    def open_append(self, path: Path) -> FileHandle:
        """Open for appending, creating the file if missing."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _CLOEXEC, 0o644)
        return OsFileHandle(fd, path)

    def open_write(self, path: Path) -> FileHandle:
        """Open a fresh file for writing (created or truncated)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC, 0o644)
        return OsFileHandle(fd, path)

    def read_bytes(self, path: Path) -> bytes:
        """The whole content of a file (manifest, active segment)."""
        with open(path, "rb") as f:
            return f.read()

    def open_input(self, path: Path) -> pa.NativeFile:
        """A random-access reader for Parquet files."""
        return pa.OSFile(str(path), mode="r")

    def rename(self, src: Path, dst: Path) -> None:
        """Atomically rename `src` to `dst`, replacing `dst` if it exists (POSIX rename)."""
        os.replace(src, dst)

    def remove(self, path: Path) -> None:
        """Delete a file."""
        os.remove(path)

    def fsync_file(self, path: Path) -> None:
        """Fsync a file by path (a file written by someone else and moved in)."""
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def fsync_dir(self, path: Path) -> None:
        """Fsync a directory so that creations, renames and deletions in it are durable."""
        fd = os.open(path, os.O_RDONLY | _CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def exists(self, path: Path) -> bool:
        """Whether a file or directory exists."""
        return os.path.exists(path)

    def size(self, path: Path) -> int:
        """Size of a file in bytes."""
        return os.stat(path).st_size

    def listdir(self, path: Path) -> list[str]:
        """Names in a directory (used only to find files to delete, never to find data)."""
        return os.listdir(path)

    def makedirs(self, path: Path) -> None:
        """Create a directory and its parents if missing."""
        os.makedirs(path, exist_ok=True)

    def read_versioned(self, path: Path) -> tuple[bytes, str | None]:
        """A file's content and its version tag (an object store's ETag; None for a local file,
        whose writers the writer lock orders)."""
        return self.read_bytes(path), None

    def replace_versioned(self, path: Path, data: Buffer, expected: str | None) -> str | None:
        """Replace `path` whole and atomically; returns the new version tag.

        An object store puts conditionally (`If-Match: expected`, `If-None-Match: *` when
        `expected` is None) and raises `VersionConflictError` if another writer replaced the
        file since, never overwriting it. Locally: tmp, fsync, rename, fsync the directory.
        """
        write_file_atomically(self, path, data)
        sync_dir(self, path.parent)
        return None

    def describe(self, path: Path) -> str:
        """Where `path` really is, for messages (an object's URL on an object store)."""
        return str(path)

    def local_copy(self, path: Path, crc: int | None) -> Path:
        """A local path with the content of `path` for readers that open files themselves
        (DuckDB, Spark): the path itself here, a cached download on an object store."""
        return path


class OsFileSystem(FileSystem):
    """The default file layer: plain POSIX calls."""


_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def write_all(handle: FileHandle, data: Buffer) -> None:
    """Write every byte, continuing after short writes; a write of nothing is an error."""
    view = memoryview(data).cast("B")
    while len(view):
        written = handle.write(view)
        if written <= 0:
            raise OSError(errno.EIO, "write made no progress")
        view = view[written:]


def sync_handle(handle: FileHandle, path: Path) -> None:
    """Fsync an open file; a failure becomes `FsyncError` (never retried as if safe)."""
    try:
        handle.fsync()
    except OSError as exc:
        raise FsyncError(path, exc) from exc


def sync_file(fs: FileSystem, path: Path) -> None:
    """Fsync a file by path; a failure becomes `FsyncError`."""
    try:
        fs.fsync_file(path)
    except OSError as exc:
        raise FsyncError(path, exc) from exc


def sync_dir(fs: FileSystem, path: Path) -> None:
    """Fsync a directory; a failure becomes `FsyncError`."""
    try:
        fs.fsync_dir(path)
    except OSError as exc:
        raise FsyncError(path, exc) from exc


def write_file_durably(fs: FileSystem, path: Path, data: Buffer) -> None:
    """Write a whole file and fsync it; on failure remove the partial file (best effort)."""
    handle = fs.open_write(path)
    try:
        write_all(handle, data)
        sync_handle(handle, path)
    except BaseException:
        handle.close()
        _remove_quietly(fs, path)
        raise
    handle.close()


def write_file_atomically(fs: FileSystem, path: Path, data: Buffer) -> None:
    """`<path>.tmp`, fsync, rename over `path`: a crash leaves the old file or the new one.
    The caller fsyncs the directory once the renames it needs are done."""
    tmp = path.with_name(names.tmp_name(path.name))
    write_file_durably(fs, tmp, data)
    try:
        fs.rename(tmp, path)
    except BaseException:
        _remove_quietly(fs, tmp)
        raise


def _remove_quietly(fs: FileSystem, path: Path) -> None:
    with contextlib.suppress(OSError):
        fs.remove(path)


def remove_quietly(fs: FileSystem, path: Path) -> bool:
    """Delete a file if possible; a leftover is deleted on the next open. True if removed."""
    try:
        fs.remove(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True
