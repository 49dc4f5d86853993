"""`log/MANIFEST`: the one source of truth about which files are live.

JSON (msgspec) replaced atomically: write `MANIFEST.tmp`, fsync, rename, fsync the directory.
Readers trust it and never list the directory, so a seal, a retention step or a compaction swap
commits in one rename (as Delta and Iceberg commit), and the layout works on object storage:
there the commit is one conditional put on the ETag this writer read or wrote last, so a second
writer loses the race (`ManifestConflictError`) instead of overwriting.
"""

from __future__ import annotations

import base64
from pathlib import Path

import crc32c
import msgspec
import pyarrow as pa

from storage import names
from storage.errors import CorruptManifestError, ManifestConflictError, VersionConflictError
from storage.fs import FileSystem

FORMAT_VERSION = 1


class SegmentEntry(msgspec.Struct, frozen=True):
    """A live sealed segment: seqs [base_seq, end_seq), its ts extremes, size and file name."""

    base_seq: int
    end_seq: int
    ts_min: int
    ts_max: int
    events: int
    bytes: int
    file: str
    # crc32c of the whole file (None for files swapped in before checksums were recorded).
    crc32c: int | None = None


class CheckpointEntry(msgspec.Struct, frozen=True):
    """A checkpoint (state at `seq`) in `checkpoints/`."""

    seq: int
    file: str
    bytes: int | None = None
    crc32c: int | None = None


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything live in the log; `revision` increases with every commit."""

    version: int = FORMAT_VERSION
    revision: int = 0
    log_start_seq: int = 0
    # Largest ts among segments deleted by retention: a ts read at or before it is incomplete.
    retired_ts_max: int | None = None
    active_base_seq: int = 0
    segments: tuple[SegmentEntry, ...] = ()
    checkpoints: tuple[CheckpointEntry, ...] = ()
    schema: str = ""
    # crc32c of the compact JSON of this manifest with checksum null: a damaged digit (a ts
    # range that would prune wrongly) is caught on load, not trusted.
    checksum: int | None = None

    def arrow_schema(self) -> pa.Schema:
        """The schema the log was created with."""
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(self.schema)))

    def checkpoint_file(self, seq: int) -> str | None:
        """File name of the checkpoint at `seq`, if listed."""
        for entry in self.checkpoints:
            if entry.seq == seq:
                return entry.file
        return None


def encode_schema(schema: pa.Schema) -> str:
    """Schema as base64 Arrow IPC, stored in the manifest to refuse opening with another one."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def manifest_path(log_directory: Path) -> Path:
    """Where the manifest lives."""
    return log_directory / names.MANIFEST_FILE


def load(fs: FileSystem, log_directory: Path) -> Manifest | None:
    """The committed manifest, or None if the log was never created."""
    return load_tagged(fs, log_directory)[0]


def read_bytes(fs: FileSystem, log_directory: Path) -> bytes | None:
    """The manifest file as it is (None if the log was never created): a reader that holds
    these bytes already knows the manifest (`parse` needs not run again)."""
    try:
        return fs.read_bytes(manifest_path(log_directory))
    except FileNotFoundError:
        return None


def load_tagged(fs: FileSystem, log_directory: Path) -> tuple[Manifest | None, str | None]:
    """The committed manifest (None if the log was never created) and its version tag."""
    path = manifest_path(log_directory)
    try:
        data, tag = fs.read_versioned(path)
    except FileNotFoundError:
        return None, None
    return parse(data, path), tag


def parse(data: bytes, path: Path) -> Manifest:
    """A manifest from its file's bytes: decoded, its checksum and invariants checked."""
    try:
        manifest = msgspec.json.decode(data, type=Manifest)
    except msgspec.DecodeError as exc:
        raise CorruptManifestError(path, str(exc)) from exc
    if manifest.checksum is not None and manifest.checksum != checksum_of(manifest):
        raise CorruptManifestError(
            path, f"checksum mismatch (stored {manifest.checksum}, content "
            f"{checksum_of(manifest)}): the file was damaged or edited"
        )
    validate(manifest, path)
    return manifest


def checksum_of(manifest: Manifest) -> int:
    """crc32c of the manifest's compact JSON with `checksum` null."""
    unsummed = msgspec.structs.replace(manifest, checksum=None)
    return crc32c.crc32c(msgspec.json.encode(unsummed))


def validate(manifest: Manifest, path: Path) -> None:
    """Check the manifest's invariants: contiguous segments, start and active positions."""
    if manifest.version != FORMAT_VERSION:
        raise CorruptManifestError(
            path, f"format version {manifest.version}, this code reads {FORMAT_VERSION}"
        )
    expected = manifest.log_start_seq
    seen: set[str] = set()
    for entry in manifest.segments:
        if entry.base_seq != expected:
            raise CorruptManifestError(
                path, f"segment {entry.file} starts at {entry.base_seq}, expected {expected}"
            )
        if entry.end_seq <= entry.base_seq or entry.events != entry.end_seq - entry.base_seq:
            raise CorruptManifestError(
                path,
                f"segment {entry.file} covers {entry.base_seq}..{entry.end_seq} "
                f"with {entry.events} events",
            )
        if names.parse_seq_prefix(entry.file) != entry.base_seq or entry.file in seen:
            raise CorruptManifestError(path, f"bad or repeated file name {entry.file}")
        seen.add(entry.file)
        expected = entry.end_seq
    if manifest.active_base_seq != expected:
        raise CorruptManifestError(
            path, f"active segment starts at {manifest.active_base_seq}, expected {expected}"
        )
    previous = -1
    for checkpoint in manifest.checkpoints:
        if checkpoint.seq <= previous or checkpoint.file != names.checkpoint_name(checkpoint.seq):
            raise CorruptManifestError(path, f"bad checkpoint entry {checkpoint}")
        previous = checkpoint.seq
    try:
        manifest.arrow_schema()
    except Exception as exc:  # any decoding failure means the same thing here
        raise CorruptManifestError(path, f"undecodable schema: {exc}") from exc


def commit(fs: FileSystem, log_directory: Path, manifest: Manifest) -> Manifest:
    """Make `manifest` the committed one (the caller bumps `revision`); returns it."""
    return commit_tagged(fs, log_directory, manifest, None)[0]


def commit_tagged(
    fs: FileSystem, log_directory: Path, manifest: Manifest, expected: str | None
) -> tuple[Manifest, str | None]:
    """Make `manifest` the committed one if the stored one is still version `expected` (None:
    none stored yet); returns it and its new version tag.

    Locally: write tmp, fsync, rename over MANIFEST, fsync the directory (the writer lock keeps
    other writers out). On an object store: one conditional put. A crash leaves the old or the
    new manifest, never a mix; a lost race raises `ManifestConflictError` naming the location,
    the revision held and the one found, having written nothing.
    """
    path = manifest_path(log_directory)
    validate(manifest, path)
    manifest = msgspec.structs.replace(manifest, checksum=checksum_of(manifest))
    data = msgspec.json.format(msgspec.json.encode(manifest), indent=1)
    try:
        tag = fs.replace_versioned(path, data, expected)
    except VersionConflictError as exc:
        raise conflict(fs, log_directory, manifest.revision - 1) from exc
    return manifest, tag


def conflict(fs: FileSystem, log_directory: Path, held: int) -> ManifestConflictError:
    """The error of a writer holding revision `held` that lost the race to another writer,
    naming the revision stored now."""
    try:
        found = load(fs, log_directory)
    except (OSError, CorruptManifestError):
        found = None
    return ManifestConflictError(fs.describe(manifest_path(log_directory)), held,
                                 found.revision if found is not None else None)
