"""offset-ledger's command line: a thin typer layer over `ledger.Ledger`.

Each command parses its options, calls one `Ledger` method and formats the result (the output
helpers are kept apart, below). Only this file knows typer; the ledger raises its own plain
exceptions, which `_LedgerCLI.main` turns into one line on stderr and an exit code:
2 for bad usage or input, 1 for a refusal by a rule, never a traceback.

Contract: with `--json` stdout holds exactly one JSON document (a list of objects unless said
otherwise), also when a rule refuses the command; messages for people go to stderr.
Spark (`compact`, `replay`, `audit`) is imported lazily inside its commands only: `--help`
never starts a JVM.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from ledger.errors import InvalidInput, LedgerError, RefusedError
from ledger.timeparse import iso, parse_duration, parse_time

if TYPE_CHECKING:
    from ledger import Ledger, ResetPlan

PROG = "offset-ledger"
DATA_DIR_ENV = "OFFSET_LEDGER_DATA_DIR"
DATA_DIR_DEFAULT = "offset-ledger-data"
DEBUG_ENV = "OFFSET_LEDGER_DEBUG"
EXIT_USAGE = 2
EXIT_REFUSED = 1
EXIT_INTERNAL = 3


# ====================================================================== error handling
def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _is_click_exception(e: BaseException) -> bool:
    """typer's (vendored or real) click exceptions, recognised without importing click."""
    return hasattr(e, "format_message") and hasattr(e, "exit_code") and hasattr(e, "show")


def _error(message: str) -> None:
    sys.stderr.write(f"Error: {_one_line(message)}\n")
    sys.stderr.flush()


def _bad_value(e: BaseException) -> str:
    """The value typer failed to convert (its pydantic cause knows it; the message may not)."""
    errors = getattr(e.__cause__, "errors", None)
    if not callable(errors):
        return ""
    try:
        value = errors()[0].get("input")
    except Exception:
        return ""
    return f" (got {value!r})" if isinstance(value, str) else ""


def run_guarded(main: Callable[..., Any], **kwargs: Any) -> int:
    """Run the click main in non-standalone mode; map every error to one line and an exit code."""
    try:
        rv = main(standalone_mode=False, **kwargs)
        return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
    except RefusedError as e:
        _error(str(e))
        return EXIT_REFUSED
    except LedgerError as e:
        _error(str(e))
        return e.exit_code
    except typer.Abort:
        _error("aborted")
        return EXIT_REFUSED
    except BrokenPipeError:
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_REFUSED
    except Exception as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # a group run without a command: its help
            sys.stdout.write(e.format_message() + "\n")  # type: ignore[attr-defined]
            return 0
        if _is_click_exception(e):
            ctx = getattr(e, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            _error(f"{e.format_message()}{_bad_value(e)}{hint}")  # type: ignore[attr-defined]
            return EXIT_USAGE
        storage = sys.modules.get("storage")
        if storage is not None and isinstance(e, storage.StorageError):
            _error(str(e))
            return EXIT_USAGE
        if isinstance(e, OSError):
            where = f" ({e.filename})" if getattr(e, "filename", None) else ""
            _error(f"{e.strerror or e}{where}")
            return EXIT_USAGE
        if os.environ.get(DEBUG_ENV):
            raise
        _error(f"internal error: {type(e).__name__}: {e} (set {DEBUG_ENV}=1 for the traceback)")
        return EXIT_INTERNAL


class _LedgerCLI(TyperGroup):
    """The top-level group: runs non-standalone so that every error becomes one line."""

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None,
        complete_var: str | None = None, standalone_mode: bool = True, **extra: Any,
    ) -> Any:
        code = run_guarded(super().main, args=args, prog_name=prog_name or PROG,
                           complete_var=complete_var, **extra)
        sys.stdout.flush()
        if standalone_mode:
            sys.exit(code)
        return code


# ====================================================================== output helpers
def _json_default(value: Any) -> Any:
    """SQL results may hold DuckDB's HUGEINT sums (Decimal), dates and blobs."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def emit_json(doc: Any) -> None:
    """Exactly one JSON document on stdout."""
    sys.stdout.write(json.dumps(doc, default=_json_default, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def note(message: str) -> None:
    """A message for people: stderr, never stdout."""
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A plain aligned text table (numbers right-aligned), readable when piped."""
    if not rows:
        return ""
    cols = list(columns) if columns is not None else list(rows[0].keys())
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    numeric = [all(isinstance(r.get(c), (int, float, Decimal)) or r.get(c) is None for r in rows)
               and not all(isinstance(r.get(c), bool) for r in rows) for c in cols]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]

    def line(values: Sequence[str]) -> str:
        out = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(out).rstrip()

    return "\n".join([line(cols), line(["-" * w for w in widths])]
                     + [line(r) for r in cells]) + "\n"


def emit(doc: Any, as_json: bool, columns: Sequence[str] | None = None,
         empty: str = "no rows") -> None:
    """A list of rows (or one object) as JSON or as a table."""
    if as_json:
        emit_json(doc)
        return
    if isinstance(doc, dict) and len(doc) > 5:  # a wide single object reads better as lines
        width = max(len(k) for k in doc)
        sys.stdout.write("".join(f"{k.ljust(width)}  {_cell(v)}\n" for k, v in doc.items()))
        sys.stdout.flush()
        return
    rows = doc if isinstance(doc, list) else [doc]
    if not rows:
        note(empty)
        return
    sys.stdout.write(render_table(rows, columns))
    sys.stdout.flush()


def with_iso(row: dict[str, Any], *names: str) -> dict[str, Any]:
    """Epoch-ms fields shown as ISO-8601 UTC."""
    for n in names:
        if n in row:
            row[n] = iso(row[n])
    return row


def event_row(e: dict[str, Any]) -> dict[str, Any]:
    """An event with ISO times plus `ts_ms` / `store_ts_ms`."""
    return {
        "seq": e["seq"], "ts": iso(e["ts"]), "ts_ms": e["ts"], "kind": e["kind"],
        "consumer_group": e["consumer_group"], "topic": e["topic"], "queue_id": e["queue_id"],
        "offset": e["offset"], "prev_offset": e["prev_offset"], "generation": e["generation"],
        "client_id": e["client_id"], "actor": e["actor"], "store_ts": iso(e["store_ts"]),
        "store_ts_ms": e["store_ts"], "detail": e["detail"],
    }


HISTORY_COLUMNS = ("seq", "ts", "kind", "consumer_group", "topic", "queue_id", "prev_offset",
                   "offset", "generation", "client_id", "actor", "detail")
PLAN_COLUMNS = ("consumer_group", "topic", "queue_id", "from_offset", "to_offset")


def sql_text(table: Any, fmt: str) -> str:
    """A pyarrow Table as csv or as a text table."""
    rows = table.to_pylist()
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(table.column_names)
        for r in rows:
            w.writerow(["" if v is None else v for v in r.values()])
        return buf.getvalue()
    return render_table(rows, table.column_names)


@contextlib.contextmanager
def progress_bar(description: str, total: float | None, enabled: bool
                 ) -> Iterator[Callable[[float], None]]:
    """A rich progress bar on stderr when it is a terminal; a no-op otherwise."""
    if not enabled or not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as p:
        task = p.add_task(description, total=total)
        yield lambda n: p.advance(task, n)


# ====================================================================== input helpers
def data_dir(ctx: typer.Context) -> Path:
    root = ctx.obj if isinstance(ctx.obj, Path) else None
    return root if root is not None else Path(os.environ.get(DATA_DIR_ENV) or DATA_DIR_DEFAULT)


@contextlib.contextmanager
def open_writer(ctx: typer.Context, **settings: Any) -> Iterator[Ledger]:
    from ledger import Ledger

    with Ledger.open(data_dir(ctx), **settings) as led:
        yield led


