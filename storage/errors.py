"""Errors of the storage layer: operating errors a caller can handle, each naming its context.

Invariant failures carry the values and the file (Kafka style), so a message alone says what is
wrong and where.
"""

from __future__ import annotations

from pathlib import Path


class StorageError(Exception):
    """Base of every error the storage layer raises on purpose."""


class SettingsError(StorageError, ValueError):
    """A setting (or a combination of settings) is out of range; the message names it."""


class SchemaError(StorageError):
    """Rows or files whose schema does not match the log's."""


class ReadOnlyError(StorageError):
    """A change was asked of a log opened with writer=False."""


class CorruptSegmentError(StorageError):
    """A sealed segment (or other file) cannot be trusted; never dropped silently."""

    def __init__(self, path: Path | str, base_seq: int | None, end_seq: int | None, why: str):
        self.path = Path(path)
        self.base_seq = base_seq
        self.end_seq = end_seq
        self.why = why
        where = ""
        if base_seq is not None:
            where = f" (seq {base_seq}..{end_seq})" if end_seq is not None else f" (seq {base_seq}..)"
        super().__init__(f"corrupt segment {self.path}{where}: {why}")


class CorruptManifestError(StorageError):
    """The manifest cannot be parsed or breaks an invariant of the log."""

    def __init__(self, path: Path | str, why: str):
        self.path = Path(path)
        self.why = why
        super().__init__(f"corrupt manifest {self.path}: {why}")


class LockedError(StorageError):
    """Another writer holds the data directory's lock."""

    def __init__(self, path: Path | str, pid: int | None):
        self.path = Path(path)
        self.pid = pid
        holder = f"process {pid}" if pid is not None else "another process"
        super().__init__(
            f"the log at {self.path.parent} is locked by {holder} (lock file {self.path}); "
            "one writer per data directory: stop it first (reads need no lock)"
        )


class LogRangeError(StorageError):
    """A read asked for history that retention already deleted."""

    def __init__(self, asked: str, start_seq: int, earliest_ts: int | None):
        self.start_seq = start_seq
        self.earliest_ts = earliest_ts
        ts = f"; reads by time start at ts {earliest_ts} at the earliest" if earliest_ts else ""
        super().__init__(
            f"{asked} is before the log start: the earliest event still held is "
            f"seq {start_seq}{ts} (older segments were deleted by retention)"
        )


class FsyncError(StorageError):
    """An fsync failed: what was written to `path` is not known to be on stable storage."""

    def __init__(self, path: Path | str, cause: OSError):
        self.path = Path(path)
        self.cause = cause
        super().__init__(f"fsync of {self.path} failed: {cause}")


class WriteFailedError(StorageError, OSError):
    """A write, rename or delete of the log failed (disk full, I/O error) and was undone: the log
    holds what it held before the call, and stays usable once the cause is fixed.

    Also an OSError (with the cause's errno), so callers that handle disk errors still do.
    """

    def __init__(self, root: Path | str, cause: OSError):
        self.root = Path(root)
        self.cause = cause
        OSError.__init__(
            self,
            f"a write to the log at {self.root} failed and was undone ({_os_error_text(cause)}); "
            "what was acknowledged before is intact",
        )
        self.errno = cause.errno


def _os_error_text(cause: OSError) -> str:
    text = cause.strerror or str(cause) or type(cause).__name__
    if cause.filename is not None:
        text += f": {cause.filename}"
    return text


class LogFailedError(StorageError):
    """The log saw an fsync failure (or an uncertain write) and refuses changes until reopened.

    After a failed fsync the kernel may have dropped the dirty pages, so retrying the fsync would
    report success over lost data (the PostgreSQL fsync lesson); reopening recovers from disk.
    """

    def __init__(self, cause: BaseException):
        self.cause = cause
        super().__init__(
            f"the log is unusable after a failed fsync or write ({cause}); "
            "close it and open it again to recover from what is on disk"
        )
