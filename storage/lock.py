"""The writer lock: `LOCK` in the data directory, held with `fcntl.flock`.

The kernel releases a flock when its holder dies, so a lock left by a killed writer is recovered
without any staleness guess; the file holds the holder's pid so a refused writer can name it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from storage import names
from storage.errors import LockedError


class WriterLock:
    """An exclusive, non-blocking lock on `<root>/LOCK` (one writer per data directory)."""

    def __init__(self, root: Path):
        self.path = root / names.LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise `LockedError` naming the holder's pid."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LockedError(self.path, read_holder(self.path)) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (closing the descriptor releases the flock)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None


def read_holder(path: Path) -> int | None:
    """The pid written in a lock file, if readable."""
    with contextlib.suppress(OSError, ValueError):
        with open(path, "rb") as f:
            text = f.read(32).decode("ascii", "replace").strip()
        return int(text) if text else None
    return None
