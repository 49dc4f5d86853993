"""`LogSegments`: the live segments of one log as this process sees them (Kafka's `LogSegments`).

The sealed segments, the log start and the checkpoints are the manifest this process last
committed (writer) or read (reader); the active WAL segment follows the last sealed one. Every
change of the live set goes through `commit`, one atomic manifest update, so the loader, the
sealer, the swap, retention and checkpoints all change the log the same way.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pyarrow as pa

from storage import manifest as manifest_io
from storage import names
from storage.active import ActiveSegment
from storage.errors import CorruptSegmentError, ManifestConflictError
from storage.frames import FrameEncoder
from storage.fs import FileSystem
from storage.manifest import Manifest, SegmentEntry
from storage.schema import SEQ_COLUMN, TS_COLUMN


class SegmentInfo(msgspec.Struct, frozen=True):
    """A sealed segment: seqs [base_seq, end_seq), ts extremes, size and where it lives."""

    base_seq: int
    end_seq: int
    ts_min: int
    ts_max: int
    events: int
    bytes: int
    path: Path


class LogSegments:
    """The manifest in force and the active segment after it, in data directory `root`."""

    def __init__(self, root: Path, fs: FileSystem, schema: pa.Schema):
        self.root = root
        self.fs = fs
        self.schema = schema
        self.log_dir = names.log_dir(root)
        self.checkpoint_dir = names.checkpoint_dir(root)
        self.seq_index = schema.get_field_index(SEQ_COLUMN)
        self.ts_index = schema.get_field_index(TS_COLUMN)
        self.manifest = Manifest()
        # A reader's snapshot: the manifest file's bytes (an unchanged file is not parsed again).
        self.manifest_bytes: bytes | None = None
        # Version tag of the stored manifest this process read or wrote last (an object store's
        # ETag): the next commit is conditional on it.
        self.manifest_tag: str | None = None
        self.encoder = FrameEncoder()  # every active segment's frames, one kept buffer
        self.active = self.new_active(0)
        # The clock when the active segment was last fsynced (or started): durability "batch"
        # counts its interval from here.
        self.active_synced_ms = 0

    def new_active(self, base_seq: int) -> ActiveSegment:
        """An active segment object for `log/<base_seq>.wal` (nothing is read or written yet)."""
        return ActiveSegment(
            self.fs, self.log_dir, base_seq, self.schema, self.seq_index, self.ts_index,
            self.encoder,
        )

    def commit(self, **changes: object) -> None:
        """Commit a manifest with `changes` and the next revision; the in-memory copy follows."""
        proposed = msgspec.structs.replace(
            self.manifest, revision=self.manifest.revision + 1, **changes
        )
        self.manifest, self.manifest_tag = manifest_io.commit_tagged(
            self.fs, self.log_dir, proposed, self.manifest_tag
        )

    def info(self, entry: SegmentEntry) -> SegmentInfo:
        """What callers see of a manifest entry: its facts and its path."""
        return SegmentInfo(
            base_seq=entry.base_seq, end_seq=entry.end_seq, ts_min=entry.ts_min,
            ts_max=entry.ts_max, events=entry.events, bytes=entry.bytes,
            path=self.log_dir / entry.file,
        )

    def readable_info(self, entry: SegmentEntry) -> SegmentInfo:
        """`info` with a path that readers opening files themselves (DuckDB, Spark) can open:
        on an object store, a local copy of the object (downloaded once)."""
        info = self.info(entry)
        try:
            local = self.fs.local_copy(info.path, entry.crc32c)
        except FileNotFoundError:
            raise CorruptSegmentError(self.where(info.path), entry.base_seq, entry.end_seq,
                                      "listed in the manifest but missing") from None
        return msgspec.structs.replace(info, path=local)

    def lost_race(self) -> ManifestConflictError:
        """The error of a change that found another writer's object or manifest in its way."""
        return manifest_io.conflict(self.fs, self.log_dir, self.manifest.revision)

    def where(self, path: Path) -> str:
        """Where a file of this log really is, for messages (an object's URL on a bucket)."""
        return self.fs.describe(path)
