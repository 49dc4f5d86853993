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

import msgspec

from ledger.importers.result import ImportResult, ImportTally, line_error, name_cell
from ledger.limits import NAME_PATTERN, OFFSET_MAX, QUEUE_ID_MAX, TS_MAX

_TEXT_RECORD = re.compile(r"\[(?P<key>.*?)\]::(?P<value>.*)")
_KEY_TAIL = re.compile(r"(?P<group>.*),(?P<topic>[^,]*),(?P<partition>-?\d+)")
_EPOCH = r"(?:Optional|OptionalInt)(?:\.empty|\[-?\d+\])"
_EXPIRE = r"(?:None|Some\(-?\d+\)|-?\d+|OptionalLong\.empty|OptionalLong\[-?\d+\])"
_VALUE_21 = re.compile(
    rf"OffsetAndMetadata\(offset=(?P<offset>-?\d+), leaderEpoch={_EPOCH}, metadata=(?s:.*), "
    rf"commitTimestamp(?:Ms)?=(?P<ts>-?\d+), expireTimestamp(?:Ms)?={_EXPIRE}"
    r"(?:, recordOffset=-?\d+)?\)")
_VALUE_OLD = re.compile(
    r"\[OffsetMetadata\[(?P<offset>-?\d+),(?s:.*)\],CommitTime (?P<ts>-?\d+),"
    r"ExpirationTime -?\d+\]")
# The common 2.1+ record in one match: names of ledger characters, non-negative numbers. Any
# other record (or a bad one) takes the general path, which names what is wrong.
_NAME = NAME_PATTERN.pattern.replace("{1,249}", "+")
_FAST_21 = re.compile(
    rf"\[({_NAME}),({_NAME}),(\d{{1,10}})\]::OffsetAndMetadata\(offset=(\d{{1,19}}), "
    rf"leaderEpoch=Optional(?:\.empty|\[\d+\]), metadata=(?s:.*), commitTimestamp=(\d{{1,15}}), "
    r"expireTimestamp=(?:None|Some\(-?\d+\)|-?\d+)\)")
_PROCESSED = re.compile(r"Processed a total of \d+ messages")
_NOISE = re.compile(r"(\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] [A-Z]+ |SLF4J: |"
                    r"Using the ConsoleConsumer with old consumer is deprecated)")
FOREIGN_SHOWN = 10
NAME_RULE = "1-249 characters of A-Z a-z 0-9 . _ - % |"
_JSON_START = '{"key":'
_JSON_BATCH_RECORDS = 8192
_OFFSET_COMMIT_TYPES = (0, 1)
_GROUP_METADATA_TYPE = 2

# group, topic, queue id, offset (None: tombstone), commit time (None: a tombstone's, unknown)
Commit = tuple[str, str, int, "int | None", "int | None"]


class _KeyData(msgspec.Struct):
    group: str | None = None
    topic: str | None = None
    partition: int | None = None


class _Key(msgspec.Struct):
    data: _KeyData | str | None
    type: int | str | None = None
    version: int | str | None = None


class _ValueData(msgspec.Struct):
    offset: int | None = None
    commitTimestamp: int | None = None  # noqa: N815 - the formatter's field name


class _Value(msgspec.Struct):
    data: _ValueData | str | None
    version: int | str | None = None


class _Record(msgspec.Struct):
    key: _Key | None
    value: _Value | None


def parse_kafka_offsets(text: str, source: str) -> ImportResult:
    """Syncs (with `ts`) from a `__consumer_offsets` dump, text or JSON form, sorted by ts."""
    tally = ImportTally(source)
    commits = _Commits(tally)
    json_lines = _JsonLines(commits)
    fast, add = _FAST_21.fullmatch, commits.add
    for line_no, line in enumerate(text.splitlines(), start=1):
        m = fast(line)
        if m is not None:
            group, topic, partition, offset, ts = m.groups()
            add(line_no, line, group, topic, int(partition), int(offset), int(ts))
            continue
        line = line.strip()
        if not line:
            continue
        if line.startswith(_JSON_START):
            json_lines.add(line, line_no)
            continue
        json_lines.flush()
        if line.startswith("[") and not _NOISE.match(line):
            _text_line(line, line_no, commits)
        elif _PROCESSED.fullmatch(line):
            tally.skip("console_consumer_summary")
        elif _NOISE.match(line):
            tally.skip("log_line")
        else:
            raise line_error(line_no, "not a record of the offsets formatter", line)
    json_lines.flush()
    tally.records = len(commits)
    if commits.foreign:
        shown_names = ", ".join(repr(g) for g in list(commits.foreign)[:FOREIGN_SHOWN])
        more = len(commits.foreign) - FOREIGN_SHOWN
        tally.notes.append(
            f"skipped {sum(commits.foreign.values())} record(s) of {len(commits.foreign)} "
            f"group(s) whose names the ledger cannot hold ({NAME_RULE}): {shown_names}"
            + (f" and {more} more" if more > 0 else ""))
    _emit_sorted(commits, tally)
    return tally.result()


