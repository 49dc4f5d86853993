"""Settings of a data directory, persisted in `settings.json` so every later command uses them."""

from __future__ import annotations

from pathlib import Path

import msgspec

from ledger.errors import InvalidInput
from ledger.limits import CLOCK_SKEW_MS_DEFAULT, OFFSETS_RETENTION_MS_DEFAULT

SETTINGS_FILE = "settings.json"
DURABILITIES = ("always", "batch", "none")


class LedgerSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    segment_events_max: int = 1_000_000
    segment_bytes_max: int = 128 * 1024 * 1024
    segment_age_ms_max: int = 3_600_000
    durability: str = "always"
    offsets_retention_ms: int = OFFSETS_RETENTION_MS_DEFAULT
    # The view is derived and every read catches it up first: it is flushed this rarely (by
    # batches, or by time) so that a server's many small batches do not each pay for it.
    view_flush_batches: int = 4096
    view_flush_ms: int = 30_000
    # Lines per batch of `apply` (one fsync each; from 2048 the batch folds column-wise).
    apply_batch_commands: int = 131_072
    # Commands per batch when they arrive as Arrow columns (the column-wise fold gains with size).
    apply_column_batch_commands: int = 131_072
    # A checkpoint at least every N events, sealed or not, bounds what an open replays.
    checkpoint_interval_events: int = 250_000
    # A command's `ts` more than this ahead of the clock is refused unless its sender may
    # backfill (DESIGN.md, Security rules): one far-future ts would stamp every later event.
    clock_skew_ms: int = CLOCK_SKEW_MS_DEFAULT

    def __post_init__(self) -> None:
        if self.durability not in DURABILITIES:
            raise InvalidInput(
                f"invalid durability {self.durability!r}: use one of {', '.join(DURABILITIES)}")
        for name in ("segment_events_max", "segment_bytes_max", "segment_age_ms_max",
                     "offsets_retention_ms", "view_flush_batches", "view_flush_ms",
                     "apply_batch_commands", "apply_column_batch_commands",
                     "checkpoint_interval_events", "clock_skew_ms"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InvalidInput(f"invalid {name.replace('_', '-')} {v!r}: must be a positive integer")
        if self.segment_bytes_max < 4096:
            raise InvalidInput(f"invalid segment-bytes {self.segment_bytes_max}: at least 4096")


def load(root: Path) -> LedgerSettings:
    path = root / SETTINGS_FILE
    if not path.exists():
        return LedgerSettings()
    try:
        return msgspec.json.decode(path.read_bytes(), type=LedgerSettings)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise InvalidInput(f"unreadable settings file {path}: {e}") from None


def save(root: Path, settings: LedgerSettings) -> None:
    """Write atomically: a torn settings file must never be what the next command reads."""
    import os

    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (SETTINGS_FILE + ".tmp")
    with open(tmp, "wb") as f:
        f.write(msgspec.json.format(msgspec.json.encode(settings)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / SETTINGS_FILE)


def merged(root: Path, overrides: dict) -> LedgerSettings:
    base = load(root)
    clean = {k: v for k, v in overrides.items() if v is not None}
    return LedgerSettings(**{**msgspec.structs.asdict(base), **clean}) if clean else base
