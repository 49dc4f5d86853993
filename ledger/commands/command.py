"""Commands: one msgspec Struct per `op` (a tagged union), decoded once from whatever carried it
(an NDJSON line, a JSON document, a dict, a row of an Arrow table, a Python call) and validated
once, here. Every write of the ledger is one of these (DESIGN.md, "Commands: one typed path").

Field names are the CLI's option names with `_` (`group`, `queue_id`, `offset`, `client`, ...).
An optional `ts` (epoch ms or ISO-8601) is the ledger time of that command (replays and
simulations): ledger time = max(ts, the last event's ts).

Types and ranges are checked by msgspec while decoding; what msgspec cannot say (the name
alphabet, times, one reset scenario) is checked by `validate`, once per command. Names repeat
across commands, so their check is cached (`limits.check_name`); the column-wise path checks
each distinct name of a batch once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Annotated, Any, Literal

import msgspec

from ledger.commands.input_text import not_utf8, utf8_error
from ledger.commands.strict_json import check_unique_keys
from ledger.errors import InvalidInput, LedgerError
from ledger.limits import (
    APPEND_COUNT_MAX,
    GENERATION_MAX,
    NAME_LENGTH_MAX,
    OFFSET_MAX,
    PULL_MAX,
    QUEUE_ID_MAX,
    REASON_LENGTH_MAX,
    TS_MAX,
    check_name,
)

Name = str  # the name rule (limits.check_name) is checked by `validate`, with one message
QueueId = Annotated[int, msgspec.Meta(ge=0, le=QUEUE_ID_MAX)]
Offset = Annotated[int, msgspec.Meta(ge=0, le=OFFSET_MAX)]
#: A time as users give it: epoch ms, ISO-8601, or "now" (the command's ledger time).
Time = int | str  # checked by timeparse.parse_time where used, with one message
Shift = Annotated[int, msgspec.Meta(ge=-(2**62), le=2**62)]
Reason = Annotated[str, msgspec.Meta(max_length=REASON_LENGTH_MAX)]
SOURCE_PATTERN = re.compile(r"[A-Za-z0-9._\-%|:/@]{1,249}")

MODES = ("clustering", "broadcast")
#: Reset scenarios in the order their options are listed (the CLI's `--to-offset` ...).
SCENARIO_FIELDS = ("to_offset", "to_datetime", "to_earliest", "to_latest", "to_current",
                   "shift_by", "by_duration", "to_state_at")


class Command(msgspec.Struct, tag_field="op", forbid_unknown_fields=True, kw_only=True,
              frozen=True, gc=False):
    """Fields every command may carry."""

    ts: Time | None = None


class QueueAppend(Command, tag="queue_append", kw_only=True, frozen=True, gc=False):
    """Append `count` messages to a queue (MaxOffset advances); all share `store_time`."""

    topic: Name
    queue_id: QueueId
    count: Annotated[int, msgspec.Meta(ge=1, le=APPEND_COUNT_MAX)] = 1
    store_time: Time | None = None


class QueueTruncate(Command, tag="queue_truncate", kw_only=True, frozen=True, gc=False):
    """Retention advanced a queue's MinOffset."""

    topic: Name
    queue_id: QueueId
    min_offset: Offset


class QueueBounds(Command, tag="queue_bounds", kw_only=True, frozen=True, gc=False):
    """A tool's view of a queue's bounds (an importer's LOG-END-OFFSET, a broker's max offset):
    raises MaxOffset / MinOffset to these values where they are higher, never lowers them."""

    topic: Name
    queue_id: QueueId
    max_offset: Offset | None = None
    min_offset: Offset | None = None
    store_time: Time | None = None
    source: str | None = None


class Pull(Command, tag="pull", kw_only=True, frozen=True, gc=False):
    """Where `client` reads next (a pending reset first); at most `max` messages. A pull of
    `max` 0 takes none: it only answers where the client starts (what a Kafka consumer asks
    when a partition is assigned to it), so a later pull never continues past it."""

    group: Name
    topic: Name
    queue_id: QueueId
    client: Name | None = None
    max: Annotated[int, msgspec.Meta(ge=0, le=PULL_MAX)] = 32


