"""`ObjectStoreFileSystem`: a data directory whose sealed files live in an S3 bucket.

The file layer every storage module already goes through, so no module has a second code path:
a path under the data directory names an object when it is a sealed segment or the manifest in
`log/`, or a checkpoint in `checkpoints/` (`s3://bucket/prefix/log/<name>`, `.../checkpoints/
<name>`); everything else (the active WAL, temporaries, the lock) stays on the local disk.

- A sealed file is written to its local `.tmp` name, fsynced, then "renamed" to its final
  name: the rename is the upload (one PUT, atomic on S3, `If-None-Match: *` so that it never
  replaces an object another writer put there), so an object exists whole before the manifest
  names it. A crash between the upload and the manifest commit leaves an unlisted
  object, which readers ignore (they trust the manifest) and the next writer open deletes.
- The manifest is replaced by a conditional put (`If-Match` on the ETag this writer read or
  wrote last, `If-None-Match: *` for the first), as Delta and Iceberg commit: a second writer
  gets HTTP 412 and loses the race (`VersionConflictError`), never overwriting. pyarrow's
  S3FileSystem has no conditional put, so boto3 makes the PUTs (and reads the manifest with its
  ETag) and the deletes; pyarrow's S3FileSystem does every other read and the listings.
- Readers that open files themselves (DuckDB, Spark) get `local_copy`: the object downloaded
  once into `<root>/s3-cache/`, under its crc32c so a reused name never serves old bytes.

Endpoint and credentials: the standard AWS variables (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_REGION`), or `endpoint` given here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec
import pyarrow as pa
import pyarrow.fs as pafs

from storage import names
from storage.errors import SettingsError, VersionConflictError
from storage.fs import Buffer, FileHandle, FileSystem

SCHEME = "s3://"
CACHE_DIR = "s3-cache"
COPY_CHUNK_BYTES = 8 * 1024 * 1024
DEFAULT_REGION = "us-east-1"


class ObjectLocation(msgspec.Struct, frozen=True):
    """`s3://bucket/prefix`: where a data directory's sealed files live."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> ObjectLocation:
        """Parse `s3://bucket[/prefix]`; a `SettingsError` names a bad value."""
        if not isinstance(url, str) or not url.startswith(SCHEME):
            raise SettingsError(f"segments location {url!r} must look like s3://bucket/prefix")
        bucket, _, prefix = url[len(SCHEME):].partition("/")
        if not bucket or not all(c.isalnum() or c in "-." for c in bucket):
            raise SettingsError(f"segments location {url!r} has no valid bucket name")
        prefix = prefix.strip("/")
        if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
            raise SettingsError(f"segments location {url!r} has an empty or relative prefix part")
        return cls(bucket, prefix)

    @property
    def url(self) -> str:
        """`s3://bucket/prefix` (no trailing slash)."""
        return SCHEME + self.key("")[:-1]

    def key(self, relative: str) -> str:
        """`bucket/prefix/relative`, the path pyarrow's S3FileSystem takes."""
        parts = [self.bucket] + ([self.prefix] if self.prefix else []) + [relative]
        return "/".join(parts)


def endpoint_from_env(endpoint: str | None) -> str | None:
    """The endpoint given, else `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL` (None: AWS)."""
    return endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


