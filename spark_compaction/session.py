"""The one place that builds the SparkSession and reads ledger logs into Spark.

Every job goes through `spark_session` (one session per process, reused by `getOrCreate`) and
`read_events` (the segment dataset of one or more ledger roots: the scale path of DESIGN.md).
Files come from each root's manifest, never from a directory listing, so a reader never sees a
segment that a compaction swap or retention has not committed; the active tail (a WAL that
Spark cannot read) is decoded on the driver and joined in as a small Arrow-backed DataFrame.

Several roots (the shards of a cluster, DESIGN.md "Scale path") are one dataset: the manifests'
file lists are unioned into a single Parquet read, and each row is tagged with its `shard`, the
root's index in the list, from the directory its file lies in. `worker_paths` is where a root's
manifest becomes paths every worker can read (the hook for segments kept on object storage).
"""

from __future__ import annotations

import hashlib
import os
import socket
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from ledger.fold.events import EVENT_SCHEMA
from ledger.store import settings as ledger_settings
from ledger.store import tier
from storage import SegmentedLog, SegmentInfo

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

APP_NAME = "offset-ledger"
MASTER_DEFAULT = "local[*]"
#: Local mode runs on a few cores; Spark's 200 shuffle partitions would be mostly empty tasks.
LOCAL_SHUFFLE_PARTITIONS = 4
DRIVER_MEMORY_DEFAULT = "2g"
#: What one job hands the driver at most: a sort chunk of compaction (~1M events as Arrow,
#: ~150 MB) or an audit's findings; more means something is wrong, so fail rather than swap.
DRIVER_RESULT_BYTES_MAX = "1g"
#: Input paths Spark stats on the driver before it lists them with a distributed job instead
#: (default 32): the jobs name every file of many manifests, and a listing job costs a Spark
#: job's scheduling (seconds on a cluster) where stating a few thousand files costs milliseconds.
PARTITION_DISCOVERY_THRESHOLD = 100_000
#: The column that tags each row with its root's index in the list of roots.
SHARD_COLUMN = "shard"

_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""

Roots = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def _log4j_config() -> Path:
    """A log4j2 file that keeps the JVM to errors (read when the JVM starts; one per content)."""
    digest = hashlib.sha256(_LOG4J2.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"offset-ledger-log4j2-{digest}.properties"
    if not path.exists():
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2)
        os.replace(tmp, path)
    return path


def spark_session(
    master: str | None = None,
    *,
    shuffle_partitions: int | None = None,
    driver_memory: str = DRIVER_MEMORY_DEFAULT,
) -> SparkSession:
    """The process's SparkSession, built on first use and reused after (getOrCreate).

    An existing session is returned as it is: `master` and the other settings only apply to the
    first build (a JVM's master cannot change).
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    master = master or MASTER_DEFAULT
    local = master.startswith("local")
    builder = (
        SparkSession.builder.appName(APP_NAME)
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.maxResultSize", DRIVER_RESULT_BYTES_MAX)
        .config("spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile=file:{_log4j_config()}")
    )
    host = driver_host(master)
    if host is not None:
        builder = builder.config("spark.driver.bindAddress", host).config(
            "spark.driver.host", host
        )
    builder = builder.config("spark.sql.sources.parallelPartitionDiscovery.threshold",
                             str(PARTITION_DISCOVERY_THRESHOLD))
    partitions = shuffle_partitions or (LOCAL_SHUFFLE_PARTITIONS if local else None)
    if partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(partitions))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def driver_host(master: str) -> str | None:
    """The address the driver binds and advertises: loopback for `local`; for a standalone
    master (`spark://HOST:PORT[,HOST2:PORT2]`) this machine's address on the route to the
    (first) master, the address the master and its workers see, so that executors connect back
    to it (a loopback master gives loopback). None for other masters, or when the master's host
    does not resolve: Spark's own choice then (SPARK_LOCAL_IP, else the host name)."""
    if master.startswith("local"):
        return "127.0.0.1"
    if not master.startswith("spark://"):
        return None
    first = master.removeprefix("spark://").split(",")[0]
    host, _, port = first.rpartition(":")
    host = host.strip("[]")
    try:
        family, _, _, _, address = socket.getaddrinfo(host, int(port or 7077),
                                                       type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)  # UDP: picks the route and its source address, sends nothing
            return str(probe.getsockname()[0])
    except (OSError, ValueError):
        return None


