"""Generic Kafka-like segmented log: an active WAL segment plus sealed Parquet segments.

Knows nothing of offsets; the ledger appends Arrow rows with int64 `seq` and `ts` columns.
"""

from storage.acknowledged import Witness
from storage.errors import (
    CorruptManifestError,
    CorruptSegmentError,
    FsyncError,
    LockedError,
    LogFailedError,
    LogRangeError,
    ReadOnlyError,
    SchemaError,
    SettingsError,
    StorageError,
    WriteFailedError,
)
from storage.fs import FileSystem, OsFileSystem
from storage.log import AppendResult, RetentionResult, SegmentedLog
from storage.recovery import RecoveryReport
from storage.sealed import ReadStats
from storage.segments import SegmentInfo
from storage.settings import LogSettings

__all__ = [
    "AppendResult",
    "CorruptManifestError",
    "CorruptSegmentError",
    "FileSystem",
    "FsyncError",
    "LockedError",
    "LogFailedError",
    "LogRangeError",
    "LogSettings",
    "OsFileSystem",
    "ReadOnlyError",
    "ReadStats",
    "RecoveryReport",
    "RetentionResult",
    "SchemaError",
    "SegmentInfo",
    "SegmentedLog",
    "SettingsError",
    "StorageError",
    "Witness",
    "WriteFailedError",
]
