"""The one place that builds the SparkSession and reads ledger logs into Spark.

Every job goes through `spark_session` (one session per process, reused by `getOrCreate`) and
`read_events` (the segment dataset of one or more ledger roots: the scale path of DESIGN.md).
Files come from each root's manifest, never from a directory listing, so a reader never sees a
segment that a compaction swap or retention has not committed; the active tail (a WAL that
Spark cannot read) is decoded on the driver and joined in as a small Arrow-backed DataFrame.
"""

from __future__ import annotations

import hashlib
import os
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
    if local:
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config(
            "spark.driver.host", "127.0.0.1"
        )
    partitions = shuffle_partitions or (LOCAL_SHUFFLE_PARTITIONS if local else None)
    if partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(partitions))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def as_roots(roots: Roots) -> list[Path]:
    """One root or a list of roots, as paths."""
    if isinstance(roots, str | os.PathLike):
        return [Path(roots)]
    return [Path(r) for r in roots]


@dataclass(frozen=True)
class LogSnapshot:
    """What one ledger root's manifest listed at one moment, plus its decoded active tail."""

    root: Path
    segments: tuple[SegmentInfo, ...]
    tail: pa.Table
    start_seq: int
    next_seq: int
    checkpoints: tuple[tuple[int, Path], ...]

    def segments_overlapping(self, seq_gte: int, seq_lt: int) -> list[SegmentInfo]:
        """Segments holding any seq in [seq_gte, seq_lt)."""
        return [s for s in self.segments if s.end_seq > seq_gte and s.base_seq < seq_lt]


def snapshot(root: str | os.PathLike[str]) -> LogSnapshot:
    """A consistent snapshot of a root (manifest + tail) through a lock-free storage reader."""
    with open_reader(root) as log:
        return snapshot_of(log)


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


def snapshot_of(log: SegmentedLog) -> LogSnapshot:
    """What an open log lists now."""
    return LogSnapshot(
        root=log.root,
        segments=tuple(log.segments()),
        tail=log.tail(),
        start_seq=log.start_seq,
        next_seq=log.next_seq,
        checkpoints=tuple((c, log.checkpoint_path(c)) for c in log.checkpoints()),
    )


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


def events_frame(
    spark: SparkSession,
    snaps: Sequence[LogSnapshot],
    *,
    seq_gte: int = 0,
    seq_lt: int | None = None,
    include_tail: bool = True,
) -> DataFrame:
    """Events of the snapshots' segments (and tails) that may hold seqs in [seq_gte, seq_lt);
    whole segments are pruned by the manifest's ranges, rows are not filtered here."""
    paths: list[Path] = []
    frames: list[DataFrame] = []
    for snap in snaps:
        end = snap.next_seq if seq_lt is None else seq_lt
        paths.extend(s.path for s in snap.segments_overlapping(seq_gte, end))
        if include_tail and snap.tail.num_rows:
            frames.append(arrow_frame(spark, snap.tail))
    df = read_parquet(spark, paths, EVENT_SCHEMA)
    for extra in frames:
        df = df.unionByName(extra)
    return df


def read_events(
    roots: Roots, *, master: str | None = None, include_tail: bool = True
) -> DataFrame:
    """Every event of one or more ledger roots (sealed segments and active tails) as one
    DataFrame with the columns of `ledger.fold.events.EVENT_SCHEMA`."""
    spark = spark_session(master)
    snaps = [snapshot(r) for r in as_roots(roots)]
    return events_frame(spark, snaps, include_tail=include_tail)
