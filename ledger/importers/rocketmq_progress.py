"""`mqadmin consumerProgress -g G` output, RocketMQ 4.x and 5.x (ConsumerProgressSubCommand).

What the tool prints: a header of `#`-named columns, one row per queue, a blank line, then the
summary. Layouts seen:
- 4.x before #Client IP: `#Topic #Broker Name #QID #Broker Offset #Consumer Offset #Diff #LastTime`
- 4.x (4.8, 4.9): `... #Consumer Offset #Client IP #Diff #LastTime`
- 5.x: topic column 64 wide, `... #Consumer Offset [#Client IP] #Diff #Inflight #LastTime`
  (#Client IP with `-s true`); the header prints #Inflight and #LastTime with no blank between.
- #LastTime: `yyyy-MM-dd HH:mm:ss` in the tool's zone, `N/A` for none (5.x, late 4.x), or empty.
- summary: `Consume TPS: 0.13`, `Diff Total: 2` (4.x) or `Consume Diff Total: 2` and
  `Consume Inflight Total: 0` (5.x). The totals are checked against the rows: a file missing
  rows or its summary was cut and is refused.
- `RocketMQLog:WARN ...` lines (no logger configured) and JVM warnings come before the header.

`#Broker Offset` is the queue's MaxOffset, `#Consumer Offset` the committed offset; `#Diff` must be
their difference (else the row was cut or edited).

Names cut to the column: mqadmin prints `frontStringAtLeast(topic, 32 or 64)`, the first 32
(4.x) or 64 (5.x) characters of the topic and of the broker name. A name that fills its column
may be cut and is never trusted: a topic `%RETRY%<the group>` is restored from the group given;
any other topic of that length is refused, naming the line (a cut name would record offsets of a
queue that does not exist). A broker cell that fills its column matches a `broker=` it begins.

RocketMQ offsets live per broker and the ledger holds one broker's queues: rows of several brokers
without `broker=` are refused naming them; with `broker=B` only B's rows are taken.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ledger.errors import InvalidInput
from ledger.importers.result import ImportResult, ImportTally, int_cell, line_error, name_cell
from ledger.limits import QUEUE_ID_MAX, check_name

_REQUIRED = ("#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff")
_OPTIONAL = ("#Client IP", "#Inflight", "#LastTime")
_LAST_TIME = re.compile(r"(|N/A|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_SIGNED = re.compile(r"-?\d{1,19}")
_TPS = re.compile(r"Consume TPS: -?\d+(\.\d+)?(E-?\d+)?|Consume TPS: NaN")
_TOTAL = re.compile(r"(?P<name>Consume Diff Total|Diff Total|Consume Inflight Total): "
                    r"(?P<value>-?\d+)")
_NOISE = re.compile(r"(RocketMQLog:|(OpenJDK|Java HotSpot\(TM\)) 64-Bit Server VM warning: )")
RETRY_PREFIX = "%RETRY%"


class _Layout(NamedTuple):
    columns: tuple[str, ...]  # header cells before #LastTime, in order
    topic_width: int
    broker_width: int


class _Row(NamedTuple):
    line_no: int
    line: str
    topic: str
    broker: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    diff: int
    inflight: int | None


def _layout(line: str, line_no: int) -> _Layout:
    cells = [c.strip() for c in re.split(r"(?=#)", line) if c.strip()]
    if "#Group" in cells:
        raise line_error(line_no, "this is `mqadmin brokerConsumeStats` (or consumerProgress "
                         "without -g): give the output of `mqadmin consumerProgress -g GROUP`",
                         line)
    missing = [c for c in _REQUIRED if c not in cells]
    unknown = [c for c in cells if c not in _REQUIRED + _OPTIONAL]
    if missing or unknown:
        raise line_error(line_no, f"unknown consumerProgress header (missing {missing}, unknown "
                         f"{unknown})", line)
    if "#LastTime" in cells and cells[-1] != "#LastTime":
        raise line_error(line_no, "#LastTime must be the last column", line)
    broker_at, qid_at = line.index("#Broker Name"), line.index("#QID")
    return _Layout(tuple(c for c in cells if c != "#LastTime"), broker_at - 2,
                   qid_at - broker_at - 2)


def _signed(cell: str, what: str, line_no: int, line: str) -> int:
    if _SIGNED.fullmatch(cell) is None:
        raise line_error(line_no, f"{what} {cell!r} is not an integer", line)
    return int(cell)


def _parse_row(line: str, line_no: int, layout: _Layout) -> _Row:
    cells = line.split()
    n = len(layout.columns)
    if len(cells) < n:
        raise line_error(line_no, f"row has {len(cells)} columns, expected {n} before #LastTime: "
                         "cut short?", line)
    value = dict(zip(layout.columns, cells[:n], strict=True))
    last_time = " ".join(cells[n:])
    if _LAST_TIME.fullmatch(last_time) is None:
        raise line_error(line_no, f"#LastTime {last_time!r} is not a time: the row is cut or "
                         "has extra columns", line)
    queue_id = int_cell(value["#QID"], "#QID", line_no, line, QUEUE_ID_MAX)
    broker_offset = int_cell(value["#Broker Offset"], "#Broker Offset", line_no, line)
    consumer_offset = _signed(value["#Consumer Offset"], "#Consumer Offset", line_no, line)
    diff = _signed(value["#Diff"], "#Diff", line_no, line)
    if diff != broker_offset - consumer_offset:
        raise line_error(line_no, f"#Diff {diff} is not #Broker Offset - #Consumer Offset "
                         f"({broker_offset} - {consumer_offset}): the row is cut or edited", line)
    inflight = None
    if "#Inflight" in value:
        inflight = _signed(value["#Inflight"], "#Inflight", line_no, line)
    return _Row(line_no, line, value["#Topic"], value["#Broker Name"], queue_id, broker_offset,
                consumer_offset, diff, inflight)


def _full_topic(row: _Row, layout: _Layout, group: str) -> str:
    """The topic, or an error if the tool may have cut it (see the module doc)."""
    if len(row.topic) < layout.topic_width:
        return name_cell(row.topic, "topic", row.line_no, row.line)
    retry = RETRY_PREFIX + group
    if len(retry) >= layout.topic_width and retry.startswith(row.topic):
        return name_cell(retry, "topic", row.line_no, row.line)
    raise line_error(row.line_no, f"topic {row.topic!r} fills the {layout.topic_width}-character "
                     "column mqadmin cuts names to, so it may be cut: its offsets cannot be "
                     "recorded from this output (sync the broker's consumerOffset.json instead)",
                     row.line)


def _broker_matches(cell: str, broker: str, layout: _Layout) -> bool:
    return cell == broker or (len(cell) >= layout.broker_width and broker.startswith(cell))


def parse_rocketmq_progress(text: str, source: str, group: str,
                            broker: str | None = None) -> ImportResult:
    """Commands from `mqadmin consumerProgress -g group`: a queue_bounds (MaxOffset = #Broker
    Offset) per queue, then a sync (#Consumer Offset) per queue, of one broker."""
    check_name(group, "group")
    if broker is not None and not broker:
        raise InvalidInput("broker name is empty")
    tally = ImportTally(source)
    layout: _Layout | None = None
    rows: list[_Row] = []
    totals: dict[str, tuple[int, int]] = {}
    summary_at: int | None = None
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if _NOISE.match(line):
            tally.skip("log_line")
            continue
        if line.startswith("#"):
            if layout is not None:
                raise line_error(line_no, "a second header: give one consumerProgress output",
                                 line)
            layout = _layout(line, line_no)
            continue
        total = _TOTAL.fullmatch(line)
        if total is not None or _TPS.fullmatch(line):
            if layout is None:
                raise line_error(line_no, "summary line before the header", line)
            summary_at = summary_at or line_no
            if total is not None:
                totals[total["name"]] = (int(total["value"]), line_no)
            continue
        if layout is None:
            raise line_error(line_no, "not a consumerProgress line (no #Topic header before it)",
                             line)
        if summary_at is not None:
            raise line_error(line_no, "a row after the summary lines", line)
        rows.append(_parse_row(line, line_no, layout))
    if layout is None:
        raise InvalidInput("line 1: no `mqadmin consumerProgress` header (#Topic #Broker Name "
                           "#QID ...): is this the right file?")
    _check_totals(rows, totals, max(1, len(text.splitlines())))
    for row in _rows_of_broker(rows, broker, layout, tally):
        topic = _full_topic(row, layout, group)
        tally.records += 1
        tally.max_offset(topic, row.queue_id, row.broker_offset)
        if row.consumer_offset < 0:
            tally.skip("no_consumer_offset")
            continue
        tally.sync(group, topic, row.queue_id, row.consumer_offset)
    tally.groups[group] = None
    return tally.result()


def _check_totals(rows: list[_Row], totals: dict[str, tuple[int, int]], last_line: int) -> None:
    diff = totals.get("Consume Diff Total") or totals.get("Diff Total")
    if diff is None:
        raise InvalidInput(f"line {last_line}: no `Diff Total:` summary line after the rows: the "
                           "output is cut short")
    if diff[0] != sum(r.diff for r in rows):
        raise InvalidInput(f"line {diff[1]}: Diff Total {diff[0]} is not the sum of the rows' "
                           f"#Diff ({sum(r.diff for r in rows)}): rows are missing or edited")
    inflight = totals.get("Consume Inflight Total")
    if inflight is not None and all(r.inflight is not None for r in rows):
        found = sum(r.inflight or 0 for r in rows)
        if inflight[0] != found:
            raise InvalidInput(f"line {inflight[1]}: Consume Inflight Total {inflight[0]} is not "
                               f"the sum of the rows' #Inflight ({found}): rows are missing or "
                               "edited")


def _rows_of_broker(rows: list[_Row], broker: str | None, layout: _Layout,
                    tally: ImportTally) -> list[_Row]:
    brokers = sorted({r.broker for r in rows})
    if broker is None:
        if len(brokers) > 1:
            raise InvalidInput(f"line {rows[0].line_no}: rows of {len(brokers)} brokers "
                               f"({', '.join(brokers)}); one ledger holds one broker's queues: "
                               "give the broker to take")
        return rows
    kept = [r for r in rows if _broker_matches(r.broker, broker, layout)]
    if rows and not kept:
        raise InvalidInput(f"broker {broker!r} has no row; brokers in the output: "
                           f"{', '.join(brokers)}")
    if len(kept) < len(rows):
        tally.skip("other_broker", len(rows) - len(kept))
    return kept