class _Commits(list[Commit]):
    """The commits of the dump in file order, each checked as it is added."""

    def __init__(self, tally: ImportTally) -> None:
        super().__init__()
        self.tally = tally
        self.names: set[str] = set()  # names already checked: they repeat on every record
        self.foreign: dict[str, int] = {}  # group names the ledger cannot hold: records each

    def add(self, line_no: int, line: str, group: str, topic: str, partition: int,
            offset: int | None, ts: int | None) -> None:
        """Keep one commit; a negative offset is skipped (Kafka stores what a client committed,
        but it is no position to restore), and so is a group whose name the ledger cannot hold
        (Kafka takes any string as a group id: `spark:driver-1`), counted by name."""
        names = self.names
        if group not in names:
            if NAME_PATTERN.fullmatch(group) is None:
                self.foreign[group] = self.foreign.get(group, 0) + 1
                self.tally.skip("group_name_outside_the_ledger_alphabet")
                return
            names.add(group)
        if topic not in names:
            names.add(name_cell(topic, "topic", line_no, line))
        if not 0 <= partition <= QUEUE_ID_MAX:
            raise line_error(line_no, f"partition {partition} is out of range", line)
        if ts is not None and not 0 <= ts <= TS_MAX:
            raise line_error(line_no, f"commitTimestamp {ts} is out of range", line)
        if offset is not None and not 0 <= offset <= OFFSET_MAX:
            self.tally.skip("negative_offset")
            return
        self.append((group, topic, partition, offset, ts))


def _text_line(line: str, line_no: int, commits: _Commits) -> None:
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
    commits.add(line_no, line, key["group"], key["topic"], int(key["partition"]), offset, ts)


