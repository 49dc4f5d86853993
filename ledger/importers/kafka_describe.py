"""`kafka-consumer-groups --describe [--all-groups] [--verbose]` output, Kafka 2.0 to 4.x.

What the tool prints (ConsumerGroupCommand: Scala up to 3.7, Java from 3.8):
- a header per group, then one row per partition: `[GROUP] TOPIC PARTITION [LEADER-EPOCH]
  CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID`. 2.0-2.2 print no GROUP column
  (one group per run, named by `--group`); 4.x `--verbose` adds LEADER-EPOCH.
- GROUP, TOPIC, CONSUMER-ID and HOST are padded to the widest value of that group (at least 15),
  so widths change from group to group; the numeric columns are padded to 10 or 15 but a longer
  number pushes the rest of the row right. So GROUP is cut at the header's TOPIC position (a group
  id may hold spaces; it then fails the name check, naming it) and the rest is split on blanks.
  CONSUMER-ID, HOST and CLIENT-ID may hold spaces too; nothing here reads them.
- `-` for a missing value: no committed offset (no sync, but LOG-END-OFFSET still gives the
  queue's MaxOffset), an unknown end offset, or a member with no partition (`-` topic: skipped).
- LAG is LOG-END-OFFSET - CURRENT-OFFSET whenever both are known; a row where it is not was cut or
  edited, and is refused.
- Scala prints a blank line before each header; Java 3.8/3.9 starts every line with a newline and
  ends none (no blank line between groups, none at the end); 4.x prints the blank line again.
- stderr notes mixed in when both streams are captured: `Consumer group 'x' has no active
  members.`, `Warning: Consumer group 'x' is rebalancing.`, and on stdout `Error: ...` (the
  command failed, possibly followed by a Java stack trace). They become `notes`.
"""

from __future__ import annotations

import re

from ledger.errors import InvalidInput
from ledger.importers.result import ImportResult, ImportTally, int_cell, line_error, name_cell
from ledger.limits import QUEUE_ID_MAX, check_name

_OFFSET_COLUMNS = ("CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")
# The columns before CONSUMER-ID, per layout; the GROUP column is handled apart.
_LEAD_LAYOUTS: tuple[tuple[str, ...], ...] = (
    ("TOPIC", "PARTITION") + _OFFSET_COLUMNS,
    ("TOPIC", "PARTITION", "LEADER-EPOCH") + _OFFSET_COLUMNS,
)
_MEMBER_COLUMNS = ("CONSUMER-ID", "HOST", "CLIENT-ID")
_OTHER_VIEWS = {
    "CONSUMER-ID": "--describe --members",
    "COORDINATOR": "--describe --state",
    "NEW-OFFSET": "--reset-offsets",
}
_NOTE = re.compile(r"(Consumer group '.*' has no active members\.|"
                   r"Warning: Consumer group '.*' is rebalancing\.|"
                   r"Error: .*)")
_NOISE = re.compile(r"(Note: This will only show information about consumers|SLF4J: |"
                    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] [A-Z]+ )")
_STACK = re.compile(r"(\s+at |\s+\.\.\. \d+ more|Caused by: |[\w$.]+(Exception|Error)(: |$))")


class _Header:
    """Where a group's columns are: GROUP cut by position, the rest by blanks."""

    __slots__ = ("has_group", "topic_at", "has_epoch", "width")

    def __init__(self, has_group: bool, topic_at: int, has_epoch: bool) -> None:
        self.has_group = has_group
        self.topic_at = topic_at
        self.has_epoch = has_epoch
        self.width = 6 if has_epoch else 5  # cells from TOPIC to LAG


def _header(line: str, line_no: int) -> _Header | None:
    """The layout of a header line, None if the line is not a header; a header of another
    view of the tool (members, state, a reset plan) is an error saying which."""
    cells = line.split()
    if not cells or cells[0] not in ("GROUP", "TOPIC", "CONSUMER-ID", "COORDINATOR"):
        return None
    has_group = cells[0] == "GROUP"
    rest = cells[1:] if has_group else cells
    for cell in rest[:3]:
        if cell in _OTHER_VIEWS:
            raise line_error(line_no, f"this is the header of `kafka-consumer-groups "
                             f"{_OTHER_VIEWS[cell]}`, which shows no committed offsets: give the "
                             "output of --describe (or --describe --offsets)", line)
    for lead in _LEAD_LAYOUTS:
        n = len(lead)
        if tuple(rest[:n]) == lead:
            tail = tuple(rest[n:])
            if tail != _MEMBER_COLUMNS[:len(tail)]:
                break
            return _Header(has_group, line.index("TOPIC") if has_group else 0,
                           "LEADER-EPOCH" in lead)
    if cells[0] == "TOPIC" or (has_group and rest[:1] == ["TOPIC"]):
        raise line_error(line_no, "unknown kafka-consumer-groups header", line)
    return None


