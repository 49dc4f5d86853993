"""Lag health: Burrow's judgement of a consumer, as a pure function (DESIGN.md, "Lag health and
time lag").

Burrow judges a partition from the last few commits it kept in memory; the ledger hands this
module the same window read exactly from its log, at any time T, so the rules stay a pure
function of data: a window of entries, the current lag, T and the settings give a status. No
I/O, no clock: `ledger/lag/document.py` reads the inputs, tests feed Burrow's own cases as data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

OK = "OK"
WARN = "WARN"
STOP = "STOP"
STALL = "STALL"
REWIND = "REWIND"
ERR = "ERR"
NOTFOUND = "NOTFOUND"

QUEUE_STATUSES = (OK, WARN, STOP, STALL, REWIND)
GROUP_STATUSES = (OK, WARN, ERR, NOTFOUND)

# Group status ranks: a queue's STOP, STALL or REWIND makes its group ERR (Burrow's mapping).
_GROUP_OF_QUEUE = {OK: OK, WARN: WARN, STOP: ERR, STALL: ERR, REWIND: ERR}
_RANK = {OK: 0, WARN: 1, ERR: 2}


# One commit or sync of a window: (ts, the group's offset after it, the lag then: MaxOffset at
# that ts minus the offset, None while the queue's bounds were unknown). A plain tuple: the
# document of every group builds one per entry of every window.
Entry = tuple[int, int, "int | None"]


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """What a judgement depends on besides the data: the window length and the lag allowed."""

    window: int = 10
    allowed_lag: int = 0


def queue_status(
    window: Sequence[Entry], lag: int | None, at_ms: int, settings: HealthSettings,
    moved_past_ts: int | None,
) -> str:
    """The status of one queue at `at_ms`, the first rule that holds (Burrow's order).

    `lag` is the lag at `at_ms` (None: bounds unknown). `moved_past_ts` is when the queue first
    held a message at or after the last entry's offset, no earlier than that entry (None: not
    by `at_ms`): STOP asks how long the consumer has stayed silent *with work waiting*, so an
    idle queue that just received a message is not a stopped consumer, and a consumer that died
    while caught up is one as soon as its work has waited longer than its window spans.
    With unknown bounds only what needs no lag is judged (REWIND)."""
    allowed = settings.allowed_lag
    if lag is not None and lag <= allowed:
        return OK
    if not window:
        return OK
    first_ts, first_offset, _ = window[0]
    if (lag is not None and moved_past_ts is not None
            and at_ms - moved_past_ts > window[-1][0] - first_ts):
        return STOP
    offsets = [offset for _, offset, _ in window]
    if _rewound(offsets):
        return REWIND
    lags = [e_lag for _, _, e_lag in window if e_lag is not None]
    if lags and min(lags) > allowed:
        if offsets.count(first_offset) == len(offsets):
            return STALL
        if all(lags[i] >= lags[i - 1] for i in range(1, len(lags))):
            return WARN
    return OK


def _rewound(offsets: Sequence[int]) -> bool:
    """Some offset fell below its predecessor and no later one climbed back to that height:
    a rewind the consumer has since made good is over."""
    highest_after = -1
    for i in range(len(offsets) - 1, 0, -1):
        if offsets[i] < offsets[i - 1] and highest_after < offsets[i - 1]:
            return True
        highest_after = max(highest_after, offsets[i])
    return False


def group_status(queue_statuses: Iterable[str]) -> str:
    """The worst of the group's queues (STOP, STALL and REWIND count as ERR); NOTFOUND when
    the group has no queue."""
    worst: str | None = None
    for status in queue_statuses:
        g = _GROUP_OF_QUEUE[status]
        if worst is None or _RANK[g] > _RANK[worst]:
            worst = g
    return NOTFOUND if worst is None else worst
