"""Where a data directory keeps its sealed files: on the local disk, or in an S3 bucket.

The `segments` setting (`init --segments s3://bucket/prefix`) is chosen when the log is created
and never moved afterwards: the log's files would be in two places.
"""

from __future__ import annotations

from pathlib import Path

from ledger.errors import InvalidInput
from ledger.store.settings import LedgerSettings
from storage import FileSystem, ObjectLocation, ObjectStoreFileSystem
from storage import manifest as manifest_io
from storage.names import LOG_DIR, log_dir


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


def check_attach(root: Path, before: LedgerSettings, after: LedgerSettings,
                 take_over: bool) -> None:
    """Refuse to attach a new data directory to a prefix that already holds a log, unless
    `take_over`: the log has a writer elsewhere (no lock reaches across machines), whose events
    still in its local tail would never reach the bucket once this directory writes there."""
    if after.segments is None or before.segments == after.segments or take_over:
        return
    fs = filesystem(root, after, None)
    assert fs is not None
    found = manifest_io.load(fs, log_dir(root))
    if found is None:
        return
    raise InvalidInput(
        f"invalid segments {after.segments!r}: it already holds a ledger's log (manifest "
        f"revision {found.revision}, seqs {found.log_start_seq}..{found.active_base_seq} "
        f"sealed) written by another data directory; attaching {root} would take it over, and "
        "the events still in that writer's local tail would never reach the bucket. Stop that "
        "writer for good, then pass --take-over (Ledger.open(take_over=True))")