class Commit(Command, tag="commit", kw_only=True, frozen=True, gc=False):
    """Commit `offset` (the next offset to consume) under `generation` (default: the client's)."""

    group: Name
    topic: Name
    queue_id: QueueId
    offset: Offset
    client: Name | None = None
    generation: Annotated[int, msgspec.Meta(ge=0, le=GENERATION_MAX)] | None = None
    #: Fenced unless `client` made the queue's last pull: a client owns a queue from its pull
    #: until another client pulls it (a Kafka partition's assignment), so a zombie whose
    #: queue moved on cannot commit.
    owner_only: bool = False


class Sync(Command, tag="sync", kw_only=True, frozen=True, gc=False):
    """Overwrite a committed offset from a broker snapshot, a mirror or an importer (recorded
    from -> to; unchanged appends nothing); a null offset removes it (a Kafka tombstone,
    recorded as an expire). `client`: the consumer client the source says owns the queue."""

    group: Name
    topic: Name
    queue_id: QueueId
    offset: Offset | None
    source: str
    client: Name | None = None


class PlanRow(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True, gc=False):
    """One queue of a reviewed reset plan: executed only while its from_offset still holds."""

    topic: Name
    queue_id: QueueId
    from_offset: Offset | None
    to_offset: Offset


class Reset(Command, tag="reset", kw_only=True, frozen=True, gc=False):
    """Plan (and with `execute`, apply) a reset of a group's offsets: one scenario, one scope
    (`topic` [+ `queue_id`], `topics` as the CLI's `T` / `T:0,1` specs, `all_topics`, or the
    Kafka CSV text `from_csv`). `plan` executes a reviewed plan as it is, refused when any
    queue's committed offset moved since it was planned."""

    group: Name
    topic: Name | None = None
    queue_id: QueueId | None = None
    topics: list[str] | None = None
    all_topics: bool = False
    to_offset: Offset | None = None
    to_datetime: Time | None = None
    to_earliest: bool = False
    to_latest: bool = False
    to_current: bool = False
    shift_by: Shift | None = None
    by_duration: Annotated[int, msgspec.Meta(ge=0, le=TS_MAX)] | str | None = None
    to_state_at: Time | None = None
    from_csv: str | None = None
    plan: list[PlanRow] | None = None
    backward_only: bool = False
    reason: Reason | None = None
    actor: Name | None = None
    execute: bool = False
    force: bool = False


class GroupSet(Command, tag="group_set", kw_only=True, frozen=True, gc=False):
    """Create a group or change its mode, initial policy or client timeout (ISO-8601 or ms)."""

    group: Name
    mode: Literal["clustering", "broadcast"] | None = None
    initial: str | None = None
    client_timeout: Annotated[int, msgspec.Meta(ge=1, le=10**12)] | str | None = None
    actor: Name | None = None


class GroupDelete(Command, tag="group_delete", kw_only=True, frozen=True, gc=False):
    """Remove a group's offsets (a delete event per queue), active clients or not. With a
    `source`, the source removed the group (a Kafka group tombstone): what a sync may say, its
    queues whose offsets the source already removed are deleted too."""

    group: Name
    actor: Name | None = None
    source: str | None = None


AnyCommand = (QueueAppend | QueueTruncate | QueueBounds | Pull | Commit | Sync | Reset | GroupSet
              | GroupDelete)
COMMAND_TYPES: tuple[type[Command], ...] = (
    QueueAppend, QueueTruncate, QueueBounds, Pull, Commit, Sync, Reset, GroupSet, GroupDelete)
OPS: tuple[str, ...] = tuple(c.__struct_config__.tag for c in COMMAND_TYPES)  # type: ignore[misc]
BY_OP: dict[str, type[Command]] = dict(zip(OPS, COMMAND_TYPES, strict=True))
#: Ops that read or change a whole group (or, for reset, the log): they split column-wise runs.
BARRIER_OPS = frozenset({"reset", "group_set", "group_delete"})


def op_of(cmd: Command) -> str:
    return cmd.__struct_config__.tag  # type: ignore[return-value]