def _optional_int(cell: str, what: str, line_no: int, line: str) -> int | None:
    """`-` (and -1, an offset the broker does not have) as None; otherwise an offset."""
    if cell in ("-", "-1"):
        return None
    return int_cell(cell, what, line_no, line)


def parse_kafka_describe(text: str, source: str, group: str | None = None) -> ImportResult:
    """Commands from `kafka-consumer-groups --describe` output: a queue_bounds (MaxOffset =
    LOG-END-OFFSET) per queue, then a sync (CURRENT-OFFSET) per row that has one.

    `group` names the group of a layout without GROUP column (Kafka 2.0-2.2, which needs it);
    where the output has a GROUP column, only that group's rows are taken.
    """
    tally = ImportTally(source)
    if group is not None:
        check_name(group, "group")
    header: _Header | None = None
    header_seen = False
    after_error = False
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if after_error and _STACK.match(line):
            tally.skip("stack_trace")
            continue
        after_error = False
        if _NOTE.fullmatch(line.strip()):
            tally.notes.append(line.strip())
            after_error = line.lstrip().startswith("Error: ")
            continue
        if _NOISE.match(line):
            tally.skip("log_line")
            continue
        found = _header(line, line_no)
        if found is not None:
            if not found.has_group and group is None:
                raise line_error(line_no, "this output has no GROUP column (kafka-consumer-groups "
                                 "2.0-2.2 prints none): give the group it describes", line)
            header, header_seen = found, True
            continue
        if header is None:
            raise line_error(line_no, "not a kafka-consumer-groups --describe line (no header "
                             "line before it)", line)
        _row(line, line_no, header, group, tally)
    if not header_seen and not tally.notes:
        raise InvalidInput("line 1: no kafka-consumer-groups --describe header line (GROUP TOPIC "
                           "PARTITION ... or TOPIC PARTITION ...): is this the right file?")
    return tally.result()


def _row(line: str, line_no: int, header: _Header, group: str | None, tally: ImportTally) -> None:
    if header.has_group:
        at = header.topic_at
        if len(line) <= at or line[at - 1] != " " or line[at] == " " or not line[:at].strip():
            raise line_error(line_no, "row does not line up with its header (GROUP then TOPIC at "
                             f"column {at + 1})", line)
        row_group = line[:at].rstrip()
        if " " in row_group:
            raise line_error(line_no, f"GROUP cell {row_group!r} holds blanks: the row does not "
                             "line up with its header, or the group id has spaces (no ledger "
                             "name has)", line)
        cells = line[at:].split()
    else:
        assert group is not None  # the header check asked for it
        row_group = group
        cells = line.split()
    if len(cells) < header.width:
        raise line_error(line_no, f"row has {len(cells)} columns after GROUP, expected at least "
                         f"{header.width} (TOPIC to LAG): cut short?", line)
    row_group = name_cell(row_group, "group", line_no, line)
    if group is not None and row_group != group:
        tally.skip("other_group")
        return
    tally.groups[row_group] = None
    topic, partition = cells[0], cells[1]
    current, end, lag = cells[header.width - 3:header.width]
    if topic == "-" and partition == "-":
        if (current, end, lag) != ("-", "-", "-"):
            raise line_error(line_no, "a member row without partition has offsets", line)
        tally.skip("member_without_partition")
        return
    topic = name_cell(topic, "topic", line_no, line)
    queue_id = int_cell(partition, "partition", line_no, line, QUEUE_ID_MAX)
    if header.has_epoch and cells[2] != "-":
        int_cell(cells[2], "leader epoch", line_no, line, 2**31 - 1)
    committed = _optional_int(current, "CURRENT-OFFSET", line_no, line)
    end_offset = _optional_int(end, "LOG-END-OFFSET", line_no, line)
    if committed is not None and end_offset is not None:
        if lag != str(end_offset - committed):
            raise line_error(line_no, f"LAG {lag} is not LOG-END-OFFSET - CURRENT-OFFSET "
                             f"({end_offset} - {committed}): the row is cut or edited", line)
    elif lag != "-":
        raise line_error(line_no, f"LAG {lag} where CURRENT-OFFSET or LOG-END-OFFSET is "
                         "unknown: the row is cut or edited", line)
    tally.records += 1
    if end_offset is not None:
        tally.max_offset(topic, queue_id, end_offset)
    if committed is None:
        tally.skip("no_committed_offset")
        return
    tally.sync(row_group, topic, queue_id, committed)
