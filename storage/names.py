"""File names of the log: every suffix and name format lives here, as in Kafka's `LogFileUtils`.

Names are the base seq zero padded to 20 digits so that `ls` sorts them numerically; a file's
lifecycle is its suffix (`.wal` active, `.parquet` sealed, `.tmp` being written).
"""

from __future__ import annotations

from pathlib import Path

SEQ_DIGITS = 20
SEQ_MAX = 10**SEQ_DIGITS - 1

LOG_DIR = "log"
CHECKPOINT_DIR = "checkpoints"
LOCK_FILE = "LOCK"
MANIFEST_FILE = "MANIFEST"

WAL_SUFFIX = ".wal"
PARQUET_SUFFIX = ".parquet"
TMP_SUFFIX = ".tmp"
CHECKPOINT_SUFFIX = ".checkpoint.parquet"


def format_seq(seq: int) -> str:
    """The 20-digit zero-padded form of a seq (Kafka's `filenamePrefixFromOffset`)."""
    if seq < 0 or seq > SEQ_MAX:
        raise ValueError(f"seq {seq} is outside 0..{SEQ_MAX}")
    return f"{seq:0{SEQ_DIGITS}d}"


def wal_name(base_seq: int) -> str:
    """Name of the active segment starting at `base_seq`."""
    return format_seq(base_seq) + WAL_SUFFIX


def parquet_name(base_seq: int, variant: int = 0) -> str:
    """Name of a sealed segment; `variant` > 0 gives `<base>.<variant>.parquet`.

    A seal writes variant 0; a compaction swap writes the revision of the manifest commit that
    lists the file, so a name is never used twice (as Delta and Iceberg never overwrite a data
    file) and the old file stays untouched until the manifest commits.
    """
    if variant < 0:
        raise ValueError(f"variant {variant} is negative")
    middle = f".{variant}" if variant else ""
    return format_seq(base_seq) + middle + PARQUET_SUFFIX


def checkpoint_name(seq: int) -> str:
    """Name of the checkpoint (state at `seq`) in `checkpoints/`."""
    return format_seq(seq) + CHECKPOINT_SUFFIX


def tmp_name(name: str) -> str:
    """In-progress name of `name`: written, fsynced, then renamed to `name`."""
    return name + TMP_SUFFIX


def parse_seq_prefix(name: str) -> int | None:
    """Seq of a file named `<20 digits>...`, or None if the name is not one of ours."""
    head = name[:SEQ_DIGITS]
    if len(head) != SEQ_DIGITS or not head.isdigit() or not head.isascii():
        return None
    rest = name[SEQ_DIGITS:]
    if not rest.startswith("."):
        return None
    return int(head)


def is_log_file(name: str) -> bool:
    """True for names this layer writes in `log/` (segments, WALs, temporaries, manifest)."""
    if name in (MANIFEST_FILE, tmp_name(MANIFEST_FILE)):
        return True
    if parse_seq_prefix(name) is None:
        return False
    rest = name[SEQ_DIGITS:]
    if rest.endswith(TMP_SUFFIX):
        rest = rest[: -len(TMP_SUFFIX)]
    if rest in (WAL_SUFFIX, PARQUET_SUFFIX):
        return True
    if rest.endswith(PARQUET_SUFFIX):
        variant = rest[1 : -len(PARQUET_SUFFIX)]
        return variant.isdigit() and variant.isascii()
    return False


def is_checkpoint_file(name: str) -> bool:
    """True for names this layer writes in `checkpoints/` (checkpoints and their temporaries)."""
    if parse_seq_prefix(name) is None:
        return False
    rest = name[SEQ_DIGITS:]
    if rest.endswith(TMP_SUFFIX):
        rest = rest[: -len(TMP_SUFFIX)]
    return rest == CHECKPOINT_SUFFIX


def log_dir(root: Path) -> Path:
    """Directory of segments and the manifest."""
    return root / LOG_DIR


def checkpoint_dir(root: Path) -> Path:
    """Directory of checkpoints."""
    return root / CHECKPOINT_DIR