# ----------------------------------------------------------------------------- validation
def check_source(value: object) -> str:
    """Where synced offsets came from (`kafka-describe:out.txt`): a name that may also hold
    `:`, `/` and `@`."""
    if not isinstance(value, str) or SOURCE_PATTERN.fullmatch(value) is None:
        value = str(value)
        raise InvalidInput(f"invalid source {value[:80]!r}: use 1-249 characters of "
                           "A-Z a-z 0-9 . _ - % | : / @")
    return value


def check_initial(initial: str) -> str:
    if initial in ("latest", "earliest") or re.fullmatch(r"timestamp:.+", initial):
        return initial
    raise InvalidInput(f"invalid initial policy {initial!r}: use latest, earliest or "
                       "timestamp:TIME")


def scenario_field(cmd: Reset) -> str:
    """The one scenario a reset names (a zero is a value: `to_offset: 0` is a scenario)."""
    given = [f for f in SCENARIO_FIELDS if (v := getattr(cmd, f)) is not None and v is not False]
    if cmd.from_csv is not None:
        given.append("from_csv")
    if cmd.plan is not None and not given:
        raise InvalidInput("a reset plan needs the scenario it was planned with")
    if len(given) != 1:
        names = ", ".join(SCENARIO_FIELDS + ("from_csv",))
        raise InvalidInput(
            f"reset needs exactly one scenario of {names}; got {', '.join(given) or 'none'}")
    return given[0]


def validate(cmd: Command) -> Command:
    """What msgspec's types cannot say: the name alphabet, one reset scenario, a scope. Raises
    InvalidInput naming the bad value; returns the command."""
    for name in ("group", "topic", "client"):
        value = getattr(cmd, name, None)
        if value is not None:
            check_name(value, name)
    if type(cmd) is Commit or type(cmd) is Pull:
        if type(cmd) is Commit and cmd.owner_only and cmd.client is None:  # type: ignore[attr-defined]
            raise InvalidInput("commit: owner_only needs a client (the owner of a queue is "
                               "the client of its last pull)")
        return cmd
    actor = getattr(cmd, "actor", None)
    if actor is not None:
        check_name(actor, "actor")
    if type(cmd) is Sync or type(cmd) is QueueBounds or type(cmd) is GroupDelete:
        if cmd.source is not None:  # type: ignore[attr-defined]
            check_source(cmd.source)  # type: ignore[attr-defined]
    elif type(cmd) is GroupSet:
        if cmd.initial is not None:  # type: ignore[attr-defined]
            check_initial(cmd.initial)  # type: ignore[attr-defined]
    elif type(cmd) is Reset:
        _validate_reset(cmd)  # type: ignore[arg-type]
    return cmd


def _validate_reset(cmd: Reset) -> None:
    scenario_field(cmd)
    # with a reviewed plan, from_csv names the scenario the plan came from: the plan is the scope
    csv_scope = cmd.from_csv is not None and cmd.plan is None
    scopes = [s for s, on in (("topic", cmd.topic is not None), ("topics", bool(cmd.topics)),
                              ("all_topics", cmd.all_topics), ("from_csv", csv_scope),
                              ("plan", cmd.plan is not None)) if on]
    if cmd.queue_id is not None and cmd.topic is None:
        raise InvalidInput("reset: queue_id needs a topic")
    if cmd.plan is not None:  # executed as it is; without execute, only checked
        if len(scopes) != 1:
            raise InvalidInput("reset: a plan is its own scope: drop topic/topics/all_topics")
        seen: set[tuple[str, int]] = set()
        for row in cmd.plan:
            check_name(row.topic, "topic")
            if (row.topic, row.queue_id) in seen:
                raise InvalidInput(f"duplicate queue {row.topic}:{row.queue_id} in the plan: "
                                   "one row per queue")
            seen.add((row.topic, row.queue_id))
        return
    if cmd.from_csv is not None and len(scopes) > 1:
        raise InvalidInput("--from-file is the scope: drop --topic/--all-topics")
    if len(scopes) > 1:
        raise InvalidInput("use either --topic or --all-topics, not both")
    if not scopes:
        raise InvalidInput("reset needs a scope: --topic T, --topic T:0,1 or --all-topics")
    for spec in cmd.topics or ():
        parse_topic_spec(spec)