def as_roots(roots: Roots) -> list[Path]:
    """One root or a list of roots, as paths (a root named twice is refused: its rows would
    count twice)."""
    from ledger.errors import InvalidInput

    if isinstance(roots, str | os.PathLike):
        return [Path(roots)]
    chosen = [Path(r) for r in roots]
    seen: set[Path] = set()
    for root in chosen:
        if root.resolve() in seen:
            raise InvalidInput(f"root {root} is named twice")
        seen.add(root.resolve())
    return chosen


@dataclass(frozen=True)
class LogSnapshot:
    """What one ledger root's manifest listed at one moment, plus its decoded active tail."""

    root: Path
    segments: tuple[SegmentInfo, ...]
    tail: pa.Table
    start_seq: int
    next_seq: int
    checkpoints: tuple[tuple[int, Path], ...]
    #: The root's index in the list of roots read together.
    shard: int = 0

    def segments_overlapping(self, seq_gte: int, seq_lt: int) -> list[SegmentInfo]:
        """Segments holding any seq in [seq_gte, seq_lt)."""
        return [s for s in self.segments if s.end_seq > seq_gte and s.base_seq < seq_lt]


def snapshot(root: str | os.PathLike[str], shard: int = 0) -> LogSnapshot:
    """A consistent snapshot of a root (manifest + tail) through a lock-free storage reader."""
    with open_reader(root) as log:
        return snapshot_of(log, shard)


def require_ledger(root: str | os.PathLike[str]) -> Path:
    """`root` as a path, or a clear error when no ledger was written there (the Spark jobs
    never create one)."""
    from ledger.errors import InvalidInput

    if not (Path(root) / "log").exists():
        raise InvalidInput(f"no ledger at {root}: nothing written yet")
    return Path(root)


def open_reader(root: str | os.PathLike[str]) -> SegmentedLog:
    """A storage reader of a ledger root (no lock)."""
    root = require_ledger(root)
    fs = tier.filesystem(root, ledger_settings.load(root), None)  # the bucket's, if tiered
    return SegmentedLog.open(root, EVENT_SCHEMA, writer=False, fs=fs)


def snapshot_of(log: SegmentedLog, shard: int = 0) -> LogSnapshot:
    """What an open log lists now."""
    return LogSnapshot(
        root=log.root,
        segments=tuple(log.segments()),
        tail=log.tail(),
        start_seq=log.start_seq,
        next_seq=log.next_seq,
        checkpoints=tuple((c, log.checkpoint_path(c)) for c in log.checkpoints()),
        shard=shard,
    )


def worker_paths(snap: LogSnapshot, segments: Sequence[SegmentInfo]) -> list[Path]:
    """The files of `segments` (listed by `snap`'s manifest) at paths every worker can read.

    A local root's segments are read where they lie: on a cluster of several machines the roots
    are on a mount every worker shares (the same path everywhere). This is the one place where
    a manifest's entries become Spark inputs: a root whose sealed segments live on object
    storage stages them here, by the driver, to a path every worker sees."""
    return [s.path for s in segments]


def spark_schema(schema: pa.Schema = EVENT_SCHEMA) -> StructType:
    """The Spark schema of an Arrow schema (events, checkpoints)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def read_parquet(spark: SparkSession, paths: Sequence[Path | str], schema: pa.Schema) -> DataFrame:
    """Exactly these Parquet files with `schema` (an empty DataFrame when there are none)."""
    struct = spark_schema(schema)
    if not paths:
        return spark.createDataFrame([], struct)
    return spark.read.schema(struct).parquet(*[str(p) for p in paths])


def arrow_frame(
    spark: SparkSession, table: pa.Table, schema: pa.Schema = EVENT_SCHEMA
) -> DataFrame:
    """A small driver-side Arrow table (the decoded tail) as a DataFrame."""
    if table.num_rows == 0:
        return spark.createDataFrame([], spark_schema(schema))
    return spark.createDataFrame(table.select(schema.names).cast(schema))


def _directory_path(spark: SparkSession, directory: Path) -> str:
    """A directory's path as it appears in `_metadata.file_path` once the URI's scheme and
    authority are cut off (`FILE_PATH_ONLY`): Hadoop's URI path with its own escaping (a space
    is `%20`), so that rows are matched to their file's directory exactly."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a classic (not Connect) session
    uri = jvm.org.apache.hadoop.fs.Path(str(directory.absolute())).toUri()
    return str(uri.getRawPath()).rstrip("/")