class ObjectStoreFileSystem(FileSystem):
    """The data directory `root` on the local disk, its sealed files in `location`."""

    def __init__(self, root: Path, location: ObjectLocation, *, endpoint: str | None = None):
        self.root = Path(os.path.abspath(root))
        self.location = location
        self.endpoint = endpoint_from_env(endpoint)
        self.region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") \
            or DEFAULT_REGION
        self._remote_dirs = {
            self.root / names.LOG_DIR: names.LOG_DIR,
            self.root / names.CHECKPOINT_DIR: names.CHECKPOINT_DIR,
        }
        kwargs: dict[str, Any] = {"region": self.region}
        if self.endpoint is not None:
            parts = urlsplit(self.endpoint)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise SettingsError(f"S3 endpoint {self.endpoint!r} must be http(s)://host[:port]")
            kwargs.update(endpoint_override=parts.netloc, scheme=parts.scheme)
        self.s3 = pafs.S3FileSystem(**kwargs)
        self._client: Any = None
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ObjectStoreFileSystem({str(self.root)!r}, {self.location.url!r})"

    # ----------------------------------------------------------------------------- mapping

    def key(self, path: Path) -> str | None:
        """`bucket/prefix/<dir>/<name>` if `path` is a file kept in the bucket, else None."""
        path = Path(os.path.abspath(path))
        directory = self._remote_dirs.get(path.parent)
        name = path.name
        if directory is None or name.endswith(names.TMP_SUFFIX):
            return None
        if directory == names.LOG_DIR:
            if not names.is_log_file(name) or name.endswith(names.WAL_SUFFIX):
                return None
        elif not names.is_checkpoint_file(name):
            return None
        return self.location.key(f"{directory}/{name}")

    def describe(self, path: Path) -> str:
        key = self.key(path)
        return SCHEME + key if key is not None else str(path)

    def _missing(self, key: str) -> FileNotFoundError:
        return FileNotFoundError(errno.ENOENT, "no such object", SCHEME + key)

    # ----------------------------------------------------------------------------- files

    def open_append(self, path: Path) -> FileHandle:
        self._refuse_partial(path)
        return super().open_append(path)

    def open_write(self, path: Path) -> FileHandle:
        self._refuse_partial(path)
        return super().open_write(path)

    def _refuse_partial(self, path: Path) -> None:
        key = self.key(path)
        if key is not None:
            raise OSError(errno.EINVAL, "objects are written whole (write .tmp, then rename)",
                          SCHEME + key)

    def read_bytes(self, path: Path) -> bytes:
        key = self.key(path)
        if key is None:
            return super().read_bytes(path)
        try:
            with self.s3.open_input_stream(key) as stream:
                return stream.read()
        except FileNotFoundError:
            raise self._missing(key) from None

    def open_input(self, path: Path) -> pa.NativeFile:
        key = self.key(path)
        if key is None:
            return super().open_input(path)
        try:
            return self.s3.open_input_file(key)
        except FileNotFoundError:
            raise self._missing(key) from None

    def rename(self, src: Path, dst: Path) -> None:
        """Local to bucket: upload, then delete the local file (the upload is the commit of the
        file's bytes; S3 never shows a partial object). Bucket to local: download, delete."""
        src_key, dst_key = self.key(src), self.key(dst)
        if src_key is None and dst_key is None:
            super().rename(src, dst)
        elif src_key is None:
            assert dst_key is not None
            self._put_new(src, dst_key)
            os.remove(src)
        elif dst_key is None:
            self._download(src_key, dst)
            self.remove(src)
        else:
            self.s3.copy_file(src_key, dst_key)
            self.remove(src)

    def _put_new(self, local: Path, key: str) -> None:
        """Upload `local` as a new object: `If-None-Match: *`, so an object another writer put
        under the same name (a stale writer sealing the same seqs) is never replaced."""
        with open(local, "rb") as body:
            self._put(key, body, None)

    def _download(self, key: str, local: Path) -> None:
        tmp = local.with_name(f"{local.name}.{uuid.uuid4().hex}.download")
        try:
            with self.s3.open_input_stream(key) as source, open(tmp, "wb") as sink:
                shutil.copyfileobj(source, sink, COPY_CHUNK_BYTES)
            os.replace(tmp, local)
        except FileNotFoundError:
            raise self._missing(key) from None
        finally:
            if tmp.exists():
                os.remove(tmp)

    def remove(self, path: Path) -> None:
        key = self.key(path)
        if key is None:
            super().remove(path)
            return
        self._forget_copies(path)
        if self.s3.get_file_info(key).type == pafs.FileType.NotFound:
            raise self._missing(key)
        # boto3, not pyarrow: pyarrow's delete_file leaves a "directory" marker object behind
        bucket, object_key = key.split("/", 1)
        self._boto().delete_object(Bucket=bucket, Key=object_key)

    def fsync_file(self, path: Path) -> None:
        if self.key(path) is None:
            super().fsync_file(path)  # an uploaded object is durable once the PUT returns

    def exists(self, path: Path) -> bool:
        key = self.key(path)
        if key is None:
            return super().exists(path)
        return self.s3.get_file_info(key).type != pafs.FileType.NotFound

    def size(self, path: Path) -> int:
        key = self.key(path)
        if key is None:
            return super().size(path)
        info = self.s3.get_file_info(key)
        if info.type == pafs.FileType.NotFound:
            raise self._missing(key)
        return int(info.size)

    def listdir(self, path: Path) -> list[str]:
        """Local names, plus the bucket's objects for `log/` and `checkpoints/`."""
        found = set(super().listdir(path)) if os.path.isdir(path) else set()
        directory = self._remote_dirs.get(Path(os.path.abspath(path)))
        if directory is not None:
            selector = pafs.FileSelector(self.location.key(directory), allow_not_found=True)
            found.update(info.base_name for info in self.s3.get_file_info(selector)
                         if info.type == pafs.FileType.File)
        return sorted(found)

    # ----------------------------------------------------------------------------- manifest

    def _boto(self) -> Any:
        with self._client_lock:
            if self._client is None:
                try:
                    import boto3
                except ImportError:
                    raise SettingsError(
                        "segments in S3 need boto3 for the manifest's conditional put: "
                        "pip install 'offset-ledger[s3]'") from None
                self._client = boto3.client("s3", endpoint_url=self.endpoint,
                                            region_name=self.region)
            return self._client

    def read_versioned(self, path: Path) -> tuple[bytes, str | None]:
        key = self.key(path)
        if key is None:
            return super().read_versioned(path)
        client = self._boto()
        bucket, object_key = key.split("/", 1)
        try:
            answer = client.get_object(Bucket=bucket, Key=object_key)
        except client.exceptions.NoSuchKey:
            raise self._missing(key) from None
        return answer["Body"].read(), answer["ETag"]

    def replace_versioned(self, path: Path, data: Buffer, expected: str | None) -> str | None:
        key = self.key(path)
        if key is None:
            return super().replace_versioned(path, data, expected)
        return self._put(key, bytes(data), expected)

    def _put(self, key: str, body: Any, expected: str | None) -> str:
        """One conditional PUT (`If-Match: expected`, `If-None-Match: *` when None); the new
        ETag. A 412 (or 409, a concurrent conditional put) is `VersionConflictError`."""
        from botocore.exceptions import ClientError

        client = self._boto()
        bucket, object_key = key.split("/", 1)
        condition = {"IfMatch": expected} if expected is not None else {"IfNoneMatch": "*"}
        try:
            answer = client.put_object(Bucket=bucket, Key=object_key, Body=body, **condition)
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = exc.response.get("Error", {}).get("Code")
            if status in (409, 412) or code in ("PreconditionFailed",
                                                "ConditionalRequestConflict"):
                raise VersionConflictError(SCHEME + key, expected) from exc
            raise OSError(errno.EIO, f"S3 put failed: {exc}", SCHEME + key) from exc
        return str(answer["ETag"])

    # ----------------------------------------------------------------------------- local copies

    def _copy_path(self, path: Path, crc: int | None) -> Path:
        """`<root>/s3-cache/<dir>/<crc32c>/<name>`: the file's own name (callers match it with
        the manifest's), under its checksum so a reused name never serves other bytes."""
        directory = self._remote_dirs[Path(os.path.abspath(path)).parent]
        version = f"{crc:08x}" if crc is not None else "unchecked"
        return self.root / CACHE_DIR / directory / version / path.name

    def local_copy(self, path: Path, crc: int | None) -> Path:
        key = self.key(path)
        if key is None:
            return path
        copy = self._copy_path(path, crc)
        if crc is None or not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True)
            self._download(key, copy)
        return copy

    def _forget_copies(self, path: Path) -> None:
        directory = self.root / CACHE_DIR / self._remote_dirs[Path(os.path.abspath(path)).parent]
        if directory.is_dir():
            for copy in directory.glob(f"*/{path.name}"):
                copy.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    copy.parent.rmdir()