def parse_topic_spec(spec: str) -> tuple[str, tuple[int, ...] | None]:
    """`T` (every queue of T) or `T:0,2` (queues 0 and 2): the topic name checked like every
    other name (a topic the rest of the ledger would refuse is never stored)."""
    name, colon, queues = spec.partition(":")
    try:
        check_name(name, "topic")
    except InvalidInput:
        raise InvalidInput(f"invalid --topic {spec!r}: the topic must be 1-{NAME_LENGTH_MAX} "
                           "characters of A-Z a-z 0-9 . _ - % |, optionally :QUEUE,QUEUE"
                           ) from None
    if not colon:
        return name, None
    ids = []
    for q in queues.split(","):
        if re.fullmatch(r"[0-9]{1,10}", q.strip()) is None or int(q) > QUEUE_ID_MAX:
            raise InvalidInput(f"invalid --topic {spec!r}: queue ids must be integers between 0 "
                               f"and {QUEUE_ID_MAX}, like {name}:0,2")
        ids.append(int(q))
    return name, tuple(sorted(set(ids)))


def scope_topics(specs: Iterable[str]) -> tuple[tuple[str, tuple[int, ...] | None], ...]:
    """`--topic` specs merged per topic (a whole topic wins over some of its queues)."""
    merged: dict[str, set[int] | None] = {}
    for spec in specs:
        name, ids = parse_topic_spec(spec)
        if ids is None or (name in merged and merged[name] is None):
            merged[name] = None
            continue
        merged[name] = (merged.get(name) or set()) | set(ids)
    return tuple((t, None if q is None else tuple(sorted(q))) for t, q in merged.items())


# ----------------------------------------------------------------------------- decoding
_decoder = msgspec.json.Decoder(AnyCommand)
_loose = msgspec.json.Decoder()
_raw_items = msgspec.json.Decoder(list[msgspec.Raw])
_all_commands = msgspec.json.Decoder(list[AnyCommand])
_BOM = b"\xef\xbb\xbf"
_AT_PATH = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$")


def from_json(raw: bytes | str, line: int | None = None) -> Command:
    """One command from one JSON object (an NDJSON line or a request body); InvalidInput names
    the field and the bad value (and the line, when it is not JSON)."""
    data = raw.encode() if isinstance(raw, str) else raw
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    try:
        command = validate(_decoder.decode(data))
    except msgspec.ValidationError as e:
        raise InvalidInput(_explain(str(e), _loose_value(data))) from None
    except msgspec.DecodeError as e:
        where = f"line {line}: " if line is not None else ""
        if not data.strip():
            raise InvalidInput(f"{where}empty line") from None
        raise InvalidInput(utf8_error(e, data, line) or f"{where}invalid JSON: {e}") from None
    except UnicodeDecodeError:  # msgspec checks the UTF-8 of strings as it meets them
        raise InvalidInput(not_utf8(data, line)) from None
    check_unique_keys(data, _loose.decode(data), "the command")
    return command


class _OneCommand(msgspec.Struct, gc=False):
    """A command under one field. msgspec caches the type information of a Struct, not of a
    bare union, so converting through this is ~16x cheaper per command than converting to
    `AnyCommand` itself (7 us -> 0.45 us: the bulk of an import's decoding)."""

    command: AnyCommand


def from_obj(obj: Any) -> Command:
    """One command from a decoded JSON value (a dict, or a Command passed as is)."""
    if isinstance(obj, Command):  # built by a Python call: its fields were not checked yet
        obj = msgspec.to_builtins(obj)
    if not isinstance(obj, dict):
        raise InvalidInput(f"a command must be a JSON object, not {_shown(obj)}")
    try:
        return validate(msgspec.convert({"command": obj}, _OneCommand).command)
    except msgspec.ValidationError:
        pass  # converted again below, for msgspec's message with the command's own paths
    try:
        return validate(msgspec.convert(obj, AnyCommand))
    except msgspec.ValidationError as e:
        raise InvalidInput(_explain(str(e), obj)) from None


_decoders: dict[type, msgspec.json.Decoder] = {}


