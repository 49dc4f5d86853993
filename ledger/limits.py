"""Every limit in one place (TigerBeetle's "put a limit on everything") and the checks using them."""

from __future__ import annotations

import re

from ledger.errors import InvalidInput

NAME_LENGTH_MAX = 249
NAME_PATTERN = re.compile(r"[A-Za-z0-9._\-%|]{1,249}")
QUEUE_ID_MAX = 2**31 - 1
OFFSET_MAX = 2**63 - 1
APPEND_COUNT_MAX = 2**31 - 1
PULL_MAX = 1_000_000
GENERATION_MAX = 2**31 - 1
CLIENT_TIMEOUT_MS_DEFAULT = 120_000
OFFSETS_RETENTION_MS_DEFAULT = 7 * 24 * 3600 * 1000
APPLY_BATCH_COMMANDS_MAX = 65_536
REASON_LENGTH_MAX = 4096
TS_MAX = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last instant ISO-8601 can print
#: How far a sender's `ts` may run ahead of the ledger's clock without the right to backfill.
#: The clock never goes back, so this is also the most one command may push it forward: well
#: above NTP-synced hosts' differences (milliseconds) and a broker's clock seen by an importer,
#: well below the shortest timeout the clock judges (a broadcast client's 120 s).
CLOCK_SKEW_MS_DEFAULT = 10_000
LAG_WINDOW_MAX = 1000  # entries per window of `lag` (Burrow keeps 10)
LAG_SERIES_POINTS_MAX = 10_000  # points of one `lag --since --until --every` series
GENERATIONS_QUEUES_MAX = 100_000  # queues named in one `generations` question
CLUSTER_SHARDS_MAX = 1024  # shards a cluster file may list


_VALID_NAMES: set[str] = set()
_VALID_NAMES_MAX = 1 << 20
_NOT_NAME_CHARS = re.compile(r"[^A-Za-z0-9._\-%|]")


def check_name(value: object, what: str) -> str:
    """A group, topic, client or actor name: 1-249 characters of A-Z a-z 0-9 . _ - % |."""
    if type(value) is str and value in _VALID_NAMES:  # the hot path: names repeat across commands
        return value  # type: ignore[return-value]
    if not isinstance(value, str) or NAME_PATTERN.fullmatch(value) is None:
        shown = repr(value) if not isinstance(value, str) or len(value) < 80 else repr(value[:80])
        raise InvalidInput(
            f"invalid {what} {shown}: use 1-{NAME_LENGTH_MAX} characters of A-Z a-z 0-9 . _ - % |"
        )
    if len(_VALID_NAMES) < _VALID_NAMES_MAX:
        _VALID_NAMES.add(value)
    return value


def names_valid(values: list[object], what: str) -> list[bool]:
    """Whether each value passes `check_name`: the names seen valid before are found in one C
    pass over the values (a run's dictionary of 10,000 names, read again by each run)."""
    try:
        known = list(map(_VALID_NAMES.__contains__, values))
    except TypeError:  # an unhashable value: none is a name
        known = [False] * len(values)
    for i in [i for i, ok in enumerate(known) if not ok]:
        try:
            check_name(values[i], what)
            known[i] = True
        except InvalidInput:
            pass
    return known


def check_int(value: object, what: str, lo: int, hi: int) -> int:
    """An integer in [lo, hi]; bools and floats are refused (JSON `true` is not an offset)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"invalid {what} {value!r}: expected an integer")
    if value < lo or value > hi:
        raise InvalidInput(f"invalid {what} {value}: must be between {lo} and {hi}")
    return value


def check_offset(value: object, what: str = "offset") -> int:
    return check_int(value, what, 0, OFFSET_MAX)


def check_queue_id(value: object) -> int:
    return check_int(value, "queue id", 0, QUEUE_ID_MAX)


def name_from(text: str) -> str:
    """`text` made a valid name: characters outside the alphabet become `_`, cut to the
    length limit (empty stays empty: the caller names its default)."""
    return _NOT_NAME_CHARS.sub("_", text)[:NAME_LENGTH_MAX]


def ahead_of_clock(ts_ms: int, clock_ms: int) -> bool:
    """A time from a source that lies too far in the future to record: it must not move the
    ledger's clock (which never goes back). The one place the bound is decided (a follower skips
    and counts such records). The bound is the clock skew every sender without the backfill
    right is held to (CLOCK_SKEW_MS_DEFAULT; DESIGN.md, the clock rule)."""
    return ts_ms > clock_ms + CLOCK_SKEW_MS_DEFAULT
