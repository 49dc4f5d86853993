"""Where a data directory keeps its sealed files: on the local disk, or in an S3 bucket.

The `segments` setting (`init --segments s3://bucket/prefix`) is chosen when the log is created
and never moved afterwards: the log's files would be in two places.
"""

from __future__ import annotations

from pathlib import Path

from ledger.errors import InvalidInput
from ledger.store.settings import LedgerSettings
from storage import FileSystem, ObjectLocation, ObjectStoreFileSystem
from storage.names import LOG_DIR


def filesystem(root: Path, cfg: LedgerSettings, fs: FileSystem | None) -> FileSystem | None:
    """The file layer for `root`: `fs` if given, the bucket's when `segments` is set."""
    if fs is not None or cfg.segments is None:
        return fs
    return ObjectStoreFileSystem(root, ObjectLocation.parse(cfg.segments),
                                 endpoint=cfg.segments_endpoint)


def check_unmoved(root: Path, before: LedgerSettings, after: LedgerSettings) -> None:
    """Refuse a new `segments` location for a data directory whose log already exists."""
    if before.segments != after.segments and (root / LOG_DIR).exists():
        was = before.segments or "log/ on the local disk"
        raise InvalidInput(
            f"invalid segments {after.segments or 'local'!r}: {root} already keeps its sealed "
            f"segments in {was}; the location is chosen once, when the ledger is created")