def decode_as(body: bytes, as_type: type[Command], extra: dict[str, Any] | None = None
              ) -> Command:
    """A request body holding one command of `as_type` (its op implied by the route; a body
    naming another op is refused). `extra`: {"rename": {option: field}} for routes that take
    the CLI's option names, {"set": {field: value}} for a value the path gives (a body giving
    another is refused)."""
    op = as_type.__struct_config__.tag
    data = body[len(_BOM):] if body.startswith(_BOM) else body
    if not extra:
        decoder = _decoders.get(as_type)
        if decoder is None:
            decoder = _decoders[as_type] = msgspec.json.Decoder(as_type)
        try:
            command = validate(decoder.decode(data))
            check_unique_keys(data, _loose.decode(data), "the body")
            return command
        except msgspec.ValidationError as e:
            loose = _loose_value(data)
            # another op than the route's: say so (not "unknown op 'reset'")
            if isinstance(loose, dict) and loose.setdefault("op", op) != op:
                raise InvalidInput(f"invalid op {_shown(loose['op'])}: this route takes "
                                   f"{op}") from None
            raise InvalidInput(_explain(str(e), loose)) from None
        except msgspec.DecodeError as e:
            raise InvalidInput(_body_error(data, e)) from None
        except UnicodeDecodeError:
            raise InvalidInput(f"the body: {not_utf8(data)}") from None
    try:
        obj = _loose.decode(data)
    except (msgspec.DecodeError, RecursionError) as e:
        raise InvalidInput(_body_error(data, e)) from None
    except UnicodeDecodeError:
        raise InvalidInput(f"the body: {not_utf8(data)}") from None
    if not isinstance(obj, dict):
        raise InvalidInput(f"the body must be a JSON object, not {_shown(obj)}")
    check_unique_keys(data, obj, "the body")
    for option, name in extra.get("rename", {}).items():
        if option in obj:
            if name in obj:
                raise InvalidInput(f"give {option} or {name}, not both")
            obj[name] = obj.pop(option)
    for name, value in extra.get("set", {}).items():
        if name in obj and obj[name] != value:
            raise InvalidInput(f"invalid {name} {_shown(obj[name])}: the path says {value!r}")
        obj[name] = value
    if obj.setdefault("op", op) != op:
        raise InvalidInput(f"invalid op {_shown(obj['op'])}: this route takes {op}")
    return from_obj(obj)


def _body_error(data: bytes, e: Exception) -> str:
    """A request body's decoding error: where it stops being UTF-8, or the decoder's word."""
    bad = utf8_error(e, data)
    return f"the body: {bad}" if bad else f"invalid JSON: {e}"


class BlankLine(LedgerError):
    """A line holding only white space: nothing to do and no error. It travels where a line's
    error would, and answers `{"line": N}` (DESIGN: one result per input line)."""


def decode_lines(lines: list[bytes], first_line: int = 1
                 ) -> list[Command | InvalidInput | BlankLine]:
    """Every line (without its newline) as a command, a BlankLine or the error naming it (no
    line aborts the others): one result per line, blank ones included."""
    out: list[Command | InvalidInput | BlankLine] = []
    for n, line in enumerate(lines, start=first_line):
        if not line.strip():
            out.append(BlankLine("blank line"))
            continue
        try:
            out.append(from_json(line.rstrip(b"\r"), n))
        except InvalidInput as e:
            out.append(e)
    return out


def decode_document(data: bytes) -> list[Command | InvalidInput]:
    """A request body: a JSON array of command objects, or NDJSON (one object per line)."""
    stripped = data.lstrip(_BOM).lstrip()
    if not stripped.startswith(b"["):
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        return decode_lines(lines)
    whole = _whole_array(stripped)
    if whole is not None:
        return whole
    try:
        items = _raw_items.decode(stripped)
    except msgspec.DecodeError as e:
        raise InvalidInput(_body_error(stripped, e)) from None
    except RecursionError:
        raise InvalidInput("invalid JSON: nested too deep") from None
    out: list[Command | InvalidInput] = []
    for item in items:
        try:
            out.append(from_json(bytes(item)))
        except InvalidInput as e:
            out.append(e)
    return out


