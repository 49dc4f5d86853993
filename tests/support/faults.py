"""File layers for `Ledger.open(..., fs=)` and `SegmentedLog.open(..., fs=)`: one that skips
fsyncs (logic tests on a busy disk) and one that injects faults (TigerBeetle's simulator: a
crash at the k-th operation, a full disk, I/O errors, failed fsyncs and renames, short
writes)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from storage.fs import Buffer, FileHandle, OsFileSystem


class Crash(BaseException):
    """A simulated process death: BaseException so no `except OSError` path swallows it."""


def injected(code: int, what: str = "") -> OSError:
    """The OSError a fault raises: the system's message for `code`, marked as injected."""
    return OSError(code, f"{os.strerror(code)} (injected{' ' + what if what else ''})")


class FaultyHandle:
    """A file handle whose writes, fsyncs and truncations go through `FaultyFS`."""

    def __init__(self, fs: FaultyFS, inner: FileHandle, path: Path):
        self.fs, self.inner, self.path = fs, inner, path

    def write(self, data: Buffer) -> int:
        self.fs.step("write", self.path)
        view = memoryview(data).cast("B")
        if self.fs.write_faults and self.fs.matches(self.path):
            if self.fs.write_errno == errno.ENOSPC and not self.fs.half_written and len(view) > 1:
                self.fs.half_written = True  # the disk fills up half way: a short write...
                return self.inner.write(view[: len(view) // 2])
            self.fs.write_faults -= 1  # ...and the write of the rest fails
            self.fs.half_written = False
            raise injected(self.fs.write_errno)
        if self.fs.short_writes and len(view) > 1:
            return self.inner.write(view[: max(1, len(view) // 3)])
        return self.inner.write(view)

    def fsync(self) -> None:
        self.fs.step("fsync", self.path)
        self.fs.maybe_fail_fsync(self.path)
        self.inner.fsync()

    def truncate(self, size: int) -> None:
        self.fs.step("truncate", self.path)
        self.inner.truncate(size)

    def close(self) -> None:
        self.inner.close()


class FaultyFS(OsFileSystem):
    """The OS file layer with injectable faults.

    - `crash_at=k`: the k-th mutating operation (1-based) raises `Crash` before it happens, and
      every later one too (the process is dead); `ops` lists the operations so far and
      `on_step(op, path)`, when set, runs before each.
    - `only`: the faults below touch only files whose name ends with it (".wal",
      ".parquet.tmp"); None: every file.
    - `fail_writes(code, times)`: the next `times` writes fail with `code`; ENOSPC writes half
      first (a short write) and fails the write of the rest, EIO fails at once.
    - `fsync_fail_after=k`: fsyncs after the first k raise EIO (`fsyncs` counts them).
    - `rename_fails=k`: the next k renames raise EIO.
    - `short_writes`: every write writes a third of what it is given.
    - `clear()`: every fault off.
    """

    def __init__(self, crash_at: int | None = None):
        self.crash_at = crash_at
        self.ops: list[tuple[str, str]] = []
        self.crashed = False
        self.on_step: Callable[[str, Path], None] | None = None
        self.only: str | None = None
        self.write_faults = 0
        self.write_errno = errno.ENOSPC
        self.half_written = False
        self.fsync_fail_after: int | None = None
        self.fsyncs = 0
        self.rename_fails = 0
        self.short_writes = False

    def clear(self) -> None:
        self.only, self.write_faults, self.half_written = None, 0, False
        self.fsync_fail_after, self.rename_fails, self.short_writes = None, 0, False

    def fail_writes(self, code: int, times: int = 1) -> None:
        self.write_errno, self.write_faults, self.half_written = code, times, False

    def matches(self, path: Path) -> bool:
        return self.only is None or Path(path).name.endswith(self.only)

    def step(self, op: str, path: Path) -> None:
        if self.crashed:
            raise Crash(f"dead: {op} {path}")
        self.ops.append((op, Path(path).name))
        if self.crash_at is not None and len(self.ops) >= self.crash_at:
            self.crashed = True
            raise Crash(f"crash before {op} {path}")
        if self.on_step is not None:
            self.on_step(op, Path(path))

    def maybe_fail_fsync(self, path: Path) -> None:
        if not self.matches(path):
            return
        self.fsyncs += 1
        if self.fsync_fail_after is not None and self.fsyncs > self.fsync_fail_after:
            raise injected(errno.EIO, f"fsync of {Path(path).name}")

    def open_append(self, path: Path) -> FileHandle:
        self.step("open_append", path)
        return FaultyHandle(self, super().open_append(path), path)

    def open_write(self, path: Path) -> FileHandle:
        self.step("open_write", path)
        return FaultyHandle(self, super().open_write(path), path)

    def rename(self, src: Path, dst: Path) -> None:
        self.step("rename", dst)
        if self.rename_fails and self.matches(src):
            self.rename_fails -= 1
            raise injected(errno.EIO, f"rename of {Path(src).name}")
        super().rename(src, dst)

    def remove(self, path: Path) -> None:
        self.step("remove", path)
        super().remove(path)

    def fsync_file(self, path: Path) -> None:
        self.step("fsync_file", path)
        self.maybe_fail_fsync(path)
        super().fsync_file(path)

    def fsync_dir(self, path: Path) -> None:
        self.step("fsync_dir", path)
        self.maybe_fail_fsync(path)
        super().fsync_dir(path)


class _NoSyncHandle:
    def __init__(self, inner: FileHandle):
        self.inner = inner

    def write(self, data: Buffer) -> int:
        return self.inner.write(data)

    def fsync(self) -> None:
        pass

    def truncate(self, size: int) -> None:
        self.inner.truncate(size)

    def close(self) -> None:
        self.inner.close()


class NoSyncFS(OsFileSystem):
    """The OS file layer minus fsyncs: for tests of logic, not durability, on a busy disk."""

    def open_append(self, path: Path) -> FileHandle:
        return _NoSyncHandle(super().open_append(path))

    def open_write(self, path: Path) -> FileHandle:
        return _NoSyncHandle(super().open_write(path))

    def fsync_file(self, path: Path) -> None:
        pass

    def fsync_dir(self, path: Path) -> None:
        pass