@contextlib.contextmanager
def open_reader(ctx: typer.Context) -> Iterator[Ledger]:
    """Reads are a read-only snapshot (the manifest's segments, the newest checkpoint and the
    intact tail, with an in-memory view): they never take the writer lock, so they work while
    another process writes and never make a writer that starts meanwhile fail. They never
    create."""
    from ledger import Ledger

    root = data_dir(ctx)
    if not (root / "log").exists():
        raise InvalidInput(
            f"no ledger at {root}: nothing written yet (check --data-dir or ${DATA_DIR_ENV})")
    with Ledger.open(root, readonly=True) as led:
        yield led


def time_arg(text: str, what: str) -> int | None:
    """Epoch ms of a user's time; None for `now` (the ledger's clock decides)."""
    if text.strip() == "now":
        return None
    try:
        return parse_time(text)
    except InvalidInput as e:
        raise InvalidInput(f"{what}: {e}") from None


def duration_arg(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except InvalidInput as e:
        raise InvalidInput(f"{what}: {e}") from None


def read_text(path: str, what: str) -> str:
    try:
        if path == "-":
            return sys.stdin.read()
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"{what} {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"cannot read {what} {path!r}: {e}") from None


def default_actor() -> str:
    """$USER, reduced to the name alphabet (an actor is a ledger name)."""
    user = os.environ.get("USER") or os.environ.get("USERNAME") or "operator"
    return re.sub(r"[^A-Za-z0-9._\-%|]", "_", user)[:249] or "operator"


def source_name(kind: str, path: str, given: str | None) -> str:
    if given is not None:
        return given
    name = re.sub(r"[^A-Za-z0-9._\-%|]", "_", Path(path).name if path != "-" else "stdin")
    return f"{kind}:{name}"[:249]


def parse_scope_topics(topics: Sequence[str]) -> tuple[tuple[str, tuple[int, ...] | None], ...]:
    """`T` (every queue of T) or `T:0,2` (queues 0 and 2), merged per topic."""
    merged: dict[str, set[int] | None] = {}
    for spec in topics:
        name, _, queues = spec.partition(":")
        if not _:
            merged[name] = None
            continue
        try:
            ids = {int(q) for q in queues.split(",")}
        except ValueError:
            raise InvalidInput(
                f"invalid --topic {spec!r}: queue ids must be integers, like {name}:0,2") from None
        if any(i < 0 for i in ids):
            raise InvalidInput(f"invalid --topic {spec!r}: queue ids must not be negative")
        if name in merged and merged[name] is None:
            continue
        merged[name] = (merged.get(name) or set()) | ids
    return tuple((t, None if q is None else tuple(sorted(q))) for t, q in merged.items())


# ====================================================================== the app
app = typer.Typer(
    cls=_LedgerCLI, name=PROG, rich_markup_mode=None, add_completion=False,
    no_args_is_help=True, pretty_exceptions_enable=False,
    help="An event-sourced ledger of message-queue consumer offsets (RocketMQ / Kafka style).\n\n"
         "Times: ISO-8601 (2026-11-20T10:00:00, no zone = UTC), epoch ms, or now. "
         "Durations: ISO-8601 (PT1M, P7D). Exit codes: 0 ok, 1 refused by a rule, "
         "2 bad usage or input.",
)
queue_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                        help="Queues: append messages (MaxOffset), truncate (MinOffset), list.")
group_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                        help="Consumer groups: settings, list, delete.")
sync_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                       help="Overwrite offsets from a broker snapshot or a Kafka CSV.")
app.add_typer(queue_app, name="queue")
app.add_typer(group_app, name="group")
app.add_typer(sync_app, name="sync")

JSON_HELP = "Print one JSON document on stdout (and nothing else there)."


def json_opt() -> Any:
    return typer.Option(False, "--json", help=JSON_HELP)


@app.callback()
def main_options(
    ctx: typer.Context,
    data_dir_opt: Path = typer.Option(
        None, "--data-dir", envvar=DATA_DIR_ENV, metavar="DIR",
        help=f"Data directory (default ${DATA_DIR_ENV}, else ./{DATA_DIR_DEFAULT}); "
             "created on first write."),
) -> None:
    """offset-ledger: who moved which consumer offset, when, from what to what."""
    ctx.obj = data_dir_opt


# ---------------------------------------------------------------------- init
@app.command()
def init(
    ctx: typer.Context,
    segment_events: int = typer.Option(None, "--segment-events", metavar="N",
                                       help="Seal a log segment at N events."),
    segment_bytes: int = typer.Option(None, "--segment-bytes", metavar="B",
                                      help="Seal a log segment at B bytes."),
    segment_age: str = typer.Option(None, "--segment-age", metavar="DURATION",
                                    help="Seal a log segment at this age (PT1H)."),
    durability: str = typer.Option(None, "--durability", metavar="always|batch|none",
                                   help="fsync every append (always), per batch, or never."),
    as_json: bool = json_opt(),
) -> None:
    """Create or re-configure a data directory; the settings persist for later commands."""
    import msgspec

    settings = {"segment_events_max": segment_events, "segment_bytes_max": segment_bytes,
                "segment_age_ms_max": duration_arg(segment_age, "--segment-age"),
                "durability": durability}
    with open_writer(ctx, **settings) as led:
        out = {"data_dir": str(led.root), **msgspec.structs.asdict(led.settings)}
    emit(out, as_json)
    note(f"ledger ready at {out['data_dir']}")


# ---------------------------------------------------------------------- queue
QUEUE_COLUMNS = ("topic", "queue_id", "min_offset", "max_offset")


@queue_app.command("append")
def queue_append(
    ctx: typer.Context,
    topic: str = typer.Option(..., "--topic", help="Topic name."),
    queue: int = typer.Option(..., "--queue", help="Queue id (Kafka: partition)."),
    count: int = typer.Option(1, "--count", metavar="N", help="Messages appended."),
    store_time: str = typer.Option(None, "--store-time", metavar="TIME",
                                   help="Store time of the messages (default now)."),
    as_json: bool = json_opt(),
) -> None:
    """Append N messages to a queue (advances MaxOffset)."""
    store_ts = time_arg(store_time, "--store-time") if store_time is not None else None
    with open_writer(ctx) as led:
        out = led.queue_append(topic, queue, count, store_ts)
    emit(out, as_json, QUEUE_COLUMNS)


@queue_app.command("truncate")
def queue_truncate(
    ctx: typer.Context,
    topic: str = typer.Option(..., "--topic", help="Topic name."),
    queue: int = typer.Option(..., "--queue", help="Queue id."),
    min_offset: int = typer.Option(..., "--min-offset", metavar="N",
                                   help="New MinOffset (retention deleted the messages below)."),
    as_json: bool = json_opt(),
) -> None:
    """Advance a queue's MinOffset, as broker retention does."""
    with open_writer(ctx) as led:
        out = led.queue_truncate(topic, queue, min_offset)
    emit(out, as_json, QUEUE_COLUMNS)


@queue_app.command("list")
def queue_list(
    ctx: typer.Context,
    topic: str = typer.Option(None, "--topic", help="Only this topic."),
    as_json: bool = json_opt(),
) -> None:
    """List queues with their MinOffset and MaxOffset."""
    with open_reader(ctx) as led:
        rows = led.queues(topic)
    emit(rows, as_json, QUEUE_COLUMNS, empty="no queues")


