"""`cluster.toml`: the shards of a cluster, in order (a shard's index is its number).

```toml
[[shard]]
root = "/data/ledger-0"                # the shard's data directory
server = "http://10.0.0.1:9888"        # optional: route through its server instead of the root
segments = "s3://ledger/shard-0"       # optional: where its sealed segments live (object storage)
```

A relative `root` is taken from the cluster file's directory. Every value is checked here, once,
with one line naming the file, the shard and the bad value.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ledger.cluster.placement import shard_of
from ledger.errors import InvalidInput
from ledger.limits import CLUSTER_SHARDS_MAX

SHARD_KEYS = ("root", "server", "segments")
_S3 = re.compile(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/[^\s]*)?")


@dataclass(frozen=True)
class ShardSpec:
    """One shard as the cluster file names it."""

    index: int
    root: Path
    server: str | None = None
    segments: str | None = None

    @property
    def name(self) -> str:
        """How errors and notes name the shard: its number and where it is."""
        return f"shard {self.index} ({self.server or self.root})"


@dataclass(frozen=True)
class ClusterSpec:
    """The shards of a cluster file, in order."""

    path: Path
    shards: tuple[ShardSpec, ...]

    def shard_for(self, group: str) -> ShardSpec:
        """The shard that holds `group` (Kafka's placement of a group)."""
        return self.shards[shard_of(group, len(self.shards))]


def load_cluster(path: str | Path) -> ClusterSpec:
    """Read and check a cluster file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"cluster file {str(file)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"cannot read cluster file {str(file)!r}: {e}") from None
    return parse_cluster(text, file)


def parse_cluster(text: str, file: Path) -> ClusterSpec:
    """The cluster described by `text` (read from `file`, which relative roots start from)."""
    where = f"cluster file {str(file)!r}"
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InvalidInput(f"{where} is not valid TOML: {e}") from None
    unknown = sorted(set(doc) - {"shard"})
    if unknown:
        raise InvalidInput(f"{where}: unknown key {unknown[0]!r}: list shards as [[shard]] "
                           "tables")
    tables = doc.get("shard")
    if not isinstance(tables, list) or not tables:
        raise InvalidInput(f"{where} lists no shard: add [[shard]] tables with root = \"PATH\"")
    if len(tables) > CLUSTER_SHARDS_MAX:
        raise InvalidInput(f"{where} lists {len(tables)} shards: at most {CLUSTER_SHARDS_MAX}")
    base = file.resolve().parent
    shards = tuple(_shard(i, t, base, where) for i, t in enumerate(tables))
    for field in ("root", "server"):
        seen: dict[Any, int] = {}
        for s in shards:
            value = getattr(s, field)
            if value is not None and value in seen:
                raise InvalidInput(f"{where}: shards {seen[value]} and {s.index} have the same "
                                   f"{field} {str(value)!r}: each shard needs its own")
            seen[value] = s.index
    return ClusterSpec(file, shards)


def _shard(index: int, table: Any, base: Path, where: str) -> ShardSpec:
    at = f"{where}, shard {index}"
    if not isinstance(table, dict):
        raise InvalidInput(f"{at}: a shard is a [[shard]] table, not {table!r}")
    unknown = sorted(set(table) - set(SHARD_KEYS))
    if unknown:
        raise InvalidInput(f"{at}: unknown key {unknown[0]!r}: use {', '.join(SHARD_KEYS)}")
    root = table.get("root")
    if not isinstance(root, str) or not root.strip():
        raise InvalidInput(f"{at} needs root = \"PATH\" (its data directory), got {root!r}")
    server = table.get("server")
    if server is not None:
        server = _server_url(server, at)
    segments = table.get("segments")
    if segments is not None and (not isinstance(segments, str) or not _S3.fullmatch(segments)):
        raise InvalidInput(f"{at}: invalid segments {segments!r}: use s3://BUCKET/PREFIX")
    path = Path(root).expanduser()
    return ShardSpec(index, (path if path.is_absolute() else base / path).resolve(), server,
                     segments)


def _server_url(value: Any, at: str) -> str:
    """`http(s)://HOST:PORT` (no path, query or credentials), without a trailing slash."""
    bad = InvalidInput(f"{at}: invalid server {value!r}: use http://HOST:PORT or "
                       "https://HOST:PORT")
    if not isinstance(value, str):
        raise bad
    parts = urlsplit(value.strip())
    try:
        port = parts.port
    except ValueError:
        raise bad from None
    if (parts.scheme not in ("http", "https") or not parts.hostname or port is None
            or parts.path not in ("", "/") or parts.query or parts.fragment or parts.username):
        raise bad
    return f"{parts.scheme}://{parts.netloc}"