#: A file URI's directory, without scheme and authority (`file:/a/b/f.parquet` -> `/a/b`).
FILE_DIRECTORY = r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:)?(?://[^/]*)?(.*)/[^/]*$"


def sharded_parquet(
    spark: SparkSession, files: Sequence[tuple[int, Sequence[Path]]], schema: pa.Schema
) -> DataFrame:
    """Every file of every (shard, files) pair in one Parquet read, each row with the `shard`
    of its file (from the directory the file lies in: the roots' directories are distinct)."""
    from pyspark.sql import functions as F

    paths = [p for _, shard_files in files for p in shard_files]
    df = read_parquet(spark, paths, schema)
    shards = {shard for shard, shard_files in files if shard_files}
    if len(shards) <= 1:
        return df.withColumn(SHARD_COLUMN, F.lit(next(iter(shards), 0)).cast("int"))
    directory_shard: dict[str, int] = {}
    for shard, shard_files in files:
        for directory in {p.parent for p in shard_files}:
            key = _directory_path(spark, directory)
            if directory_shard.setdefault(key, shard) != shard:
                raise ValueError(f"{directory} holds files of shards {directory_shard[key]} "
                                 f"and {shard}")
    pairs = [F.lit(x) for key, shard in sorted(directory_shard.items()) for x in (key, shard)]
    directory_of = F.regexp_extract(F.col("_metadata.file_path"), FILE_DIRECTORY, 1)
    return df.withColumn(SHARD_COLUMN,
                         F.element_at(F.create_map(*pairs), directory_of).cast("int"))


def events_frame(
    spark: SparkSession,
    snaps: Sequence[LogSnapshot],
    *,
    ranges: Sequence[tuple[int, int]] | None = None,
    include_tail: bool = True,
) -> DataFrame:
    """Events of the snapshots' segments (and tails), each row tagged with its snapshot's
    `shard`, in one read of every root's files. `ranges` (one [seq_gte, seq_lt) per snapshot,
    default the whole log) prunes whole segments by the manifest's ranges; rows are not
    filtered here."""
    from pyspark.sql import functions as F

    files: list[tuple[int, list[Path]]] = []
    tails: list[DataFrame] = []
    for i, snap in enumerate(snaps):
        lo, hi = ranges[i] if ranges is not None else (0, snap.next_seq)
        files.append((snap.shard, worker_paths(snap, snap.segments_overlapping(lo, hi))))
        if include_tail and snap.tail.num_rows:
            tail = arrow_frame(spark, snap.tail)
            tails.append(tail.withColumn(SHARD_COLUMN, F.lit(snap.shard).cast("int")))
    df = sharded_parquet(spark, files, EVENT_SCHEMA)
    for extra in tails:
        df = df.unionByName(extra)
    return df


def snapshots(roots: Roots) -> list[LogSnapshot]:
    """A snapshot of each root, tagged with its index in the list."""
    return [snapshot(r, shard) for shard, r in enumerate(as_roots(roots))]


def read_events(
    roots: Roots, *, master: str | None = None, include_tail: bool = True
) -> DataFrame:
    """Every event of one or more ledger roots (sealed segments and active tails) as one
    DataFrame with the columns of `ledger.fold.events.EVENT_SCHEMA` and `shard` (the root's
    index in `roots`)."""
    spark = spark_session(master)
    return events_frame(spark, snapshots(roots), include_tail=include_tail)
