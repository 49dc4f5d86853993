"""Burrow's evaluator cases (linkedin/Burrow, core/internal/evaluator/caching_test.go, the
`tests` table), ported as data: commits with their times and lags, the current lag, "now", and
the status Burrow expects, plus the status the ledger gives and why where the two differ.

Burrow holds the lag each commit had when it was made; a ledger derives it (MaxOffset at the
commit's time minus its offset), so each case also says which appends make those lags true:
before each entry the queue is appended up to `offset + lag`, and `appends_after` are the
(ts, MaxOffset) appends after the last entry (Burrow's later broker offsets). Times are Burrow's
milliseconds; `now_s` is in seconds as Burrow's table has it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BurrowCase:
    number: int
    about: str
    entries: tuple[tuple[int, int, int], ...]  # (ts ms, offset, lag at ts) in commit order
    current_lag: int
    now_s: int
    burrow: str
    ledger: str
    appends_after: tuple[tuple[int, int], ...] = ()
    sync_entries: tuple[int, ...] = ()  # entries recorded by a sync (a move backwards)
    allowed_lag: int = 0
    note: str = ""  # how the case was ported, or why the ledger judges it otherwise


_FIVE = ((100_000, 1000, 0), (200_000, 2000, 50), (300_000, 3000, 100), (400_000, 4000, 150),
         (500_000, 5000, 200))
_FIVE_LAGGING = ((100_000, 1000, 50), (200_000, 2000, 100), (300_000, 3000, 150),
                 (400_000, 4000, 200), (500_000, 5000, 250))
_CAUGHT_UP = tuple((1512224618356 + d, 792748079 + i, 0) for i, d in enumerate(
    (0, 1006, 2010, 3011, 4014, 5017, 6022, 7023, 8027, 9027, 10027, 11032, 12035, 13038, 14041)))

CASES: tuple[BurrowCase, ...] = (
    BurrowCase(0, "zero lag at the first commit: OK", _FIVE, 200, 600, "OK", "OK"),
    BurrowCase(1, "silent for exactly the window's span (400 s) is not yet STOP", _FIVE, 200, 900,
               "OK", "OK"),
    BurrowCase(2, "silent longer than the span with lag: STOP", _FIVE, 200, 1000, "STOP", "STOP"),
    BurrowCase(3, "STOP with a lag at every commit", _FIVE_LAGGING, 250, 1000, "STOP", "STOP"),
    BurrowCase(4, "same offset at every commit, but zero lag at the first: OK",
               ((100_000, 1000, 0), (200_000, 1000, 50), (300_000, 1000, 100),
                (400_000, 1000, 150), (500_000, 1000, 200)), 200, 600, "OK", "OK"),
    BurrowCase(5, "same offset, lag at every commit: STALL",
               ((100_000, 1000, 100), (200_000, 1000, 150), (300_000, 1000, 200),
                (400_000, 1000, 250), (500_000, 1000, 300)), 300, 600, "STALL", "STALL"),
    BurrowCase(6, "same offset, same lag: still STALL",
               tuple((t, 1000, 100) for t in (100_000, 200_000, 300_000, 400_000, 500_000)),
               100, 600, "STALL", "STALL"),
    BurrowCase(7, "the offset went back from 3000 to 2000, then on to 4000",
               ((100_000, 1000, 100), (200_000, 2000, 150), (300_000, 3000, 200),
                (400_000, 2000, 1250), (500_000, 4000, 300)), 300, 600, "REWIND", "OK",
               sync_entries=(3,),
               note="a move back is a sync here (a commit cannot go back), and the consumer has "
                   "since climbed past where it was (4000 > 3000): that rewind is over, and the "
                   "lag decreased (1250 -> 300), so no WARN either"),
    BurrowCase(8, "current lag within what is allowed wins over the stop check", _FIVE_LAGGING,
               250, 1000, "OK", "OK", allowed_lag=250,
               note="Burrow's table has a current lag of 0 after a commit with lag 250: MaxOffset "
                   "never goes down, so a ledger cannot hold that; the same first rule is "
                   "reached with --allowed-lag 250"),
    BurrowCase(9, "caught up at every commit, then 931 messages and no commit for 17 s (#290)",
               _CAUGHT_UP, 931, 1512224650, "STOP", "STOP",
               appends_after=((1512224633000, 792748500), (1512224634000, 792748600),
                              (1512224635000, 792748800), (1512224636000, 792749000),
                              (1512224637000, 792749024))),
    BurrowCase(10, "one message arrived a second ago: not stopped (#303)", _CAUGHT_UP, 1,
               1512224650, "OK", "OK", appends_after=((1512224649000, 792748094),)),
    BurrowCase(11, "Burrow's commits without a known lag: the ledger knows every lag",
               ((100_000, 1000, 0), (150_000, 1500, 25), (200_000, 2000, 50),
                (250_000, 2500, 75), (300_000, 3000, 100), (350_000, 3500, 125),
                (400_000, 4000, 150), (450_000, 4500, 175), (500_000, 5000, 200),
                (550_000, 5500, 200)), 200, 600, "OK", "OK",
               note="in Burrow every second commit had no lag (the broker offset was not known "
                   "yet); here each is MaxOffset at its time minus its offset"),
)