def _whole_array(data: bytes) -> list[Command | InvalidInput] | None:
    """A JSON array of commands decoded in one call, when every one of them is valid and no
    object gives a key twice (what `from_json` of each item answers then); None otherwise, and
    the items are decoded one by one, each error answered in place. The duplicate check is
    the colon count of `strict_json`, over the whole array: every key takes one colon, so as
    many colons as the objects' keys means no key twice, no nested object and no colon inside a
    string; anything else takes the item-by-item path."""
    try:
        commands = _all_commands.decode(data)
        objects = _loose.decode(data)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None
    if data.count(b":") != sum(map(len, objects)):
        return None
    out: list[Command | InvalidInput] = []
    try:
        for cmd in commands:
            out.append(validate(cmd))
    except InvalidInput:
        return None
    return out


def iter_ndjson(stream: Iterable[bytes]) -> Iterator[Command | InvalidInput]:
    """Lines of a stream decoded one by one (stdin: results may follow each batch)."""
    for n, raw in enumerate(stream, start=1):
        if not raw.strip():
            yield BlankLine("blank line")
            continue
        try:
            yield from_json(raw.rstrip(b"\r\n"), n)
        except InvalidInput as e:
            yield e


def from_arrow_rows(columns: dict[str, list[Any]], rows: Sequence[int]) -> list[Command | InvalidInput]:
    """Rows of a command table (one column per field; null = absent) as commands."""
    names = list(columns)
    out: list[Command | InvalidInput] = []
    for i in rows:
        obj = {k: v for k in names if (v := columns[k][i]) is not None}
        try:
            out.append(from_obj(obj))
        except InvalidInput as e:
            out.append(e)
    return out


# ----------------------------------------------------------------------------- messages
def _loose_value(data: bytes) -> Any:
    """The input decoded without a type, to name the bad value (None when that fails too: a
    line nested too deep for any decoder)."""
    try:
        return _loose.decode(data)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) or not _jsonable(value) else \
        msgspec.json.encode(value).decode()
    return text if len(text) <= 80 else text[:77] + "..."


def _jsonable(value: Any) -> bool:
    try:
        msgspec.json.encode(value)
        return True
    except (TypeError, msgspec.EncodeError):
        return False


def _explain(message: str, obj: Any) -> str:
    """msgspec's "Expected `int` >= 0 - at `$.offset`" as "invalid offset -1: expected ...",
    with the value taken from the loosely decoded input."""
    m = _AT_PATH.match(message)
    what = m.group("what") if m else message
    path = m.group("path") if m else None
    op = obj.get("op") if isinstance(obj, dict) else None
    if what.startswith("Object missing required field"):
        field = what.split("`")[1]
        if field == "op":
            return f"a command needs an op: use one of {', '.join(OPS)}"
        return f"{op} needs {field}"
    if what.startswith("Object contains unknown field"):
        field = what.split("`")[1]
        known = ", ".join(f for f in BY_OP[op].__struct_fields__) if op in BY_OP else ""
        return f"unknown field {field!r} in a {op} command" + (f": use {known}" if known else "")
    if path == ".op":
        return f"unknown op {_shown(op)}: use one of {', '.join(OPS)}"
    if path:
        value: Any = obj
        for part in re.findall(r"\.([A-Za-z_]+)|\[(\d+)\]", path):
            key, index = part
            try:
                value = value[key] if key else value[int(index)]
            except (KeyError, IndexError, TypeError):
                value = None
                break
        field = path.lstrip(".").replace("_", " ")
        return f"invalid {field} {_shown(value)}: {_plain_words(what)}"
    return _plain_words(what)


_TYPE_WORDS = {"int": "an integer", "str": "a string", "bool": "true or false", "null": "null",
               "object": "an object", "array": "an array", "float": "a number with a fraction",
               "int | str": "an integer or a string"}


def _plain_words(what: str) -> str:
    """msgspec's "Expected `int` >= 0" as "expected an integer >= 0"."""
    text = re.sub(r"`([^`]+)`", lambda m: _TYPE_WORDS.get(m.group(1), m.group(1)), what)
    return text[0].lower() + text[1:] if text else text