# ---------------------------------------------------------------------- group
@group_app.command("set")
def group_set(
    ctx: typer.Context,
    group: str = typer.Option(..., "--group", help="Consumer group."),
    mode: str = typer.Option(None, "--mode", metavar="clustering|broadcast",
                             help="Clustering (one offset per queue) or broadcast (per client)."),
    initial: str = typer.Option(None, "--initial", metavar="latest|earliest|timestamp:TIME",
                                help="Where a group with no offset starts."),
    client_timeout: str = typer.Option(None, "--client-timeout", metavar="DURATION",
                                       help="When a silent client stops counting (PT2M)."),
    as_json: bool = json_opt(),
) -> None:
    """Create a group or change its settings (recorded as a group_config event)."""
    if initial is not None and initial.startswith("timestamp:"):
        ts = time_arg(initial.split(":", 1)[1], "--initial timestamp")
        initial = f"timestamp:{ts if ts is not None else int(time.time() * 1000)}"
    timeout_ms = duration_arg(client_timeout, "--client-timeout")
    with open_writer(ctx) as led:
        out = led.group_set(group, mode=mode, initial=initial, client_timeout_ms=timeout_ms,
                            actor=default_actor())
    emit(out, as_json)


@group_app.command("list")
def group_list(ctx: typer.Context, as_json: bool = json_opt()) -> None:
    """List groups with their mode, queue count, total lag and last update."""
    with open_reader(ctx) as led:
        rows = [with_iso(r, "last_update") for r in led.groups()]
    emit(rows, as_json, ("consumer_group", "mode", "queues", "lag", "last_update"),
         empty="no groups")


@group_app.command("delete")
def group_delete(
    ctx: typer.Context,
    group: str = typer.Option(..., "--group", help="Consumer group."),
    as_json: bool = json_opt(),
) -> None:
    """Remove a group's offsets (a delete event per queue), active clients or not."""
    with open_writer(ctx) as led:
        out = led.group_delete(group, actor=default_actor())
    emit(out, as_json)


# ---------------------------------------------------------------------- pull / commit
@app.command()
def pull(
    ctx: typer.Context,
    group: str = typer.Option(..., "--group", help="Consumer group."),
    topic: str = typer.Option(..., "--topic", help="Topic name."),
    queue: int = typer.Option(..., "--queue", help="Queue id."),
    client: str = typer.Option(None, "--client", help="Consumer client id."),
    max_count: int = typer.Option(32, "--max", metavar="N", help="Messages at most."),
    as_json: bool = json_opt(),
) -> None:
    """Pull: where the client should read next, with the generation to commit under."""
    with open_writer(ctx) as led:
        r = led.pull(group, topic, queue, client=client, max_count=max_count)
    emit({"next_offset": r.next_offset, "generation": r.generation, "count": r.count}, as_json)


@app.command()
def commit(
    ctx: typer.Context,
    group: str = typer.Option(..., "--group", help="Consumer group."),
    topic: str = typer.Option(..., "--topic", help="Topic name."),
    queue: int = typer.Option(..., "--queue", help="Queue id."),
    offset: int = typer.Option(..., "--offset", metavar="N",
                               help="Next offset to consume (committed offset)."),
    client: str = typer.Option(None, "--client", help="Consumer client id."),
    generation: int = typer.Option(None, "--generation", metavar="K",
                                   help="Generation of the pull (fences commits from before "
                                        "a reset)."),
    as_json: bool = json_opt(),
) -> None:
    """Commit an offset; exit 1 when a rule refuses it (stale, fenced, invalid)."""
    with open_writer(ctx) as led:
        r = led.commit(group, topic, queue, offset, client=client, generation=generation)
    emit({"accepted": r.accepted, "reason": r.reason, "offset": r.offset}, as_json)
    if not r.accepted:
        note(f"commit refused: {r.reason} (the committed offset stays {_cell(r.offset)})")
        raise typer.Exit(EXIT_REFUSED)


# ---------------------------------------------------------------------- reset
SCENARIO_FLAGS = ("--to-offset", "--to-datetime", "--to-earliest", "--to-latest", "--to-current",
                  "--shift-by", "--by-duration", "--to-state-at", "--from-file")


def plan_doc(plan: ResetPlan, executed: bool, **extra: Any) -> dict[str, Any]:
    """reset --json: {"executed", "plan"} plus the message counts and the queues left out."""
    return {"executed": executed, "plan": plan.rows(),
            "messages_replayed": plan.messages_replayed,
            "messages_skipped": plan.messages_skipped,
            "skipped_queues": [{"topic": t, "queue_id": q} for t, q in plan.skipped], **extra}


def emit_plan(plan: ResetPlan, executed: bool, as_json: bool, export: bool) -> None:
    rows = plan.rows()
    replayed, skipped = plan.messages_replayed, plan.messages_skipped
    if export:
        from ledger.importers import to_kafka_csv

        sys.stdout.write(to_kafka_csv([(r["topic"], r["queue_id"], r["to_offset"]) for r in rows]))
    elif as_json:
        emit_json(plan_doc(plan, executed))
    elif rows:
        sys.stdout.write(render_table(rows, PLAN_COLUMNS))
    if not rows:
        note(f"nothing to reset: group {plan.group!r} has no offsets in scope")
    note(f"{len(rows)} queue(s): {replayed} message(s) to replay, {skipped} to skip")


@app.command()
def reset(
    ctx: typer.Context,
    group: str = typer.Option(..., "--group", help="Consumer group."),
    topic: list[str] = typer.Option(None, "--topic", metavar="T[:Q,Q...]",
                                    help="Topic, or topic:0,2 for some queues; repeatable."),
    all_topics: bool = typer.Option(False, "--all-topics",
                                    help="Every queue where the group has an offset."),
    to_offset: int = typer.Option(None, "--to-offset", metavar="N", help="Reset to offset N."),
    to_datetime: str = typer.Option(None, "--to-datetime", metavar="TIME",
                                    help="First message stored at or after TIME."),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="Reset to MinOffset."),
    to_latest: bool = typer.Option(False, "--to-latest", help="Reset to MaxOffset."),
    to_current: bool = typer.Option(False, "--to-current", help="Reset to the committed offset."),
    shift_by: int = typer.Option(None, "--shift-by", metavar="N",
                                 help="Move the committed offset by N (negative: back)."),
    by_duration: str = typer.Option(None, "--by-duration", metavar="DURATION",
                                    help="First message stored at or after now - DURATION."),
    to_state_at: str = typer.Option(None, "--to-state-at", metavar="TIME",
                                    help="The group's own committed offsets at ledger time TIME."),
    from_file: str = typer.Option(None, "--from-file", metavar="CSV",
                                  help="Kafka CSV (topic,partition,offset or "
                                       "group,topic,partition,offset); the file is the scope."),
    backward_only: bool = typer.Option(False, "--backward-only",
                                       help="Never move an offset forward."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only plan (the default)."),
    execute: bool = typer.Option(False, "--execute", help="Apply the plan."),
    force: bool = typer.Option(False, "--force",
                               help="Lift the reset policy's rewind limits (reset-policy.toml)."),
    actor: str = typer.Option(None, "--actor", help="Who resets (default $USER)."),
    reason: str = typer.Option(None, "--reason", help="Why, for auditors."),
    export: bool = typer.Option(False, "--export",
                                help="Print the plan as Kafka CSV (topic,partition,offset)."),
    as_json: bool = json_opt(),
) -> None:
    """Reset a group's offsets (Kafka --reset-offsets, RocketMQ resetOffsetByTime); a dry run
    unless --execute."""
    from ledger.commands import scenario_from
    from ledger.reset import Scenario, Scope

    if dry_run and execute:
        raise InvalidInput("use either --dry-run or --execute, not both")
    if export and as_json:
        raise InvalidInput("use either --export or --json, not both")
    values = {"to_offset": to_offset, "to_datetime": to_datetime, "to_earliest": to_earliest,
              "to_latest": to_latest, "to_current": to_current, "shift_by": shift_by,
              "by_duration": by_duration, "to_state_at": to_state_at, "from_file": from_file}
    given = [f"--{k.replace('_', '-')}" for k, v in values.items() if v not in (None, False)]
    if len(given) != 1:
        raise InvalidInput(
            f"reset needs exactly one scenario of {', '.join(SCENARIO_FLAGS)}; "
            f"got {', '.join(given) if given else 'none'}")
    targets = scope = None
    if from_file is not None:
        if topic or all_topics:
            raise InvalidInput("--from-file is the scope: drop --topic/--all-topics")
        from ledger.importers import parse_kafka_csv

        rows = parse_kafka_csv(read_text(from_file, "--from-file"), group)
        targets = {(g, t, q): o for g, t, q, o in rows}
        others = sorted({g for g, *_ in rows if g != group})
        if others:
            note(f"ignoring rows for other groups: {', '.join(others)}")
    elif all_topics and topic:
        raise InvalidInput("use either --topic or --all-topics, not both")
    elif not all_topics and not topic:
        raise InvalidInput("reset needs a scope: --topic T, --topic T:0,1 or --all-topics")
    else:
        scope = Scope(all_topics=True) if all_topics else Scope(topics=parse_scope_topics(topic))
    opener = open_writer if execute else open_reader
    with opener(ctx) as led:
        if from_file is not None:
            scenario = Scenario("from_file")
        else:
            key = given[0][2:].replace("-", "_")
            scenario = scenario_from({key: values[key]}, led.now_ms())
        try:
            plan = led.reset(group, scenario, scope=scope, targets=targets,
                             backward_only=backward_only, actor=actor or default_actor(),
                             reason=reason)
        except RefusedError as e:
            if as_json:
                emit_json({"executed": False, "plan": [], "refused": e.reason, "error": str(e)})
            raise
        if plan.skipped:
            names = ", ".join(f"{t}:{q}" for t, q in plan.skipped)
            note(f"left out {len(plan.skipped)} queue(s) where group {group!r} had no offset "
                 f"at {to_state_at}: {names}")
        if execute and plan.items:
            try:
                plan.execute(force=force)
            except RefusedError as e:  # the policy refused it (and recorded reset_refused)
                if as_json:
                    emit_json(plan_doc(plan, False, refused=e.reason, error=str(e)))
                raise
    emit_plan(plan, execute, as_json, export)
    if execute:
        note(f"reset executed by {plan.actor}: the next pull of each queue starts at its "
             "new offset; commits from before the reset are fenced")
    else:
        note("dry run: nothing changed (add --execute to apply)")


