"""A dump of `__consumer_offsets` printed by kafka-console-consumer with the offsets formatter.

Two families of output, one record per offset commit (group metadata records are not offset
commits: the formatters print nothing for them, or a record this parser skips and counts):

Text, `kafka.coordinator.group.GroupMetadataManager$OffsetsMessageFormatter` (to 3.x), one line
per record: `[group,topic,partition]::<value>` where the value is
- `OffsetAndMetadata(offset=7, leaderEpoch=Optional.empty, metadata=, commitTimestamp=1600000000000,
  expireTimestamp=None)` (2.1+; expireTimestamp an Option, or a bare number in early 2.1;
  the group coordinator's Java class spells `commitTimestampMs=`/`expireTimestampMs=` with
  OptionalInt/OptionalLong),
- `[OffsetMetadata[7,NO_METADATA],CommitTime 1600000000000,ExpirationTime 1600086400000]` (pre 2.1),
- `NULL`: a tombstone, the offset was deleted or expired.
The group id is free text (commas included): the key is split from the right, as topic names hold
no comma; the metadata is free text: the fields after it are read from the right.

JSON, `org.apache.kafka.tools.consumer.OffsetsMessageFormatter` (3.8+): `{"key":{"version":1,
"data":{"group":...,"topic":...,"partition":0}},"value":{"version":3,"data":{"offset":7,
"leaderEpoch":0,"metadata":"","commitTimestamp":1600000000000}}}`. 3.8/3.9 name the key's
record version `version` (a number, in some builds a quoted number), 4.x its record type `type`
(0 and 1 are offset commits, 2 group metadata); `"value":null` is a tombstone; `"data":"unknown"`
a record the formatter could not read; `"key":null` a record without key. Records come one per
line, or run together (`}{`) as 4.x writes them without a line break.

Each commit becomes a sync at its commitTimestamp (`ts`); the ledger's time never goes backwards,
so the commands come out sorted by ts (stable). A tombstone has no time of its own: it takes the
newest commitTimestamp before it in the file (it was written after them). So that sorting never
reorders two records of one key (a broker clock stepping back), a record's ts is raised to that
of the key's previous record.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ledger.import_result import ImportResult, ImportTally, line_error, name_cell
from ledger.limits import OFFSET_MAX, QUEUE_ID_MAX, TS_MAX

_TEXT_RECORD = re.compile(r"\[(?P<key>.*?)\]::(?P<value>.*)")
_KEY_TAIL = re.compile(r"(?P<group>.*),(?P<topic>[^,]*),(?P<partition>-?\d+)")
_VALUE_21 = re.compile(
    r"OffsetAndMetadata\(offset=(?P<offset>-?\d+), leaderEpoch=(?:Optional|OptionalInt)"
    r"(?:\.empty|\[-?\d+\]), metadata=(?s:.*), commitTimestamp(?:Ms)?=(?P<ts>-?\d+), "
    r"expireTimestamp(?:Ms)?=(?:None|Some\(-?\d+\)|-?\d+|OptionalLong\.empty|OptionalLong\[-?\d+\])"
    r"(?:, recordOffset=-?\d+)?\)")
_VALUE_OLD = re.compile(
    r"\[OffsetMetadata\[(?P<offset>-?\d+),(?s:.*)\],CommitTime (?P<ts>-?\d+),"
    r"ExpirationTime -?\d+\]")
_PROCESSED = re.compile(r"Processed a total of \d+ messages")
_NOISE = re.compile(r"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] [A-Z]+ |SLF4J: |"
                    r"Using the ConsoleConsumer with old consumer is deprecated)")
_JSON_START = '{"key":'
_OFFSET_COMMIT_TYPES = (0, 1)
_GROUP_METADATA_TYPE = 2


class _Commit(msgspec.Struct):
    """One parsed offset commit before sorting: offset None is a tombstone, ts None unknown."""

    line_no: int
    group: str
    topic: str
    queue_id: int
    offset: int | None
    ts: int | None


def parse_kafka_offsets(text: str, source: str) -> ImportResult:
    """Syncs (with `ts`) from a `__consumer_offsets` dump, text or JSON form, sorted by ts."""
    tally = ImportTally(source)
    commits: list[_Commit] = []
    decoder = msgspec.json.Decoder()
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith(_JSON_START):
            _json_line(line, line_no, decoder, tally, commits)
        elif line.startswith("["):
            if _NOISE.match(line):
                tally.skip("log_line")
                continue
            _text_line(line, line_no, tally, commits)
        elif _PROCESSED.fullmatch(line):
            tally.skip("console_consumer_summary")
        elif _NOISE.match(line):
            tally.skip("log_line")
        else:
            raise line_error(line_no, "not a record of the offsets formatter", line)
    tally.records = len(commits)
    _emit_sorted(commits, tally)
    return tally.result()


def _commit(tally: ImportTally, commits: list[_Commit], line_no: int, line: str, group: str,
            topic: str, partition: int, offset: int | None, ts: int | None) -> None:
    group = name_cell(group, "group", line_no, line)
    topic = name_cell(topic, "topic", line_no, line)
    if not 0 <= partition <= QUEUE_ID_MAX:
        raise line_error(line_no, f"partition {partition} is out of range", line)
    if ts is not None and not 0 <= ts <= TS_MAX:
        raise line_error(line_no, f"commitTimestamp {ts} is out of range", line)
    if offset is not None and not 0 <= offset <= OFFSET_MAX:
        # Kafka stores what a client committed; a negative offset is no position to restore.
        tally.skip("negative_offset")
        return
    commits.append(_Commit(line_no, group, topic, partition, offset, ts))


def _text_line(line: str, line_no: int, tally: ImportTally, commits: list[_Commit]) -> None:
    m = _TEXT_RECORD.fullmatch(line)
    if m is None:
        raise line_error(line_no, "not a [group,topic,partition]::value record", line)
    key = _KEY_TAIL.fullmatch(m["key"])
    if key is None:
        raise line_error(line_no, "key is not [group,topic,partition]", line)
    value = m["value"]
    if value == "NULL":
        offset, ts = None, None
    else:
        v = _VALUE_21.fullmatch(value) or _VALUE_OLD.fullmatch(value)
        if v is None:
            raise line_error(line_no, "value is neither OffsetAndMetadata(...), "
                             "[OffsetMetadata[...],CommitTime ...] nor NULL: cut short?", line)
        offset, ts = int(v["offset"]), int(v["ts"])
    _commit(tally, commits, line_no, line, key["group"], key["topic"], int(key["partition"]),
            offset, ts)


def _json_line(line: str, line_no: int, decoder: msgspec.json.Decoder, tally: ImportTally,
               commits: list[_Commit]) -> None:
    """One line of JSON records: one, or several run together as 4.x prints them. A record
    boundary is the next `{"key":` outside a string (inside one its quotes are escaped)."""
    processed = _PROCESSED.search(line)
    if processed is not None and processed.end() == len(line):
        line = line[:processed.start()]  # stderr's summary landed after the last record
        tally.skip("console_consumer_summary")
    starts = [m.start() for m in re.finditer(re.escape(_JSON_START), line)]
    for i, start in enumerate(starts):
        chunk = line[start:starts[i + 1] if i + 1 < len(starts) else len(line)]
        try:
            record = decoder.decode(chunk)
        except msgspec.DecodeError as e:
            raise line_error(line_no, f"record {i + 1} of the line is not JSON ({e}): cut short?",
                             chunk) from None
        _json_record(record, line_no, chunk, tally, commits)


def _version(node: Any, what: str, line_no: int, chunk: str) -> int:
    """A record type or version: a number, or a quoted number as some 3.x builds print."""
    if isinstance(node, str) and node.isdigit():
        return int(node)
    if isinstance(node, int) and not isinstance(node, bool):
        return node
    raise line_error(line_no, f"{what} {node!r} is not a number", chunk)


def _json_record(record: Any, line_no: int, chunk: str, tally: ImportTally,
                 commits: list[_Commit]) -> None:
    if not isinstance(record, dict) or "key" not in record or "value" not in record:
        raise line_error(line_no, "a record must be {\"key\": ..., \"value\": ...}", chunk)
    key, value = record["key"], record["value"]
    if key is None:
        tally.skip("null_key")
        return
    if not isinstance(key, dict) or "data" not in key or ("type" in key) == ("version" in key):
        raise line_error(line_no, "key must be {\"type\" or \"version\": N, \"data\": ...}", chunk)
    kind = _version(key.get("type", key.get("version")), "key type", line_no, chunk)
    data = key["data"]
    if data == "unknown" or data is None:
        tally.skip("unknown_record")
        return
    if not isinstance(data, dict):
        raise line_error(line_no, "key data must be an object", chunk)
    if kind == _GROUP_METADATA_TYPE or ("topic" not in data and "group" in data):
        tally.skip("group_metadata")
        return
    if kind not in _OFFSET_COMMIT_TYPES:
        tally.skip("unknown_record")
        return
    group, topic, partition = data.get("group"), data.get("topic"), data.get("partition")
    if not isinstance(group, str) or not isinstance(topic, str) or \
            isinstance(partition, bool) or not isinstance(partition, int):
        raise line_error(line_no, "offset commit key needs group, topic and partition", chunk)
    if value is None:
        _commit(tally, commits, line_no, chunk, group, topic, partition, None, None)
        return
    if not isinstance(value, dict) or "data" not in value:
        raise line_error(line_no, "value must be null or {\"version\": N, \"data\": ...}", chunk)
    _version(value.get("version"), "value version", line_no, chunk)
    vdata = value["data"]
    if vdata == "unknown":
        tally.skip("unknown_value")
        return
    if not isinstance(vdata, dict):
        raise line_error(line_no, "value data must be an object", chunk)
    offset, ts = vdata.get("offset"), vdata.get("commitTimestamp")
    for name, field in (("offset", offset), ("commitTimestamp", ts)):
        if isinstance(field, bool) or not isinstance(field, int):
            raise line_error(line_no, f"value data has no integer {name}", chunk)
    _commit(tally, commits, line_no, chunk, group, topic, partition, offset, ts)


def _emit_sorted(commits: list[_Commit], tally: ImportTally) -> None:
    """Give each commit its ledger time, then emit syncs sorted by it (stable)."""
    known = [c.ts for c in commits if c.ts is not None]
    newest = min(known) if known else None  # a tombstone before any commit: the earliest time
    last_of_key: dict[tuple[str, str, int], int] = {}
    timed: list[tuple[int | None, _Commit]] = []
    raised = 0
    for c in commits:
        if c.ts is not None:
            newest = c.ts if newest is None else max(newest, c.ts)
        ts = c.ts if c.ts is not None else newest
        key = (c.group, c.topic, c.queue_id)
        previous = last_of_key.get(key)
        if ts is not None and previous is not None and ts < previous:
            ts = previous
            raised += 1
        if ts is not None:
            last_of_key[key] = ts
        timed.append((ts, c))
    if raised:
        tally.notes.append(f"{raised} record(s) had a commitTimestamp older than the previous "
                           "record of their key; they keep their order in the log")
    timed.sort(key=lambda pair: -1 if pair[0] is None else pair[0])
    for ts, c in timed:
        tally.sync(c.group, c.topic, c.queue_id, c.offset, ts)