class _JsonLines:
    """JSON records, decoded a batch at a time: one per line, or many run together on one line
    as 4.x prints them. A record starts at each `{"key":` (inside a JSON string the quotes would
    be escaped, so the mark cannot occur there)."""

    def __init__(self, commits: _Commits) -> None:
        self.tally, self.commits = commits.tally, commits
        self.chunks: list[str] = []
        self.where: list[tuple[int, int]] = []  # (line number, record number in its line)
        self.decoder = msgspec.json.Decoder(list[_Record])
        self.one = msgspec.json.Decoder(_Record)

    def add(self, line: str, line_no: int) -> None:
        processed = _PROCESSED.search(line)
        if processed is not None and processed.end() == len(line):
            line = line[:processed.start()]  # stderr's summary landed after the last record
            self.tally.skip("console_consumer_summary")
        starts = [m.start() for m in re.finditer(re.escape(_JSON_START), line)]
        ends = starts[1:] + [len(line)]
        for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
            self.chunks.append(line[start:end])
            self.where.append((line_no, i + 1))
            if len(self.chunks) >= _JSON_BATCH_RECORDS:
                self.flush()

    def flush(self) -> None:
        if not self.chunks:
            return
        chunks, where = self.chunks, self.where
        self.chunks, self.where = [], []
        try:
            records = self.decoder.decode("[" + ",".join(chunks) + "]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            records = [self._decode_one(chunk, at) for chunk, at in zip(chunks, where, strict=True)]
        for record, chunk, (line_no, _) in zip(records, chunks, where, strict=True):
            self._record(record, line_no, chunk)

    def _decode_one(self, chunk: str, at: tuple[int, int]) -> _Record:
        try:
            return self.one.decode(chunk)
        except msgspec.ValidationError as e:  # JSON, but a field of the wrong type
            raise line_error(at[0], f"record {at[1]} of the line: {_wrong_type(str(e))}",
                             chunk) from None
        except msgspec.DecodeError as e:
            raise line_error(at[0], f"record {at[1]} of the line is not an offsets formatter "
                             f"record ({e}): cut short?", chunk) from None

    def _record(self, record: _Record, line_no: int, chunk: str) -> None:
        key, value, tally = record.key, record.value, self.tally
        if key is None:
            tally.skip("null_key")
            return
        if (key.type is None) == (key.version is None):
            raise line_error(line_no, "key must have one of \"type\" and \"version\"", chunk)
        kind = _number(key.type if key.type is not None else key.version, "key type", line_no,
                       chunk)
        data = key.data
        if data is None or isinstance(data, str):
            tally.skip("unknown_record")
            return
        if kind == _GROUP_METADATA_TYPE or (data.topic is None and data.group is not None):
            tally.skip("group_metadata")
            return
        if kind not in _OFFSET_COMMIT_TYPES:
            tally.skip("unknown_record")
            return
        if data.group is None or data.topic is None or data.partition is None:
            raise line_error(line_no, "offset commit key needs group, topic and partition", chunk)
        if value is None:
            self.commits.add(line_no, chunk, data.group, data.topic, data.partition, None, None)
            return
        _number(value.version, "value version", line_no, chunk)
        vdata = value.data
        if isinstance(vdata, str):
            tally.skip("unknown_value")
            return
        if vdata is None or vdata.offset is None or vdata.commitTimestamp is None:
            raise line_error(line_no, "value data has no integer offset and commitTimestamp",
                             chunk)
        self.commits.add(line_no, chunk, data.group, data.topic, data.partition, vdata.offset,
                         vdata.commitTimestamp)


_WRONG_TYPE = re.compile(r"Expected `(?P<want>[^`]+)`, got `(?P<got>[^`]+)` - at `\$\.(?P<at>[^`]+)`")
_WORDS = {"int": "an integer", "str": "a string", "null": "null", "object": "an object",
          "array": "an array", "bool": "true or false", "float": "a number with a fraction"}


def _wrong_type(message: str) -> str:
    """msgspec's "Expected `int | null`, got `str` - at `$.value.data.offset`" as "field
    value.data.offset is a string, where the formatter writes an integer or null"."""
    m = _WRONG_TYPE.fullmatch(message)
    if m is None:
        return f"not an offsets formatter record: {message}"
    want = " or ".join(_WORDS.get(w.strip(), w.strip()) for w in m["want"].split("|"))
    return (f"field {m['at']} is {_WORDS.get(m['got'], m['got'])}, where the offsets formatter "
            f"writes {want}")


def _number(node: int | str | None, what: str, line_no: int, chunk: str) -> int:
    """A record type or version: a number, or a quoted number as some 3.x builds print."""
    if isinstance(node, str) and node.isdigit():
        return int(node)
    if isinstance(node, int):
        return node
    raise line_error(line_no, f"{what} {node!r} is not a number", chunk)


def _emit_sorted(commits: list[Commit], tally: ImportTally) -> None:
    """Give each commit its ledger time, then emit syncs sorted by it (stable)."""
    known = [c[4] for c in commits if c[4] is not None]
    newest = min(known) if known else None  # a tombstone before any commit: the earliest time
    last_of_key: dict[tuple[str, str, int], int] = {}
    times: list[int | None] = []
    raised = 0
    for group, topic, queue_id, _, ts in commits:
        if ts is None:
            ts = newest
        elif newest is None or ts > newest:
            newest = ts
        if ts is not None:
            key = (group, topic, queue_id)
            previous = last_of_key.get(key)
            if previous is not None and ts < previous:
                ts = previous
                raised += 1
            last_of_key[key] = ts
        times.append(ts)
    if raised:
        tally.notes.append(f"{raised} record(s) had a commitTimestamp older than the previous "
                           "record of their key; they keep their order in the log")
    order = sorted(range(len(commits)), key=lambda i: times[i] or 0)
    tally.syncs([commits[i][:4] + (times[i],) for i in order])