# ---------------------------------------------------------------------- reads
PROGRESS_COLUMNS = ("topic", "queue_id", "min_offset", "max_offset", "committed_offset",
                    "pulled_offset", "lag", "lag_ms", "inflight", "ready", "generation",
                    "last_update")


@app.command()
def progress(
    ctx: typer.Context,
    group: str = typer.Option(..., "--group", help="Consumer group."),
    topic: str = typer.Option(None, "--topic", help="Only this topic."),
    as_json: bool = json_opt(),
) -> None:
    """Per queue: bounds, committed and pulled offsets, lag, inflight, ready, generation."""
    with open_reader(ctx) as led:
        rows = [with_iso(r, "last_update") for r in led.progress(group, topic)]
    emit(rows, as_json, PROGRESS_COLUMNS, empty=f"no offsets for group {group!r}")


LAG_COLUMNS = ("consumer_group", "group_status", "topic", "queue_id", "status",
               "committed_offset", "max_offset", "lag", "lag_ms", "complete")


def lag_rows(doc: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lag document as a table: a row per queue (a group without queues: one row)."""
    rows = []
    for g in doc:
        head = {"consumer_group": g["consumer_group"], "group_status": g["status"]}
        rows += [{**head, **{c: q[c] for c in LAG_COLUMNS[2:]}} for q in g["queues"]] or [head]
    return rows


@app.command()
def lag(
    ctx: typer.Context,
    group: str = typer.Option(None, "--group", help="Only this group (NOTFOUND if it has no "
                                                     "offsets)."),
    topic: str = typer.Option(None, "--topic", metavar="T|T:0,2",
                              help="Only this topic (or these queues of it)."),
    at_: str = typer.Option(None, "--at", metavar="TIME",
                            help="Judge as of this ledger time (default now)."),
    window: int = typer.Option(10, "--window", metavar="N",
                               help="Commits per window (Burrow's intervals)."),
    allowed_lag: int = typer.Option(0, "--allowed-lag", metavar="N",
                                    help="A lag up to N messages is OK."),
    since: str = typer.Option(None, "--since", metavar="TIME",
                              help="With --until and --every: the lag series instead."),
    until: str = typer.Option(None, "--until", metavar="TIME", help="End of the series."),
    every: str = typer.Option(None, "--every", metavar="DURATION",
                              help="Step of the series (ISO-8601, PT1M)."),
    as_json: bool = json_opt(),
) -> None:
    """Lag health (Burrow's OK/WARN/STOP/STALL/REWIND) and exact time lag, now or at any time;
    or the lag and time lag series of each queue (--since --until --every)."""
    series = (since, until, every)
    if any(v is not None for v in series):
        if any(v is None for v in series) or at_ is not None:
            raise InvalidInput("a lag series needs all of --since, --until and --every "
                               "(and no --at)")
        _lag_series(ctx, group, topic, since, until, every, as_json)  # type: ignore[arg-type]
        return
    at_ms = time_arg(at_, "--at") if at_ is not None else None
    with open_reader(ctx) as led:
        doc = led.lag(group=group, topic=topic, at_ms=at_ms, window=window,
                      allowed_lag=allowed_lag)
    if as_json:
        emit_json(doc)
    else:
        emit(lag_rows(doc), False, LAG_COLUMNS, empty="no groups with offsets")


SERIES_COLUMNS = ("consumer_group", "topic", "queue_id", "ts", "committed_offset", "max_offset",
                  "lag", "lag_ms")


def _lag_series(ctx: typer.Context, group: str | None, topic: str | None, since: str,
                until: str, every: str, as_json: bool) -> None:
    since_ms, until_ms = time_arg(since, "--since"), time_arg(until, "--until")
    every_ms = duration_arg(every, "--every")
    with open_reader(ctx) as led:
        now = led.now_ms()
        doc = led.lag_series(since_ms=now if since_ms is None else since_ms,
                             until_ms=now if until_ms is None else until_ms,
                             every_ms=every_ms, group=group, topic=topic)  # type: ignore[arg-type]
    if as_json:
        emit_json(doc)
        return
    rows = [with_iso({"consumer_group": q["consumer_group"], "topic": q["topic"],
                      "queue_id": q["queue_id"], **point}, "ts")
            for q in doc for point in q["series"]]
    emit(rows, False, SERIES_COLUMNS, empty="no offsets in that span")


@app.command()
def history(
    ctx: typer.Context,
    group: str = typer.Option(None, "--group", help="Consumer group."),
    topic: str = typer.Option(None, "--topic", help="Topic name."),
    queue: int = typer.Option(None, "--queue", help="Queue id."),
    kind: str = typer.Option(None, "--kind", metavar="K", help="Event kind (commit, reset, ...)."),
    since: str = typer.Option(None, "--since", metavar="TIME", help="Events at or after TIME."),
    until: str = typer.Option(None, "--until", metavar="TIME", help="Events at or before TIME."),
    limit: int = typer.Option(None, "--limit", metavar="N", help="Keep the newest N."),
    as_json: bool = json_opt(),
) -> None:
    """Events (who moved which offset, when, from what to what), oldest first."""
    from ledger.events import KINDS

    if kind is not None and kind not in KINDS:
        raise InvalidInput(f"invalid kind {kind!r}: use one of {', '.join(KINDS)}")
    if limit is not None and limit < 0:
        raise InvalidInput(f"invalid --limit {limit}: must not be negative")
    since_ts = time_arg(since, "--since") if since is not None else None
    until_ts = time_arg(until, "--until") if until is not None else None
    with open_reader(ctx) as led:
        now = led.now_ms()
        table = led.history(
            group=group, topic=topic, queue_id=queue, kind=kind,
            since_ms=(now if since_ts is None else since_ts) if since is not None else None,
            until_ms=(now if until_ts is None else until_ts) if until is not None else None,
            limit=limit)
        rows = [event_row(e) for e in table.to_pylist()]
    emit(rows, as_json, HISTORY_COLUMNS, empty="no events")


@app.command()
def at(
    ctx: typer.Context,
    when: str = typer.Argument(..., metavar="TIME", help="Ledger time (ISO-8601, epoch ms, now)."),
    group: str = typer.Option(None, "--group", help="Only this group."),
    as_json: bool = json_opt(),
) -> None:
    """Committed offsets as they were at ledger time TIME."""
    ts = time_arg(when, "TIME")
    with open_reader(ctx) as led:
        table = led.state_at(ts=led.now_ms() if ts is None else ts, group=group)
    cols = ("consumer_group", "topic", "queue_id", "committed_offset", "generation")
    rows = [{c: r.get(c) for c in cols} for r in table.to_pylist()]
    emit(rows, as_json, cols, empty="no offsets at that time")


@app.command()
def lookup(
    ctx: typer.Context,
    topic: str = typer.Option(..., "--topic", help="Topic name."),
    datetime_: str = typer.Option(..., "--datetime", metavar="TIME", help="Message store time."),
    as_json: bool = json_opt(),
) -> None:
    """Per queue: the first message stored at or after TIME (Kafka ListOffsets)."""
    ts = time_arg(datetime_, "--datetime")
    with open_reader(ctx) as led:
        rows = led.offsets_for_time(topic, led.now_ms() if ts is None else ts)
    emit(rows, as_json, ("topic", "queue_id", "offset"), empty=f"no queues of topic {topic!r}")


@app.command()
def sql(
    ctx: typer.Context,
    query: str = typer.Argument(..., metavar="QUERY",
                                help="One read-only query over events, offsets, queues, "
                                     "progress, groups."),
    fmt: str = typer.Option("table", "--format", metavar="table|csv|json",
                            help="Output format."),
    as_json: bool = json_opt(),
) -> None:
    """Read-only DuckDB SQL over the ledger's views."""
    if fmt not in ("table", "csv", "json"):
        raise InvalidInput(f"invalid --format {fmt!r}: use table, csv or json")
    with open_reader(ctx) as led:
        table = led.sql(query)
    if as_json or fmt == "json":
        emit_json(table.to_pylist())
    elif table.num_rows == 0 and fmt == "table":
        note("no rows")
    else:
        sys.stdout.write(sql_text(table, fmt))


@app.command()
def export(
    ctx: typer.Context,
    group: str = typer.Option(..., "--group", help="Consumer group."),
    as_json: bool = json_opt(),
) -> None:
    """The group's committed offsets as Kafka reset CSV (re-importable with reset --from-file)."""
    with open_reader(ctx) as led:
        text = led.export_csv(group)
    if as_json:
        rows = []
        for line in text.splitlines():
            t, q, o = line.split(",")
            rows.append({"consumer_group": group, "topic": t, "queue_id": int(q),
                         "offset": int(o)})
        emit_json(rows)
    else:
        sys.stdout.write(text)
        if not text:
            note(f"no offsets for group {group!r}")


# ---------------------------------------------------------------------- sync
SYNC_COLUMNS = ("consumer_group", "topic", "queue_id", "from_offset", "to_offset")


def _run_sync(ctx: typer.Context, rows: Sequence[tuple[str, str, int, int]], source: str,
              broadcast: Sequence[str], as_json: bool, path: str) -> None:
    with progress_bar(f"sync {len(rows)} offsets", 1, not as_json) as advance, \
            open_writer(ctx) as led:
        changes = led.sync(rows, source=source, broadcast_groups=broadcast)
        advance(1)
    emit(changes, as_json, SYNC_COLUMNS, empty="no offsets changed")
    note(f"synced {len(rows)} offset(s) from {path} as {source}: {len(changes)} changed, "
         f"{len(rows) - len(changes)} unchanged")


@sync_app.command("rocketmq")
def sync_rocketmq(
    ctx: typer.Context,
    file: str = typer.Argument(..., metavar="FILE", help="A broker's consumerOffset.json."),
    source: str = typer.Option(None, "--source", metavar="NAME",
                               help="Where it came from (recorded as actor sync:NAME)."),
    as_json: bool = json_opt(),
) -> None:
    """Overwrite offsets from a RocketMQ broker's consumerOffset.json (fastjson, as written)."""
    from ledger.importers import parse_rocketmq_offsets

    snap = parse_rocketmq_offsets(read_text(file, "file"))
    _run_sync(ctx, snap.rows, source_name("rocketmq", file, source), snap.broadcast_groups,
              as_json, file)


@sync_app.command("kafka-csv")
def sync_kafka_csv(
    ctx: typer.Context,
    file: str = typer.Argument(..., metavar="FILE",
                               help="topic,partition,offset or group,topic,partition,offset."),
    group: str = typer.Option(None, "--group",
                              help="Group of rows without one (topic,partition,offset)."),
    source: str = typer.Option(None, "--source", metavar="NAME",
                               help="Where it came from (recorded as actor sync:NAME)."),
    as_json: bool = json_opt(),
) -> None:
    """Overwrite offsets from a Kafka reset-offsets CSV."""
    from ledger.importers import parse_kafka_csv

    rows = parse_kafka_csv(read_text(file, "file"), group)
    _run_sync(ctx, rows, source_name("kafka-csv", file, source), (), as_json, file)


# ---------------------------------------------------------------------- apply
def ndjson_commands(stream: Iterable[bytes], on_batch_boundary: Callable[[], None],
                    on_bytes: Callable[[float], None]) -> Iterator[Any]:
    """Decoded lines; an undecodable line becomes an InvalidInput naming it. The ledger pulls the
    next line only after yielding the results it has, so each pull is a batch boundary."""
    import msgspec

    decoder = msgspec.json.Decoder()
    for line_no, raw in enumerate(stream, start=1):
        on_batch_boundary()
        on_bytes(len(raw))
        text = raw.strip()
        if not text:
            yield InvalidInput(f"line {line_no}: empty line")
            continue
        try:
            yield decoder.decode(text)
        except msgspec.DecodeError as e:
            yield InvalidInput(f"line {line_no}: invalid JSON: {e}")
    on_batch_boundary()


@app.command()
def apply(
    ctx: typer.Context,
    file: str = typer.Argument("-", metavar="[FILE | -]",
                               help="NDJSON commands, one per line (- or none: stdin); or a "
                                    "Parquet file (*.parquet) with a column per field, null = "
                                    "absent, which folds column-wise."),
    as_json: bool = json_opt(),
) -> None:
    """Apply NDJSON commands in batches; one JSON result per input line on stdout, always."""
    if file != "-" and file.endswith(".parquet"):
        _apply_parquet(ctx, Path(file), as_json)
        return
    if file == "-":
        stream: Any = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else sys.stdin
        total = None
    else:
        path = Path(file)
        if not path.is_file():
            raise InvalidInput(f"apply file {file!r} does not exist")
        stream = path.open("rb")
        total = path.stat().st_size
    out = sys.stdout
    dirty = [False]

    def boundary() -> None:
        if dirty[0]:
            out.flush()
            dirty[0] = False

    import msgspec

    encode = msgspec.json.Encoder(enc_hook=_json_default).encode
    counts = {"lines": 0, "errors": 0}
    try:
        with progress_bar("apply", total, not as_json) as advance, open_writer(ctx) as led:
            for result in led.apply(ndjson_commands(stream, boundary, advance)):
                out.write(encode(result).decode() + "\n")
                dirty[0] = True
                counts["lines"] += 1
                counts["errors"] += "error" in result
            boundary()
    finally:
        if file != "-":
            stream.close()
    if not as_json:
        note(f"applied {counts['lines']} line(s), {counts['errors']} with an error")


def _apply_parquet(ctx: typer.Context, path: Path, as_json: bool) -> None:
    """`apply` of a Parquet command table: the column-wise path, results as JSON lines."""
    import msgspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise InvalidInput(f"apply file {str(path)!r} does not exist")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise InvalidInput(f"unreadable Parquet file {str(path)!r}: {str(e).splitlines()[0]}") from None
    encode = msgspec.json.Encoder(enc_hook=_json_default).encode
    out = sys.stdout
    lines = errors = 0
    with progress_bar("apply", table.num_rows, not as_json) as advance, open_writer(ctx) as led:
        for result in led.apply(table):
            out.write(encode(result).decode() + "\n")
            lines += 1
            errors += "error" in result
            if lines % 4096 == 0:
                advance(4096)
                out.flush()
        out.flush()
    if not as_json:
        note(f"applied {lines} line(s), {errors} with an error")


# ---------------------------------------------------------------------- maintenance
@app.command()
def retention(
    ctx: typer.Context,
    offsets_retention: str = typer.Option(
        None, "--offsets-retention", metavar="DURATION",
        help="Expire offsets of groups idle this long (default P7D or the ledger's setting)."),
    log_retention: str = typer.Option(
        None, "--log-retention", metavar="DURATION",
        help="Delete log segments older than this, once a checkpoint covers them."),
    as_json: bool = json_opt(),
) -> None:
    """Expire idle offsets and retire old log segments."""
    off_ms = duration_arg(offsets_retention, "--offsets-retention")
    log_ms = duration_arg(log_retention, "--log-retention")
    with open_writer(ctx) as led:
        out = led.retention(offsets_retention_ms=off_ms, log_retention_ms=log_ms)
    emit(out, as_json)


@app.command()
def rebuild(ctx: typer.Context, as_json: bool = json_opt()) -> None:
    """Recreate the DuckDB view from the newest checkpoint plus the log."""
    with open_writer(ctx) as led:
        if not as_json:
            note(f"rebuilding the view of {led.root} from checkpoint + log "
                 f"({led.log.next_seq} events) ...")
        started = time.monotonic()
        with progress_bar("rebuild", 1, not as_json) as advance:
            led.rebuild()
            advance(1)
        out = {"rebuilt": True, "next_seq": led.log.next_seq,
               "seconds": round(time.monotonic() - started, 3)}
    emit(out, as_json)


@app.command()
def verify(ctx: typer.Context, as_json: bool = json_opt()) -> None:
    """Check every segment's checksums and pages, the seq chain, the WAL frames, the newest
    checkpoint and the view against a replay of the log. Exit 1 if anything is wrong."""
    from ledger.verify import verify_ledger

    root = data_dir(ctx)
    if not (root / "log").exists():
        raise InvalidInput(
            f"no ledger at {root}: nothing written yet (check --data-dir or ${DATA_DIR_ENV})")
    report = verify_ledger(root)
    if as_json:
        emit_json(report.summary())
    else:
        sys.stdout.write(verify_text(report.summary()))
        sys.stdout.flush()
    if not report.ok:
        raise typer.Exit(EXIT_REFUSED)


def verify_text(s: dict[str, Any]) -> str:
    """The verify summary for people: the figures, then one line per problem and note."""
    checkpoint = (f"checkpoint at seq {s['checkpoint_replayed_seq']} equals a replay"
                  if s["checkpoint_replayed_seq"] is not None else "no checkpoint replayed")
    view = (f"view at seq {s['view_position']} equals a replay" if s["view_checked"]
            else "view not checked")
    lines = [
        f"verified {s['data_dir']}: seqs {s['start_seq']}..{s['next_seq']}, {s['segments']} "
        f"segment(s) and the WAL ({s['wal_events']} events), {s['events']} events, "
        f"{s['bytes']} bytes, {s['row_groups']} row groups, {s['checkpoints']} checkpoint(s)",
        f"{checkpoint}; {view}",
        *(f"note: {n}" for n in s["notes"]),
        *(f"problem: {p}" for p in s["problems"]),
        f"{len(s['problems'])} problem(s)",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- demo
DEMO_SPARK_ENV = "OFFSET_LEDGER_DEMO_SPARK"
DEMO_TOPIC, DEMO_GROUP, DEMO_QUEUES, DEMO_MINUTES, DEMO_PER_MINUTE = "orders", "billing", 4, 100, 25
DEMO_OUTAGE = (60, 75)  # minutes after the story starts


def invoke(args: Sequence[str]) -> int:
    """Run this CLI in-process (how the demo types a command); returns the exit code."""
    command = typer.main.get_command(app)
    return command.main(args=list(args), prog_name=PROG, standalone_mode=False)


def demo_commands(start_ms: int) -> list[dict[str, Any]]:
    """The first 100 minutes: producers append 25 messages a minute to each of 4 queues, the
    group pulls and commits 30 s later. Each line's `ts` is its ledger time (injected clock)."""
    lines: list[dict[str, Any]] = [
        {"op": "group_set", "group": DEMO_GROUP, "initial": "earliest", "ts": start_ms - 60_000}]
    for m in range(DEMO_MINUTES):
        ts = start_ms + m * 60_000
        for q in range(DEMO_QUEUES):
            lines.append({"op": "queue_append", "topic": DEMO_TOPIC, "queue_id": q,
                          "count": DEMO_PER_MINUTE, "store_time": ts, "ts": ts})
        for q in range(DEMO_QUEUES):
            client = f"billing-{q % 2 + 1}"
            lines.append({"op": "pull", "group": DEMO_GROUP, "topic": DEMO_TOPIC, "queue_id": q,
                          "client": client, "max": 32, "ts": ts + 30_000})
            lines.append({"op": "commit", "group": DEMO_GROUP, "topic": DEMO_TOPIC,
                          "queue_id": q, "client": client, "offset": (m + 1) * DEMO_PER_MINUTE,
                          "ts": ts + 31_000})
    return lines


def reconsume_commands(from_offset: int, to_offset: int, step: int) -> list[dict[str, Any]]:
    """The group reading again from the reset target (ledger time: the wall clock)."""
    lines: list[dict[str, Any]] = []
    for done in range(from_offset + step, to_offset + 1, step):
        for q in range(DEMO_QUEUES):
            client = f"billing-{q % 2 + 1}"
            lines.append({"op": "pull", "group": DEMO_GROUP, "topic": DEMO_TOPIC, "queue_id": q,
                          "client": client, "max": step})
            lines.append({"op": "commit", "group": DEMO_GROUP, "topic": DEMO_TOPIC,
                          "queue_id": q, "client": client, "offset": done})
    return lines


class DemoSession:
    """Types commands into this CLI in a temporary data dir and narrates them (rich)."""

    def __init__(self, root: Path, console: Any, stdout: Any) -> None:
        self.root = root
        self.data = root / "data"
        self.console = console
        self.stdout = stdout

    def say(self, text: str) -> None:
        self.console.print()
        self.console.print(f"# {text}", style="italic cyan", highlight=False)

    def run(self, args: Sequence[str], *, redirect: str | None = None,
            expect: int = 0) -> int:
        import shlex

        shown = shlex.join(args) + (f" > {redirect}" if redirect else "")
        self.console.print(f"$ {PROG} {shown}", style="bold", highlight=False, markup=False)
        target = (self.root / redirect).open("w") if redirect else self.stdout
        try:
            with contextlib.redirect_stdout(target):
                code = invoke(["--data-dir", str(self.data), *args])
        finally:
            if redirect:
                target.close()
        if code != expect:
            raise LedgerError(f"demo step failed with exit {code}: {PROG} {shown}")
        if code:
            self.console.print(f"(exit {code})", style="dim", highlight=False)
        return code

    def write_ndjson(self, name: str, lines: Iterable[dict[str, Any]]) -> None:
        with (self.root / name).open("w") as f:
            for line in lines:
                f.write(json.dumps(line, separators=(",", ":")) + "\n")



def run_demo(root: Path, console: Any, stdout: Any, spark: bool) -> dict[str, Any]:
    """The RocketMQ backtracking story: consume, outage, reset to before it, consume again."""
    s = DemoSession(root, console, stdout)
    cwd = os.getcwd()
    os.chdir(root)  # the story's files are typed as relative paths
    try:
        return _demo_story(s, spark)
    finally:
        os.chdir(cwd)


def _demo_story(s: DemoSession, spark: bool) -> dict[str, Any]:
    console = s.console
    now = int(time.time() * 1000)
    start = (now - 3 * 3_600_000) // 60_000 * 60_000
    outage_from = start + DEMO_OUTAGE[0] * 60_000
    outage_to = start + DEMO_OUTAGE[1] * 60_000
    total = DEMO_QUEUES * DEMO_MINUTES * DEMO_PER_MINUTE
    console.print(f"offset-ledger demo in {s.root}  (export {DATA_DIR_ENV}={s.data})",
                  style="bold magenta", highlight=False, markup=False)

    s.say(f"{iso(start)}: producers write {total:,} messages to topic {DEMO_TOPIC!r} "
          f"({DEMO_QUEUES} queues, {DEMO_PER_MINUTE}/min each) over {DEMO_MINUTES} minutes; "
          f"group {DEMO_GROUP!r} consumes as they arrive. The ledger records every append, "
          "pull and commit (each line carries its own time).")
    s.write_ndjson("day.ndjson", demo_commands(start))
    s.run(["init", "--segment-events", "500"])
    s.run(["apply", "day.ndjson"], redirect="day.out")
    s.run(["progress", "--group", DEMO_GROUP])

    s.say(f"Incident: from {iso(outage_from)} to {iso(outage_to)} the billing database was "
          "down, yet the consumers acknowledged every message. Which offsets were stored at "
          "the start of the outage?")
    s.run(["lookup", "--topic", DEMO_TOPIC, "--datetime", iso(outage_from) or ""])
    s.say("Plan a reset of the group to the first message stored at or after the outage "
          "(a dry run: nothing changes).")
    reset_args = ["reset", "--group", DEMO_GROUP, "--topic", DEMO_TOPIC,
                  "--to-datetime", iso(outage_from) or ""]
    s.run(reset_args)
    s.run([*reset_args, "--execute", "--actor", "alice",
           "--reason", "INC-4711 replay the billing outage"])

    s.say("A consumer still running from before the reset tries to commit under its old "
          "generation: fenced, so the reset cannot be lost to a racing commit.")
    s.run(["commit", "--group", DEMO_GROUP, "--topic", DEMO_TOPIC, "--queue", "0",
           "--offset", str(DEMO_MINUTES * DEMO_PER_MINUTE), "--client", "billing-1",
           "--generation", "0"], expect=EXIT_REFUSED)

    s.say("The group consumes again from the reset offsets (generation 1).")
    reset_to = DEMO_OUTAGE[0] * DEMO_PER_MINUTE
    s.write_ndjson("replay.ndjson",
                   reconsume_commands(reset_to, DEMO_MINUTES * DEMO_PER_MINUTE, 250))
    s.run(["apply", "replay.ndjson"], redirect="replay.out")
    s.run(["progress", "--group", DEMO_GROUP])

    s.say("Auditors: who moved which offset, when, from what to what, and why.")
    s.run(["history", "--group", DEMO_GROUP, "--kind", "reset"])
    s.say("Analysts: lag and re-delivered messages in SQL.")
    s.run(["sql", "SELECT consumer_group, topic, sum(lag) AS lag, sum(inflight) AS inflight, "
                  "max(generation) AS generation FROM progress GROUP BY ALL"])
    s.run(["sql", "SELECT kind, count(*) AS events FROM events "
                  f"WHERE consumer_group = '{DEMO_GROUP}' GROUP BY kind ORDER BY kind"])
    spark_done = demo_spark(s, spark)
    s.say("Done.")
    return {"data_dir": str(s.data), "messages": total, "messages_replayed":
            DEMO_QUEUES * (DEMO_MINUTES * DEMO_PER_MINUTE - reset_to), "spark": spark_done}


def demo_spark(s: DemoSession, enabled: bool) -> str:
    """Spark compaction and audit, when Java and spark_compaction are there (else a note)."""
    if not enabled:
        s.say(f"Spark compaction and audit skipped ({DEMO_SPARK_ENV}=0).")
        return "skipped"
    if shutil.which("java") is None:
        s.say("Spark compaction and audit skipped: java is not on PATH.")
        return "skipped"
    command = typer.main.get_command(app)
    names = getattr(command, "commands", {})
    if "compact" in names and "audit" in names:
        s.say("Spark compacts the small sealed segments and audits the view against a replay.")
        s.run(["compact"])
        s.run(["audit"])
        return "done"
    try:
        import spark_compaction
    except ImportError as e:
        s.say(f"Spark compaction and audit skipped: {e}.")
        return "skipped"
    compact_fn = getattr(spark_compaction, "compact", None)
    audit_fn = getattr(spark_compaction, "audit", None)
    if compact_fn is None or audit_fn is None:
        s.say("Spark compaction and audit skipped: spark_compaction offers no compact/audit.")
        return "skipped"
    s.say("Spark compacts the small sealed segments and audits the view against a replay.")
    for name, fn in (("compact", compact_fn), ("audit", audit_fn)):
        s.console.print(f">>> spark_compaction.{name}({str(s.data)!r})", style="bold",
                        highlight=False, markup=False)
        try:
            result = fn(str(s.data))
        except ImportError as e:
            s.say(f"Spark {name} skipped: {e}.")
            return "skipped"
        print(spark_summary(name, result), file=s.stdout)
    return "done"


def spark_summary(name: str, result: Any) -> str:
    """One or two lines of a Spark job's report (the full report is a dict)."""
    if not isinstance(result, dict):
        return repr(result)[:400]
    if name == "compact" and "segments_merged" in result:
        return (f"merged {result.get('segments_merged')} segment(s), "
                f"{result.get('events_compacted')} events, bytes {result.get('bytes_before')} -> "
                f"{result.get('bytes_after')} ({result.get('seconds')} s)")
    if name == "audit" and "clean" in result:
        resets = result.get("resets") or []
        return (f"clean: {result.get('clean')}, findings: {len(result.get('findings') or [])}, "
                f"resets checked: {len(resets)} "
                f"(actors: {', '.join(sorted({str(r.get('actor')) for r in resets})) or '-'})")
    return repr(result)[:400]


@app.command()
def demo(
    as_json: bool = json_opt(),
    keep: bool = typer.Option(False, "--keep", help="Keep the temporary data directory."),
) -> None:
    """The RocketMQ backtracking story end to end, narrated, in a fresh temporary data dir
    (Spark part skipped when OFFSET_LEDGER_DEMO_SPARK=0)."""
    from rich.console import Console

    root = Path(tempfile.mkdtemp(prefix="offset-ledger-demo-"))
    stdout = sys.stderr if as_json else sys.stdout
    console = Console(file=stdout, highlight=False, soft_wrap=True)
    spark = os.environ.get(DEMO_SPARK_ENV, "1") != "0"
    try:
        summary = run_demo(root, console, stdout, spark)
    finally:
        if keep:
            note(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if as_json:
        emit_json(summary)


# ====================================================================== Spark commands
# The Spark engineer adds `compact`, `replay` and `audit` here. Import spark_compaction (and
# pyspark) lazily inside each command body, never at module level: `--help` must not start a JVM.
@contextlib.contextmanager
def spark_progress() -> Iterator[Callable[[str], None]]:
    """Progress of a Spark job on stderr when it is a terminal: a spinner showing the current
    step and one line per finished step with its time; a no-op otherwise."""
    if not sys.stderr.isatty():
        yield lambda message: None
        return
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True, highlight=False)
    started = last = time.monotonic()
    with console.status("starting Spark ...") as status:
        previous: list[str] = []

        def step(message: str) -> None:
            nonlocal last
            now = time.monotonic()
            if previous:
                console.print(f"[dim]{now - started:7.1f}s[/dim]  {escape(previous[-1])} "
                              f"[dim]({now - last:.1f}s)[/dim]")
            previous.append(message)
            last = now
            status.update(escape(message))

        yield step
        if previous:
            step("done")


def _spark_roots(ctx: typer.Context, roots: list[Path] | None) -> list[Path]:
    chosen = list(roots) if roots else [data_dir(ctx)]
    for root in chosen:
        if not (root / "log").exists():
            raise InvalidInput(
                f"no ledger at {root}: nothing written yet (check --data-dir or ${DATA_DIR_ENV})")
    return chosen


MASTER_HELP = "Spark master URL (default local[*])."


@app.command()
def compact(
    ctx: typer.Context,
    roots: list[Path] = typer.Option(
        None, "--root", metavar="DIR",
        help="A ledger data directory to compact; repeat for several (default: --data-dir)."),
    target_events: int = typer.Option(None, "--target-events", metavar="N",
                                      help="Events per compacted segment at most (8000000)."),
    target_bytes: int = typer.Option(None, "--target-bytes", metavar="B",
                                     help="Input bytes per compacted segment at most (256 MiB)."),
    row_group_events: int = typer.Option(None, "--row-group-events", metavar="N",
                                         help="Rows per Parquet row group (131072)."),
    order: str = typer.Option(
        None, "--order", metavar="seq|key",
        help="Rows inside a row group: seq (default; smallest files) or key (group, topic, "
             "queue, seq: per-group history reads ~2x faster, ~25% more bytes)."),
    master: str = typer.Option(None, "--master", metavar="URL", help=MASTER_HELP),
    as_json: bool = json_opt(),
) -> None:
    """Merge runs of small sealed segments into bigger ones (Spark); needs the writer lock."""
    from spark_compaction import compact as compact_fn
    from spark_compaction.compaction import (
        ORDER_DEFAULT,
        ORDERS,
        ROW_GROUP_EVENTS_DEFAULT,
        TARGET_BYTES_DEFAULT,
        TARGET_EVENTS_DEFAULT,
    )

    if order is not None and order not in ORDERS:
        raise InvalidInput(f"invalid --order {order!r}: use {' or '.join(ORDERS)}")
    chosen = _spark_roots(ctx, roots)
    for name, value in (("--target-events", target_events), ("--target-bytes", target_bytes),
                        ("--row-group-events", row_group_events)):
        if value is not None and value < 1:
            raise InvalidInput(f"invalid {name} {value}: must be a positive integer")
    with spark_progress() as step:
        out = compact_fn(
            chosen, master=master, progress=step,
            target_events=target_events or TARGET_EVENTS_DEFAULT,
            target_bytes=target_bytes or TARGET_BYTES_DEFAULT,
            row_group_events=row_group_events or ROW_GROUP_EVENTS_DEFAULT,
            order=order or ORDER_DEFAULT)
    if as_json:
        emit_json(out)
        return
    rows = [{"root": r["root"], **{k: run[k] for k in
                                   ("base_seq", "end_seq", "segments_in", "events", "bytes_in",
                                    "bytes_out")}}
            for r in out["roots"] for run in r["runs"]]
    emit(rows, False, empty="nothing to compact: no run of small segments")
    for r in out["roots"]:
        note(f"{r['root']}: {r['segments_before']} -> {r['segments_after']} segments, "
             f"{r['bytes_before']} -> {r['bytes_after']} bytes in {r['seconds']} s "
             f"({r['order']} order)")


@app.command()
def replay(
    ctx: typer.Context,
    when: str = typer.Option(None, "--at", metavar="TIME",
                             help="Ledger time (ISO-8601, epoch ms, now)."),
    seq: int = typer.Option(None, "--seq", metavar="N",
                            help="Log position instead of a time: the state before seq N."),
    group: str = typer.Option(None, "--group", help="Only this group."),
    master: str = typer.Option(None, "--master", metavar="URL", help=MASTER_HELP),
    as_json: bool = json_opt(),
) -> None:
    """Committed offsets at TIME computed in Spark from checkpoint + log (what `at` prints)."""
    from spark_compaction import replay as replay_fn
    from spark_compaction.timeline import ledger_now_ms

    if (when is None) == (seq is None):
        raise InvalidInput("replay needs exactly one of --at TIME or --seq N")
    (root,) = _spark_roots(ctx, None)
    at_ts = None
    if when is not None:
        at_ts = time_arg(when, "--at")
        if at_ts is None:
            at_ts = ledger_now_ms(root)
    rows = replay_fn(root, at_ts=at_ts, at_seq=seq, group=group, master=master)
    cols = ("consumer_group", "topic", "queue_id", "committed_offset", "generation")
    emit([{c: r.get(c) for c in cols} for r in rows], as_json, cols,
         empty="no offsets at that time")


@app.command()
def audit(
    ctx: typer.Context,
    since: str = typer.Option(None, "--since", metavar="TIME",
                              help="Report anomalies and resets from this ledger time on."),
    report: Path = typer.Option(None, "--report", metavar="FILE.html",
                                help="Also write an HTML report (charts embedded)."),
    master: str = typer.Option(None, "--master", metavar="URL", help=MASTER_HELP),
    as_json: bool = json_opt(),
) -> None:
    """Check the view against a full Spark replay and list anomalies and resets; exit 1 when
    there are findings."""
    from spark_compaction import audit as audit_fn

    (root,) = _spark_roots(ctx, None)
    since_ts = None
    if since is not None:
        since_ts = time_arg(since, "--since")
        if since_ts is None:
            from spark_compaction.timeline import ledger_now_ms

            since_ts = ledger_now_ms(root)
    with spark_progress() as step:
        out = audit_fn(root, since_ts=since_ts, master=master, report=report, progress=step)
    if as_json:
        emit_json(out)
    else:
        if out["findings"]:
            emit([with_iso({k: f.get(k) for k in ("kind", "seq", "ts", "message")}, "ts")
                  for f in out["findings"]], False)
        resets = [with_iso({k: r[k] for k in ("seq", "ts", "consumer_group", "topic", "queue_id",
                                              "actor", "reason", "from_offset", "to_offset",
                                              "replays", "skips")}, "ts")
                  for r in out["resets"] if r["client_id"] is None]
        if resets:
            sys.stdout.write("\nresets\n")
            emit(resets, False)
        counts = ", ".join(f"{k} {v}" for k, v in out["findings_by_kind"].items() if v)
        note(f"audit of {root}: " + (f"findings: {counts}" if counts else "clean")
             + f"; {len(out['resets'])} resets" + (f"; report {out['report']}"
                                                    if out["report"] else ""))
    if not out["clean"]:
        raise typer.Exit(EXIT_REFUSED)


# ---------------------------------------------------------------------- (end of Spark commands)
