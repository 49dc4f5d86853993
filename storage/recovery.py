"""The loader: what opening a log finds on disk, and what a writer repairs (Kafka's `LogLoader`).

A writer trusts the manifest and makes the directory agree with it: files the manifest does not
list are leftovers of an interrupted seal, swap or checkpoint and are deleted; listed files must
be there with the listed size; the active segment's torn tail (a crash leaves at most one torn
write) is cut; checkpoints past the recovered end are unlisted; a full active segment is sealed.
A reader changes nothing: it takes a snapshot of the manifest and the tail's intact prefix.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec

from storage import manifest as manifest_io
from storage import names
from storage.acknowledged import Witness, acknowledged_by
from storage.active import RecoveredTail
from storage.errors import CorruptManifestError, CorruptSegmentError, SchemaError, StorageError
from storage.failure import FailureLatch
from storage.fs import remove_quietly
from storage.manifest import Manifest
from storage.sealer import Sealer
from storage.segments import LogSegments, SegmentInfo

log = logging.getLogger(__name__)

# How often a reader re-reads the manifest when a writer changes files under it.
READER_RETRIES_MAX = 20


class RecoveryReport(msgspec.Struct, frozen=True):
    """What opening the log found and repaired (writer) or read (reader)."""

    tail: RecoveredTail
    files_deleted: tuple[str, ...] = ()
    sealed: tuple[SegmentInfo, ...] = ()

    @property
    def bytes_cut(self) -> int:
        """Bytes of torn or corrupt tail cut from the active segment."""
        return self.tail.bytes_cut


def recover(
    segments: LogSegments, sealer: Sealer, latch: FailureLatch, clock: Callable[[], int],
    *, durability: str, witness: Callable[[], Witness | None] | None = None,
) -> RecoveryReport:
    """Writer open, under the writer lock: create or load the manifest and repair the directory.

    A damaged last frame is cut only if nothing proves it acknowledged (`storage.acknowledged`:
    a later frame, a checkpoint, or the caller's `witness`, asked only when a frame is damaged).
    Leaves `segments` holding the manifest and the recovered active segment. If it raises, the
    caller closes `segments.active`.
    """
    fs = segments.fs
    fs.makedirs(segments.log_dir)
    fs.makedirs(segments.checkpoint_dir)
    current = manifest_io.load(fs, segments.log_dir)
    if current is None:
        current = _create(segments)
    _check_stored_schema(segments, current)
    segments.manifest = current
    deleted = _delete_unlisted(segments)
    _check_live_files(segments)
    segments.active = segments.new_active(current.active_base_seq)
    checkpoint_seqs = [c.seq for c in current.checkpoints]

    def acknowledged(first_seq: int) -> str | None:
        return acknowledged_by(first_seq, checkpoint_seqs, durability,
                               witness() if witness is not None else None)

    tail = segments.active.load(truncate=True, acknowledged=acknowledged)
    if tail.bytes_cut:
        log.warning("cut %d bytes of torn tail from %s: %s", tail.bytes_cut,
                    tail.path, tail.reason)
    deleted += _drop_checkpoints_beyond_the_end(segments, latch)
    now = clock()
    segments.active_synced_ms = now
    active = segments.active
    if active.rolling_ts_ms is not None:
        active.rolling_ts_ms = min(active.rolling_ts_ms, now)
    sealed: list[SegmentInfo] = []
    if sealer.full():
        with latch.failing_on_fsync():
            # a full disk must not stop the open
            sealed = sealer.seal_after_append(background=False)
    return RecoveryReport(tail, tuple(deleted), tuple(sealed))


def _drop_checkpoints_beyond_the_end(segments: LogSegments, latch: FailureLatch) -> list[str]:
    """Unlist checkpoints past the recovered log end: they hold a state of events the log
    lost (an unsynced tail under durability "batch" or "none", then a power loss), and the
    seq they name would later be reached by other events."""
    end = segments.active.end_seq
    checkpoints = segments.manifest.checkpoints
    beyond = [c for c in checkpoints if c.seq > end]
    if not beyond:
        return []
    with latch.failing_on_fsync():
        segments.commit(checkpoints=tuple(c for c in checkpoints if c.seq <= end))
    log.warning("dropped checkpoints beyond the log end %d: %s", end,
                [c.file for c in beyond])
    for checkpoint in beyond:
        remove_quietly(segments.fs, segments.checkpoint_dir / checkpoint.file)
    return [f"{segments.checkpoint_dir.name}/{c.file}" for c in beyond]


def _create(segments: LogSegments) -> Manifest:
    """Commit the first manifest of a new log; refuse if segments exist without one."""
    log_dir = segments.log_dir
    leftovers = [
        n for n in segments.fs.listdir(log_dir)
        if names.is_log_file(n) and not n.endswith(names.TMP_SUFFIX)
        and n != names.MANIFEST_FILE
    ]
    if leftovers:
        raise CorruptManifestError(
            manifest_io.manifest_path(log_dir),
            f"missing, but {log_dir} holds {sorted(leftovers)[:5]}: refusing to "
            "start a new log over them",
        )
    first = Manifest(revision=1, schema=manifest_io.encode_schema(segments.schema))
    return manifest_io.commit(segments.fs, log_dir, first)


def _check_stored_schema(segments: LogSegments, current: Manifest) -> None:
    """A log is opened with the schema it was created with (metadata aside)."""
    stored = current.arrow_schema()
    if not stored.equals(segments.schema, check_metadata=False):
        raise SchemaError(
            f"the log at {segments.root} was created with schema {stored}, opened with "
            f"{segments.schema}"
        )


def _delete_unlisted(segments: LogSegments) -> list[str]:
    """Delete our files that the manifest does not list (leftovers of interrupted steps)."""
    fs = segments.fs
    current = segments.manifest
    live_log = {e.file for e in current.segments}
    live_log.add(names.wal_name(current.active_base_seq))
    live_log.add(names.MANIFEST_FILE)
    live_checkpoints = {c.file for c in current.checkpoints}
    deleted: list[str] = []
    for directory, live, ours in (
        (segments.log_dir, live_log, names.is_log_file),
        (segments.checkpoint_dir, live_checkpoints, names.is_checkpoint_file),
    ):
        for name in sorted(fs.listdir(directory)):
            if ours(name) and name not in live and remove_quietly(fs, directory / name):
                deleted.append(f"{directory.name}/{name}")
    if deleted:
        log.info("deleted files not in the manifest: %s", deleted)
    return deleted


def _check_live_files(segments: LogSegments) -> None:
    """Every listed segment is there with the listed size, every listed checkpoint is there."""
    fs = segments.fs
    for entry in segments.manifest.segments:
        path = segments.log_dir / entry.file
        try:
            size = fs.size(path)
        except FileNotFoundError:
            raise CorruptSegmentError(
                path, entry.base_seq, entry.end_seq, "listed in the manifest but missing"
            ) from None
        if size != entry.bytes:
            raise CorruptSegmentError(
                path, entry.base_seq, entry.end_seq,
                f"file holds {size} bytes, the manifest says {entry.bytes}",
            )
    for checkpoint in segments.manifest.checkpoints:
        path = segments.checkpoint_dir / checkpoint.file
        if not fs.exists(path):
            raise CorruptSegmentError(
                path, None, None, f"checkpoint at seq {checkpoint.seq} is missing"
            )


def take_snapshot(segments: LogSegments) -> RecoveryReport:
    """Reader: read manifest then tail; retry until the manifest did not change in between."""
    fs, log_dir = segments.fs, segments.log_dir
    for _ in range(READER_RETRIES_MAX):
        first = manifest_io.load(fs, log_dir)
        if first is None:
            raise StorageError(
                f"no log at {segments.root}: {manifest_io.manifest_path(log_dir)} not found"
            )
        _check_stored_schema(segments, first)
        active = segments.new_active(first.active_base_seq)
        tail = active.load(truncate=False)
        second = manifest_io.load(fs, log_dir)
        if second is not None and second.revision == first.revision:
            segments.manifest = first
            segments.active = active
            return RecoveryReport(tail)
    raise StorageError(f"the log at {segments.root} kept changing while taking a snapshot")


def take_newer_snapshot(segments: LogSegments) -> RecoveryReport | None:
    """Reader: a new snapshot if the manifest changed since the one held, else None."""
    current = manifest_io.load(segments.fs, segments.log_dir)
    if current is None or current.revision == segments.manifest.revision:
        return None
    return take_snapshot(segments)
