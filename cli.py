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

from ledger.commands.results import result_doc
from ledger.errors import InvalidInput, LedgerError, RefusedError
from ledger.importers.result import source_name
from ledger.limits import name_from
from ledger.reads.documents import (
    STATE_COLUMNS,
    json_default,
    lag_summary_doc,
    series_rows,
    with_iso,
)
from ledger.timeparse import check_time, duration_arg, iso, time_arg

if TYPE_CHECKING:
    from ledger import Ledger
    from ledger.cluster import Cluster, LocalShard

PROG = "offset-ledger"
DATA_DIR_ENV = "OFFSET_LEDGER_DATA_DIR"
DATA_DIR_DEFAULT = "offset-ledger-data"
CLUSTER_ENV = "OFFSET_LEDGER_CLUSTER"
TOKEN_ENV = "OFFSET_LEDGER_TOKEN"  # the token a cluster's served shards are asked with
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
def emit_json(doc: Any) -> None:
    """Exactly one JSON document on stdout."""
    sys.stdout.write(json.dumps(doc, default=json_default, ensure_ascii=False) + "\n")
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


HISTORY_COLUMNS = ("seq", "ts", "kind", "consumer_group", "topic", "queue_id", "prev_offset",
                   "offset", "generation", "client_id", "actor", "detail")


def with_shard(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The columns of a table, and the shard of each row where a cluster answered."""
    return (*columns, "shard") if rows and "shard" in rows[0] else tuple(columns)
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
def cluster_file(ctx: typer.Context) -> Path | None:
    """The cluster file of `--cluster` (None: one data directory)."""
    return ctx.meta.get("cluster")


def data_dir(ctx: typer.Context) -> Path:
    if cluster_file(ctx) is not None:
        raise InvalidInput(f"`{ctx.command_path}` works on one data directory, not a cluster: "
                           "run it with --data-dir on a shard's root")
    root = ctx.obj if isinstance(ctx.obj, Path) else None
    return root if root is not None else Path(os.environ.get(DATA_DIR_ENV) or DATA_DIR_DEFAULT)


@contextlib.contextmanager
def open_cluster(ctx: typer.Context) -> Iterator[Cluster]:
    """The cluster of `--cluster`: served shards through their servers (with
    $OFFSET_LEDGER_TOKEN), the others through their roots; shards that a `--partial` read left
    out are named on stderr."""
    from ledger.cluster import Cluster, load_cluster

    spec = load_cluster(cluster_file(ctx))  # type: ignore[arg-type]
    connect = None
    if any(s.server is not None for s in spec.shards):
        from server.client import RemoteShard

        token = os.environ.get(TOKEN_ENV) or None
        connect = lambda shard: RemoteShard(shard, token=token)  # noqa: E731
    with Cluster(spec, connect=connect, partial=bool(ctx.meta.get("partial"))) as cluster:
        yield cluster
        if cluster.missing:
            note("partial answer: " + "; ".join(str(e) for e in cluster.missing))


@contextlib.contextmanager
def open_writer(ctx: typer.Context, **settings: Any) -> Iterator[Ledger | Cluster]:
    """The ledger to write (with `--cluster`: the cluster, each write routed)."""
    from ledger import Ledger

    if cluster_file(ctx) is not None:
        with open_cluster(ctx) as cluster:
            yield cluster
        return
    with Ledger.open(data_dir(ctx), **settings) as led:
        yield led


@contextlib.contextmanager
def open_reader(ctx: typer.Context) -> Iterator[LocalShard | Cluster]:
    """Reads, as documents (with `--cluster`: routed or merged over the shards). On one data
    directory they are a read-only snapshot (the manifest's segments, the newest checkpoint and
    the intact tail, with an in-memory view): they never take the writer lock, so they work
    while another process writes and never make a writer that starts meanwhile fail. They
    never create."""
    from ledger import Ledger
    from ledger.cluster import LocalShard, ShardSpec

    if cluster_file(ctx) is not None:
        with open_cluster(ctx) as cluster:
            yield cluster
        return
    root = data_dir(ctx)
    if not (root / "log").exists():
        raise InvalidInput(
            f"no ledger at {root}: nothing written yet (check --data-dir or ${DATA_DIR_ENV})")
    with Ledger.open(root, readonly=True) as led:
        yield LocalShard(ShardSpec(0, root), ledger=led)


def default_actor() -> str:
    """$USER as an actor (an actor is a ledger name)."""
    user = os.environ.get("USER") or os.environ.get("USERNAME") or "operator"
    return name_from(user) or "operator"


def read_text(path: str, what: str) -> str:
    from ledger.commands.input_text import text_of

    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except FileNotFoundError:
        raise InvalidInput(f"{what} {path!r} does not exist") from None
    except OSError as e:
        raise InvalidInput(f"cannot read {what} {path!r}: {e}") from None
    return text_of(data, f"{what} {path!r}")


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
                       help="Overwrite offsets from what brokers and their tools print "
                            "(snapshots: only what changed is recorded).")
import_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                         help="Import a cluster's offset history (each commit at its own time).")
app.add_typer(queue_app, name="queue")
app.add_typer(group_app, name="group")
app.add_typer(sync_app, name="sync")
app.add_typer(import_app, name="import")

JSON_HELP = "Print one JSON document on stdout (and nothing else there)."


def json_opt() -> Any:
    return typer.Option(False, "--json", help=JSON_HELP)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        sys.stdout.write(f"{PROG} {version('offset-ledger')}\n")
        raise typer.Exit(0)


def _given(ctx: typer.Context, param: str) -> bool:
    """The option was typed on the command line (not taken from the environment)."""
    source = ctx.get_parameter_source(param)
    return source is not None and source.name == "COMMANDLINE"


@app.callback()
def main_options(
    ctx: typer.Context,
    data_dir_opt: Path = typer.Option(
        None, "--data-dir", envvar=DATA_DIR_ENV, metavar="DIR",
        help=f"Data directory (default ${DATA_DIR_ENV}, else ./{DATA_DIR_DEFAULT}); "
             "created on first write."),
    cluster: Path = typer.Option(
        None, "--cluster", envvar=CLUSTER_ENV, metavar="FILE",
        help="A cluster file (cluster.toml) in place of --data-dir: each group's writes and "
             "reads go to its shard, queue writes to every shard, other reads ask every shard "
             f"(served shards are asked with ${TOKEN_ENV})."),
    partial: bool = typer.Option(
        False, "--partial", help="With --cluster: answer reads from the shards that answer, "
                                 "naming the others on stderr (without it, a shard down fails "
                                 "the read)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """offset-ledger: who moved which consumer offset, when, from what to what."""
    ctx.obj = data_dir_opt
    if cluster is not None:
        if _given(ctx, "data_dir_opt") and _given(ctx, "cluster"):
            raise InvalidInput("use either --data-dir or --cluster, not both")
        ctx.meta["cluster"] = cluster
    elif partial:
        raise InvalidInput("--partial answers from the shards of a cluster: it needs --cluster")
    ctx.meta["partial"] = partial


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
    segments: str = typer.Option(None, "--segments", metavar="s3://BUCKET/PREFIX",
                                 help="Keep sealed segments, checkpoints and the MANIFEST in this "
                                      "S3 bucket (credentials: the standard AWS variables); "
                                      "chosen once, when the ledger is created."),
    segments_endpoint: str = typer.Option(None, "--segments-endpoint", metavar="URL",
                                          help="S3 endpoint (default: $AWS_ENDPOINT_URL, "
                                               "else AWS)."),
    clock_skew: str = typer.Option(None, "--clock-skew", metavar="DURATION",
                                   help="How far a command's ts may run ahead of the clock "
                                        "(default PT10S); beyond it only a backfill may."),
    take_over: bool = typer.Option(False, "--take-over",
                                   help="Attach to an S3 prefix that already holds a log (its "
                                        "writer elsewhere stopped for good: what was only in "
                                        "its local tail is lost)."),
    as_json: bool = json_opt(),
) -> None:
    """Create or re-configure a data directory; the settings persist for later commands."""
    import msgspec

    settings = {"segment_events_max": segment_events, "segment_bytes_max": segment_bytes,
                "segment_age_ms_max": duration_arg(segment_age, "--segment-age"),
                "durability": durability, "segments": segments,
                "segments_endpoint": segments_endpoint,
                "clock_skew_ms": duration_arg(clock_skew, "--clock-skew")}
    if cluster_file(ctx) is not None:
        with open_cluster(ctx) as cluster:
            shards = cluster.init(take_over=take_over, **settings)
        emit(shards, as_json, ("shard", "data_dir", "segment_events_max", "durability"))
        note(f"{len(shards)} shard(s) ready")
        return
    with open_writer(ctx, take_over=take_over, **settings) as led:
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
    from ledger import QueueAppend

    with open_writer(ctx) as led:
        out = led.submit_one(QueueAppend(topic=topic, queue_id=queue, count=count,
                                         store_time=store_time))
    emit(result_doc(out), as_json, QUEUE_COLUMNS)


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
    from ledger import QueueTruncate

    with open_writer(ctx) as led:
        out = led.submit_one(QueueTruncate(topic=topic, queue_id=queue, min_offset=min_offset))
    emit(result_doc(out), as_json, QUEUE_COLUMNS)


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
    from ledger import GroupSet

    with open_writer(ctx) as led:
        out = led.submit_one(GroupSet(group=group, mode=mode, initial=initial,  # type: ignore[arg-type]
                                      client_timeout=client_timeout, actor=default_actor()))
    emit(result_doc(out), as_json, ("consumer_group", "mode", "initial", "client_timeout_ms"))


@group_app.command("list")
def group_list(ctx: typer.Context, as_json: bool = json_opt()) -> None:
    """List groups with their mode, queue count, total lag and last update."""
    with open_reader(ctx) as led:
        rows = led.groups()
    emit(rows, as_json, ("consumer_group", "mode", "queues", "lag", "last_update"),
         empty="no groups")


@group_app.command("delete")
def group_delete(
    ctx: typer.Context,
    group: str = typer.Option(..., "--group", help="Consumer group."),
    as_json: bool = json_opt(),
) -> None:
    """Remove a group's offsets (a delete event per queue), active clients or not."""
    from ledger import GroupDelete

    with open_writer(ctx) as led:
        out = led.submit_one(GroupDelete(group=group, actor=default_actor()))
    emit(result_doc(out), as_json, ("consumer_group", "queues_deleted"))


# ---------------------------------------------------------------------- pull / commit
@app.command()
def pull(
    ctx: typer.Context,
    group: str = typer.Option(..., "--group", help="Consumer group."),
    topic: str = typer.Option(..., "--topic", help="Topic name."),
    queue: int = typer.Option(..., "--queue", help="Queue id."),
    client: str = typer.Option(None, "--client", help="Consumer client id."),
    max_count: int = typer.Option(32, "--max", metavar="N",
                                  help="Messages at most (0: only where the client starts)."),
    as_json: bool = json_opt(),
) -> None:
    """Pull: where the client should read next, with the generation to commit under."""
    from ledger import Pull

    with open_writer(ctx) as led:
        out = led.submit_one(Pull(group=group, topic=topic, queue_id=queue, client=client,
                                  max=max_count))
    emit(result_doc(out), as_json, ("next_offset", "generation", "count"))


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
    owner_only: bool = typer.Option(False, "--owner-only",
                                    help="Fenced unless --client made the queue's last pull "
                                         "(a Kafka consumer's partition: zombies are fenced)."),
    as_json: bool = json_opt(),
) -> None:
    """Commit an offset; exit 1 when a rule refuses it (stale, fenced, invalid)."""
    from ledger import Commit, CommitResult

    with open_writer(ctx) as led:
        r = led.submit_one(Commit(group=group, topic=topic, queue_id=queue, offset=offset,
                                  client=client, generation=generation, owner_only=owner_only))
    assert isinstance(r, CommitResult)
    emit(result_doc(r), as_json, ("accepted", "reason", "offset"))
    if not r.accepted:
        note(f"commit refused: {r.reason} (the committed offset stays {_cell(r.offset)})")
        raise typer.Exit(EXIT_REFUSED)


# ---------------------------------------------------------------------- reset
PLAN_COLUMNS = ("consumer_group", "topic", "queue_id", "from_offset", "to_offset")


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
    from_file: str = typer.Option(None, "--from-file", metavar="FILE",
                                  help="A plan reviewed with --export-plan (executed as it is, "
                                       "refused if a queue moved since), or Kafka CSV "
                                       "(topic,partition,offset or group,topic,partition,offset); "
                                       "the file is the scope."),
    backward_only: bool = typer.Option(False, "--backward-only",
                                       help="Never move an offset forward."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only plan (the default)."),
    execute: bool = typer.Option(False, "--execute", help="Apply the plan."),
    force: bool = typer.Option(False, "--force",
                               help="Lift the reset policy's rewind limits (reset-policy.toml)."),
    actor: str = typer.Option(None, "--actor", help="Who resets (default $USER)."),
    reason: str = typer.Option(None, "--reason", help="Why, for auditors."),
    export: bool = typer.Option(False, "--export",
                                help="Print the plan as Kafka CSV (topic,partition,offset): "
                                     "targets only, for Kafka's tools."),
    export_plan: bool = typer.Option(False, "--export-plan",
                                     help="Print the plan to review (JSON with each queue's "
                                          "from_offset and the scenario), for --from-file."),
    as_json: bool = json_opt(),
) -> None:
    """Reset a group's offsets (Kafka --reset-offsets, RocketMQ resetOffsetByTime); a dry run
    unless --execute."""
    from ledger.reset.plan_file import reset_with_file

    if dry_run and execute:
        raise InvalidInput("use either --dry-run or --execute, not both")
    if sum((export, export_plan, as_json)) > 1:
        raise InvalidInput("use one output: --export or --json or --export-plan, not two")
    command = reset_with_file(dict(
        group=group, topics=list(topic) if topic else None, all_topics=all_topics,
        to_offset=to_offset, to_datetime=to_datetime, to_earliest=to_earliest,
        to_latest=to_latest, to_current=to_current, shift_by=shift_by, by_duration=by_duration,
        to_state_at=to_state_at, backward_only=backward_only, execute=execute, force=force,
        actor=actor or default_actor(), reason=reason),
        read_text(from_file, "--from-file") if from_file is not None else None)
    with (open_writer if execute else open_reader)(ctx) as led:
        result = led.run_reset(command)
    doc = result_doc(result)
    if result.error is not None:
        if as_json:
            emit_json(doc)
        raise RefusedError(result.refused or "refused", result.error)
    emit_plan(doc, as_json, export, export_plan)
    if result.executed:
        note(f"reset executed by {command.actor}: the next pull of each queue starts at its "
             "new offset; commits from before the reset are fenced")
    else:
        note("dry run: nothing changed (add --execute to apply)")


def emit_plan(doc: dict[str, Any], as_json: bool, export: bool, export_plan: bool) -> None:
    """A reset's plan as JSON, Kafka CSV, a plan file or a table, then what it means for
    people."""
    rows = doc["plan"]
    for clamped in doc.get("clamped", ()):
        note(f"warning: {clamped['warning']}")
    if export:
        from ledger.importers.kafka_csv import to_kafka_csv

        sys.stdout.write(to_kafka_csv([(r["topic"], r["queue_id"], r["to_offset"]) for r in rows]))
    elif export_plan:
        from ledger.reset.plan_file import plan_file_text

        sys.stdout.write(plan_file_text(doc))
    elif as_json:
        emit_json(doc)
    elif rows:
        sys.stdout.write(render_table(rows, PLAN_COLUMNS))
    if doc.get("ignored_groups"):
        note(f"ignoring rows for other groups: {', '.join(doc['ignored_groups'])}")
    if doc.get("skipped_queues"):
        names = ", ".join(f"{q['topic']}:{q['queue_id']}" for q in doc["skipped_queues"])
        note(f"left out {len(doc['skipped_queues'])} queue(s) where group "
             f"{doc['consumer_group']!r} had no offset at that time: {names}")
    if not rows:
        note(f"nothing to reset: group {doc['consumer_group']!r} has no offsets in scope")
    note(f"{len(rows)} queue(s): {doc['messages_replayed']} message(s) to replay, "
         f"{doc['messages_skipped']} to skip")
    if doc.get("policy"):
        note(doc["policy"])


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
        rows = led.progress(group, topic)
    emit(rows, as_json, PROGRESS_COLUMNS, empty=f"no offsets for group {group!r}")


GENERATION_COLUMNS = ("topic", "queue_id", "generation", "pending", "committed_offset",
                      "last_client")


@app.command()
def generations(
    ctx: typer.Context,
    group: str = typer.Option(..., "--group", help="Consumer group."),
    topic: str = typer.Option(None, "--topic", help="Only this topic (T, or T:0,2 for queues)."),
    as_json: bool = json_opt(),
) -> None:
    """Per queue: generation (one more per reset), a reset pending until the next pull, the
    committed offset and the client of the last pull (what a consumer checks every second)."""
    with open_reader(ctx) as led:
        rows = led.generations(group, topic=topic)
    emit(rows, as_json, GENERATION_COLUMNS, empty=f"no offsets for group {group!r}")


LAG_SUMMARY_COLUMNS = ("consumer_group", "status", "complete", "total_lag", "max_lag_ms",
                       "last_commit", "queues")
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
    summary: bool = typer.Option(False, "--summary", help="One row per group, no windows "
                                                          "(what the console's groups page shows)."),
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
    if at_ is not None:
        check_time(at_, "at")
    with open_reader(ctx) as led:
        doc = led.lag(group=group, topic=topic, at_ms=at_, window=window,
                      allowed_lag=allowed_lag)
    if summary:
        emit(lag_summary_doc(doc), as_json, LAG_SUMMARY_COLUMNS, empty="no groups with offsets")
    elif as_json:
        emit_json(doc)
    else:
        emit(lag_rows(doc), False, LAG_COLUMNS, empty="no groups with offsets")


SERIES_COLUMNS = ("consumer_group", "topic", "queue_id", "ts", "committed_offset", "max_offset",
                  "lag", "lag_ms")


def _lag_series(ctx: typer.Context, group: str | None, topic: str | None, since: str,
                until: str, every: str, as_json: bool) -> None:
    for value, what in ((since, "since"), (until, "until")):
        check_time(value, what)
    duration_arg(every, "--every")
    with open_reader(ctx) as led:
        doc = led.lag_series(since_ms=since, until_ms=until, every_ms=every, group=group,
                             topic=topic)
    if as_json:
        emit_json(doc)
        return
    rows = series_rows(doc)
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
    for value, what in ((since, "since"), (until, "until")):
        if value is not None:
            check_time(value, what)
    with open_reader(ctx) as led:
        rows = led.history(group=group, topic=topic, queue_id=queue, kind=kind,
                           since_ms=since, until_ms=until, limit=limit)
    emit(rows, as_json, with_shard(HISTORY_COLUMNS, rows), empty="no events")


@app.command()
def at(
    ctx: typer.Context,
    when: str = typer.Argument(..., metavar="TIME", help="Ledger time (ISO-8601, epoch ms, now)."),
    group: str = typer.Option(None, "--group", help="Only this group."),
    as_json: bool = json_opt(),
) -> None:
    """Committed offsets as they were at ledger time TIME."""
    check_time(when, "time")
    with open_reader(ctx) as led:
        rows = led.state_at(ts=when, group=group)
    emit(rows, as_json, STATE_COLUMNS, empty="no offsets at that time")


@app.command()
def lookup(
    ctx: typer.Context,
    topic: str = typer.Option(..., "--topic", help="Topic name."),
    datetime_: str = typer.Option(..., "--datetime", metavar="TIME", help="Message store time."),
    as_json: bool = json_opt(),
) -> None:
    """Per queue: the first message stored at or after TIME (Kafka ListOffsets)."""
    check_time(datetime_, "datetime")
    with open_reader(ctx) as led:
        rows = led.offsets_for_time(topic, datetime_)
    emit(rows, as_json, ("topic", "queue_id", "offset"), empty=f"no queues of topic {topic!r}")


@app.command()
def sql(
    ctx: typer.Context,
    query: str = typer.Argument(..., metavar="QUERY",
                                help="One read-only query over events, offsets, queues, "
                                     "progress, groups."),
    fmt: str = typer.Option("table", "--format", metavar="table|csv|json",
                            help="Output format."),
    timeout: float = typer.Option(10.0, "--timeout", metavar="S",
                                  help="Stop the query after S seconds (exit 2)."),
    as_json: bool = json_opt(),
) -> None:
    """Read-only DuckDB SQL over the ledger's views."""
    if fmt not in ("table", "csv", "json"):
        raise InvalidInput(f"invalid --format {fmt!r}: use table, csv or json")
    if not timeout > 0:
        raise InvalidInput(f"invalid --timeout {timeout!r}: must be more than 0 seconds")
    with open_reader(ctx) as led:
        table = led.sql(query, timeout_s=timeout)
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
        rows = led.export_rows(group)
    if as_json:
        emit_json(rows)
        return
    from ledger.importers.kafka_csv import to_kafka_csv

    sys.stdout.write(to_kafka_csv([(r["topic"], r["queue_id"], r["offset"]) for r in rows]))
    if not rows:
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
    watch: bool = typer.Option(False, "--watch",
                               help="Follow the file as the broker rewrites it; record each "
                                    "change until SIGINT/SIGTERM."),
    interval: str = typer.Option("PT5S", "--interval", metavar="DURATION",
                                 help="With --watch: how often to read the file."),
    as_json: bool = json_opt(),
) -> None:
    """Overwrite offsets from a RocketMQ broker's consumerOffset.json (fastjson, as written)."""
    from ledger.importers.rocketmq_offsets import parse_rocketmq_offsets

    name = source_name("rocketmq", file, source)
    if watch:
        _watch_rocketmq(ctx, file, name, duration_arg(interval, "--interval") or 0, as_json)
        return
    snap = parse_rocketmq_offsets(read_text(file, "file"))
    _run_sync(ctx, snap.rows, name, snap.broadcast_groups, as_json, file)


def _watch_rocketmq(ctx: typer.Context, file: str, source: str, interval_ms: int,
                    as_json: bool) -> None:
    """`sync rocketmq --watch`: each changed snapshot recorded; stops cleanly on a signal."""
    import signal
    import threading

    from ledger.importers.rocketmq_offsets import rocketmq_snapshot_commands
    from ledger.importers.rocketmq_watch import follow_consumer_offsets

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with open_writer(ctx) as led:
        def record(snapshot: Any) -> None:
            done = led.submit_import(rocketmq_snapshot_commands(snapshot, source))
            note(f"{iso(led.now_ms())}  {file}: {done['changed']} offset(s) changed, "
                 f"{done['unchanged']} unchanged")

        stats = follow_consumer_offsets(file, interval_s=interval_ms / 1000, on_snapshot=record,
                                        stop=stop, on_problem=lambda p: note(f"{file}: {p}"))
    emit({"file": file, "source": source, "reads": stats.reads, "snapshots": stats.snapshots,
          "from_bak": stats.from_bak, "unreadable": stats.unreadable,
          "stale_bak": stats.stale_bak}, as_json)


def _run_import(ctx: typer.Context, imported: Any, as_json: bool, path: str, what: str,
                backfill: bool = False) -> None:
    """An importer's commands through the ledger, with a progress bar on a terminal."""
    with progress_bar(f"{what} {len(imported.commands)} commands", len(imported.commands),
                      not as_json) as advance, open_writer(ctx, backfill=backfill) as led:
        summary = led.submit_import(imported, on_progress=advance)
    emit({"file": path, **summary} if as_json else
         {k: v for k, v in summary.items() if k not in ("notes", "groups")}, as_json)
    for line in summary["notes"]:
        note(line)
    if summary["errors"]:
        note(f"{summary['errors']} command(s) failed: {summary['first_error']}")
        raise typer.Exit(EXIT_REFUSED)


@sync_app.command("kafka-describe")
def sync_kafka_describe(
    ctx: typer.Context,
    file: str = typer.Argument(..., metavar="FILE|-",
                               help="What `kafka-consumer-groups --describe` printed (2.0-4.x)."),
    group: str = typer.Option(None, "--group",
                              help="The group described (needed for 2.0-2.2 output, which has "
                                   "no GROUP column; else only its rows)."),
    source: str = typer.Option(None, "--source", metavar="NAME",
                               help="Where it came from (recorded as actor sync:NAME)."),
    as_json: bool = json_opt(),
) -> None:
    """Committed offsets (CURRENT-OFFSET) and queue bounds (LOG-END-OFFSET) from Kafka's
    describe output; re-importing the same output records nothing."""
    from ledger.importers.kafka_describe import parse_kafka_describe

    imported = parse_kafka_describe(read_text(file, "file"),
                                    source_name("kafka-describe", file, source), group)
    _run_import(ctx, imported, as_json, file, "sync")


@sync_app.command("rocketmq-progress")
def sync_rocketmq_progress(
    ctx: typer.Context,
    file: str = typer.Argument(..., metavar="FILE|-",
                               help="What `mqadmin consumerProgress -g GROUP` printed (4.x, 5.x)."),
    group: str = typer.Option(..., "--group", help="The group it describes."),
    broker: str = typer.Option(None, "--broker",
                               help="Only this broker's queues (one ledger per broker)."),
    source: str = typer.Option(None, "--source", metavar="NAME",
                               help="Where it came from (recorded as actor sync:NAME)."),
    as_json: bool = json_opt(),
) -> None:
    """Committed offsets (#Consumer Offset) and MaxOffsets (#Broker Offset) from RocketMQ's
    consumerProgress output."""
    from ledger.importers.rocketmq_progress import parse_rocketmq_progress

    imported = parse_rocketmq_progress(read_text(file, "file"),
                                       source_name("rocketmq-progress", file, source), group,
                                       broker)
    _run_import(ctx, imported, as_json, file, "sync")


@import_app.command("kafka-offsets")
def import_kafka_offsets(
    ctx: typer.Context,
    file: str = typer.Argument(..., metavar="FILE|-",
                               help="__consumer_offsets dumped by kafka-console-consumer with "
                                    "the offsets formatter (text or JSON form)."),
    source: str = typer.Option(None, "--source", metavar="NAME",
                               help="Where it came from (recorded as actor sync:NAME)."),
    backfill: bool = typer.Option(False, "--backfill",
                                  help="Take commit times beyond the clock skew as given "
                                       "(they move the ledger's clock forward for good)."),
    as_json: bool = json_opt(),
) -> None:
    """The cluster's commit history: each offset commit a sync at its commitTimestamp (in time
    order), each tombstone the removal of the offset. A commitTimestamp beyond the ledger's
    clock skew refuses the import (exit 2, naming the record) unless --backfill."""
    from ledger.importers.kafka_offsets import parse_kafka_offsets

    imported = parse_kafka_offsets(read_text(file, "file"),
                                   source_name("kafka-offsets", file, source))
    _run_import(ctx, imported, as_json, file, "import", backfill)


follow_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                         help="Follow a live cluster: every commit as it happens, kept.")
app.add_typer(follow_app, name="follow")


@follow_app.command("kafka")
def follow_kafka(
    ctx: typer.Context,
    bootstrap_server: str = typer.Option(..., "--bootstrap-server", metavar="HOST:PORT",
                                         help="The cluster's brokers (comma-separated)."),
    cluster: str = typer.Option(None, "--cluster", metavar="NAME",
                                help="The cluster's name in the ledger (source kafka:NAME; "
                                     "default its cluster id)."),
    offsets_topic: str = typer.Option("__consumer_offsets", "--offsets-topic", metavar="TOPIC",
                                      help="The topic the group coordinators write."),
    config: list[str] = typer.Option(None, "--config", metavar="KEY=VALUE",
                                     help="A librdkafka property (security.protocol, sasl.*, "
                                          "ssl.* ...); repeatable."),
    poll_interval: str = typer.Option("PT10S", "--poll-interval", metavar="DURATION",
                                      help="How often the brokers' watermarks are recorded."),
    groups: str = typer.Option(None, "--groups", metavar="GLOB",
                               help="Only groups matching this glob."),
    until_idle: bool = typer.Option(False, "--until-idle",
                                    help="Stop once every partition is read to its end and one "
                                         "watermark poll is recorded."),
    server: str = typer.Option(None, "--server", metavar="URL",
                               help="Send to a running `serve` instead of opening DIR."),
    token_file: Path = typer.Option(None, "--token-file", metavar="FILE",
                                    help="With --server: a file holding a token of role sync."),
    as_json: bool = json_opt(),
) -> None:
    """Consume a Kafka cluster's __consumer_offsets: each commit a sync at its commitTimestamp,
    tombstones as expires and group deletes, queue bounds from the brokers every poll; resumes
    exactly where it stopped. Stops on SIGINT/SIGTERM after the batch in hand."""
    import signal
    import threading

    from ledger.follow.follower import Follower, FollowOptions, parse_config
    from ledger.store.writer import wall_clock_ms

    interval_ms = duration_arg(poll_interval, "--poll-interval") or 0
    if interval_ms <= 0:
        raise InvalidInput(f"invalid --poll-interval {poll_interval!r}: must be above zero")
    if token_file is not None and server is None:
        raise InvalidInput("--token-file goes with --server URL")
    if cluster_file(ctx) is not None:  # its position is one ledger's: one follower per shard
        raise InvalidInput("`follow kafka` writes to one ledger (--data-dir or --server), not a "
                           "cluster: its position is one ledger's, and routing its records to "
                           "their groups' shards is not built yet")
    options = FollowOptions(bootstrap_server=bootstrap_server, cluster=cluster,
                            offsets_topic=offsets_topic, config=parse_config(config or []),
                            poll_interval_s=interval_ms / 1000, groups=groups,
                            until_idle=until_idle)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with contextlib.ExitStack() as stack:
        if server is not None:
            from server.client import LedgerClient
            from server.follow_sink import ServerSink

            token = read_text(str(token_file), "token file").strip() if token_file else None
            sink: Any = ServerSink(stack.enter_context(LedgerClient(server, token=token)))
        else:
            from ledger.follow.sink import LedgerSink

            sink = LedgerSink(stack.enter_context(open_writer(ctx)))
        summary = Follower(options, sink, stop=stop, out=note, clock=wall_clock_ms).run()
    emit(summary, as_json)


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
    from ledger.importers.kafka_csv import parse_kafka_csv

    rows = parse_kafka_csv(read_text(file, "file"), group)
    _run_sync(ctx, rows, source_name("kafka-csv", file, source), (), as_json, file)


# ---------------------------------------------------------------------- apply
@app.command()
def apply(
    ctx: typer.Context,
    file: str = typer.Argument("-", metavar="[FILE | -]",
                               help="NDJSON commands, one per line (- or none: stdin); or a "
                                    "Parquet file (*.parquet) with a column per field, null = "
                                    "absent, which folds column-wise."),
    backfill: bool = typer.Option(False, "--backfill",
                                  help="Take a `ts` beyond the clock skew as given (simulations, "
                                       "replays of synthetic time); else such a line is refused."),
    as_json: bool = json_opt(),
) -> None:
    """Apply commands in batches; one JSON result per input line on stdout, always. Exit 0 when
    the input could be read (lines a rule refused carry `error`), 1 when every line failed."""
    import msgspec

    if file != "-" and file.endswith(".parquet"):
        table = read_parquet(file)
        with progress_bar("apply", table.num_rows, not as_json) as advance, \
                open_writer(ctx, backfill=backfill) as led:
            encode = msgspec.json.Encoder().encode
            chunks = (led.apply_table(table) if cluster_file(ctx) is not None else
                      ((b"".join(encode(r) + b"\n" for r in part), len(part),
                        sum(r.error is not None for r in part))
                       for part in led.apply_table(table)))
            lines, errors = _write_results(chunks, advance)
    else:
        stream, total = open_input(file)
        try:
            with progress_bar("apply", total, not as_json) as advance, \
                    open_writer(ctx, backfill=backfill) as led:
                lines, errors = _write_results(led.apply_ndjson(stream, on_bytes=advance), None)
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
    if not as_json:
        note(f"applied {lines} line(s), {errors} with an error")
    if lines and errors == lines:
        note("every line failed: nothing was applied")
        raise typer.Exit(EXIT_REFUSED)


def _write_results(chunks: Iterable[Any], advance: Callable[[float], None] | None
                   ) -> tuple[int, int]:
    """Results as they become durable, a batch at a time; (lines, lines with an error)."""
    out = sys.stdout.buffer if hasattr(sys.stdout, "buffer") else None
    lines = errors = 0
    for data, n, bad in chunks:
        if out is not None:
            out.write(data)
            out.flush()
        else:
            sys.stdout.write(data.decode())
            sys.stdout.flush()
        lines += n
        errors += bad
        if advance is not None:
            advance(n)
    return lines, errors


def open_input(file: str) -> tuple[Any, int | None]:
    """A binary stream of a file or stdin (-), with its size when known."""
    if file == "-":
        return (sys.stdin.buffer if hasattr(sys.stdin, "buffer") else io.BytesIO(
            sys.stdin.read().encode())), None
    path = Path(file)
    if not path.is_file():
        raise InvalidInput(f"apply file {file!r} does not exist")
    return path.open("rb"), path.stat().st_size


def read_parquet(file: str) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(file)
    if not path.is_file():
        raise InvalidInput(f"apply file {file!r} does not exist")
    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise InvalidInput(f"unreadable Parquet file {file!r}: {str(e).splitlines()[0]}") from None


# ---------------------------------------------------------------------- server
token_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                        help="Tokens of the server (`serve --tokens FILE`).")
app.add_typer(token_app, name="token")


def _tokens_file(ctx: typer.Context, given: Path | None) -> Path:
    return given if given is not None else data_dir(ctx) / "tokens.toml"


@token_app.command("add")
def token_add(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="Who the token is: the actor of "
                                                         "everything it does."),
    role: list[str] = typer.Option(
        ..., "--role", metavar="consume|produce|sync|operate|audit|backfill",
        help="A role of the token; repeatable. consume: pull, commit, read its groups' progress "
             "and lag; produce: queue append/truncate; sync: sync and queue bounds (brokers, "
             "mirrors, importers, a follower; a group delete naming its source); operate: "
             "resets, group set/delete, sync; audit: every read; backfill: may give a ts beyond "
             "the clock skew."),
    groups: list[str] = typer.Option(None, "--groups", metavar="GLOB",
                                     help="Groups it may touch (globs; repeatable; default all)."),
    tokens: Path = typer.Option(None, "--tokens", metavar="FILE",
                                help="The tokens file (default DATA_DIR/tokens.toml)."),
    as_json: bool = json_opt(),
) -> None:
    """Add a token to the tokens file and print it, the only time it is shown (the file keeps
    its sha256)."""
    from server.tokens import add_token

    path = _tokens_file(ctx, tokens)
    secret = add_token(path, name, role, groups or [])
    if as_json:
        emit_json({"name": name, "token": secret, "roles": list(role),
                   "groups": list(groups or []), "tokens_file": str(path)})
    else:
        sys.stdout.write(secret + "\n")
    note(f"token {name!r} ({', '.join(role)}) added to {path}: keep it, it is not shown again")


@app.command()
def serve(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(9888, "--port", help="Port (0: a free one, printed)."),
    tokens: Path = typer.Option(None, "--tokens", metavar="FILE",
                                help="Tokens file (TOML); without it only loopback is served."),
    tls_cert: Path = typer.Option(None, "--tls-cert", metavar="FILE", help="TLS certificate."),
    tls_key: Path = typer.Option(None, "--tls-key", metavar="FILE",
                                 help="TLS private key (PKCS#8 PEM)."),
    max_body_bytes: int = typer.Option(16 * 1024 * 1024, "--max-body-bytes", metavar="B",
                                       help="Largest request body (over it: 413)."),
    max_commands: int = typer.Option(100_000, "--max-commands", metavar="N",
                                     help="Most commands in one request."),
    header_timeout: float = typer.Option(10.0, "--header-timeout", metavar="S",
                                         help="Seconds to send a request's headers (also the "
                                              "idle keep-alive limit)."),
    body_timeout: float = typer.Option(30.0, "--body-timeout", metavar="S",
                                       help="Seconds to send a request's body."),
    sql_timeout: float = typer.Option(10.0, "--sql-timeout", metavar="S",
                                      help="Stop a SQL query after S seconds (then 400)."),
    as_json: bool = typer.Option(False, "--json", help='Once serving, print {"url": URL} on '
                                                       "stdout (one JSON document)."),
) -> None:
    """Serve the ledger over HTTP (API v1, group commit, metrics) until SIGTERM/SIGINT."""
    from ledger import Ledger
    from server import serve as run_server
    from server.settings import ServeSettings, resolve_host
    from server.tls import check_tls_files
    from server.tokens import TokenFile

    root = data_dir(ctx)
    settings = ServeSettings(
        data_dir=str(root.resolve()), host=resolve_host(host), port=port,
        tokens=str(tokens.resolve()) if tokens is not None else None,
        tls_cert=str(tls_cert) if tls_cert is not None else None,
        tls_key=str(tls_key) if tls_key is not None else None,
        max_body_bytes=max_body_bytes, max_commands_per_request=max_commands,
        header_timeout_s=header_timeout, body_timeout_s=body_timeout,
        sql_timeout_s=sql_timeout, announce_json=as_json)
    if tokens is not None:
        TokenFile.load(tokens)  # a bad file is refused before anything starts
    if tls_cert is not None and tls_key is not None:
        check_tls_files(tls_cert, tls_key)  # names the wrong file (TLS says "PEM lib")
    Ledger.open(root).close()  # recovery, and the writer lock is free: say so now, in one line
    raise typer.Exit(run_server(settings))


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
    data_dir(ctx)  # one data directory: refused with --cluster
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
    from ledger.store.verify import verify_ledger

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
def invoke(args: Sequence[str]) -> int:
    """Run this CLI in-process (how the demo types a command); returns the exit code."""
    command = typer.main.get_command(app)
    return command.main(args=list(args), prog_name=PROG, standalone_mode=False)


@app.command()
def demo(
    ctx: typer.Context,
    as_json: bool = json_opt(),
    keep: bool = typer.Option(False, "--keep", help="Keep the temporary data directory."),
    serve_console: bool = typer.Option(False, "--serve", help="Then serve the web console "
                                                               "over the demo's data (until "
                                                               "Ctrl-C)."),
) -> None:
    """The RocketMQ backtracking story end to end, narrated, in a fresh temporary data dir
    (Spark part skipped when OFFSET_LEDGER_DEMO_SPARK=0); with --serve it ends by printing
    the console's URL and serving it."""
    from rich.console import Console

    from ledger.demo import DEMO_SPARK_ENV, run_demo

    if cluster_file(ctx) is not None:
        raise InvalidInput("demo makes its own data directory: run it without --cluster")
    root = Path(tempfile.mkdtemp(prefix="offset-ledger-demo-"))
    stdout = sys.stderr if as_json else sys.stdout
    console = Console(file=stdout, highlight=False, soft_wrap=True)
    spark = os.environ.get(DEMO_SPARK_ENV, "1") != "0"
    try:
        summary = run_demo(root, console, stdout, invoke, spark=spark,
                           data_dir_env=DATA_DIR_ENV, prog=PROG)
        if serve_console:
            from server import free_port
            from server import serve as run_server
            from server.settings import ServeSettings

            port = free_port("127.0.0.1")
            console.print(f"\n# The web console over the demo's data (Ctrl-C stops it):\n"
                          f"http://127.0.0.1:{port}/", style="bold magenta", highlight=False,
                          markup=False)
            stdout.flush()
            run_server(ServeSettings(data_dir=summary["data_dir"], port=port))
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


def _spark_roots(ctx: typer.Context, roots: list[Path] | None, many: bool = False) -> list[Path]:
    """The roots a Spark job reads: `--root`s, else the data directory (`many`: the cluster's
    shards' roots with --cluster)."""
    cluster = cluster_file(ctx)
    if not roots and many and cluster is not None:
        from ledger.cluster import load_cluster

        roots = [s.root for s in load_cluster(cluster).shards]
    chosen = list(roots) if roots else [data_dir(ctx)]
    for root in chosen:
        if not (root / "log").exists():
            raise InvalidInput(
                f"no ledger at {root}: nothing written yet (check --data-dir or ${DATA_DIR_ENV})")
    return chosen


MASTER_HELP = "Spark master URL (default local[*]; spark://HOST:PORT for a standalone cluster)."


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
        None, "--order", metavar="cluster|seq|key",
        help="Layout: cluster (default; as sealing writes: rows by group then seq, row groups "
             "of whole groups, read by the read index), seq (row groups of --row-group-events "
             "in seq order) or key (the same row groups sorted by group, topic, queue, seq)."),
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
        raise InvalidInput(f"invalid --order {order!r}: use {', '.join(ORDERS)}")
    chosen = _spark_roots(ctx, roots, many=True)
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
    roots: list[Path] = typer.Option(
        None, "--root", metavar="DIR",
        help="A ledger data directory (a shard); repeat for several, read as one dataset "
             "(default: --data-dir, or every shard of --cluster)."),
    master: str = typer.Option(None, "--master", metavar="URL", help=MASTER_HELP),
    as_json: bool = json_opt(),
) -> None:
    """Committed offsets at TIME computed in Spark from checkpoint + log (what `at` prints);
    over several roots, the union of their answers."""
    from spark_compaction import replay as replay_fn
    from spark_compaction.timeline import ledger_now_ms

    if (when is None) == (seq is None):
        raise InvalidInput("replay needs exactly one of --at TIME or --seq N")
    chosen = _spark_roots(ctx, roots, many=True)
    at_ts = None
    if when is not None:
        at_ts = time_arg(when, "--at")
        if at_ts is None:
            at_ts = ledger_now_ms(chosen)
    rows = replay_fn(chosen, at_ts=at_ts, at_seq=seq, group=group, master=master)
    emit([{c: r.get(c) for c in STATE_COLUMNS} for r in rows], as_json, STATE_COLUMNS,
         empty="no offsets at that time")


@app.command()
def audit(
    ctx: typer.Context,
    since: str = typer.Option(None, "--since", metavar="TIME",
                              help="Report anomalies and resets from this ledger time on."),
    report: Path = typer.Option(None, "--report", metavar="FILE.html",
                                help="Also write an HTML report (charts embedded)."),
    roots: list[Path] = typer.Option(
        None, "--root", metavar="DIR",
        help="A ledger data directory (a shard); repeat for several, audited as one dataset "
             "(default: --data-dir, or every shard of --cluster)."),
    master: str = typer.Option(None, "--master", metavar="URL", help=MASTER_HELP),
    as_json: bool = json_opt(),
) -> None:
    """Check the view against a full Spark replay and list anomalies and resets; exit 1 when
    there are findings."""
    from spark_compaction import audit as audit_fn

    chosen = _spark_roots(ctx, roots, many=True)
    since_ts = None
    if since is not None:
        since_ts = time_arg(since, "--since")
        if since_ts is None:
            from spark_compaction.timeline import ledger_now_ms

            since_ts = ledger_now_ms(chosen)
    with spark_progress() as step:
        out = audit_fn(chosen, since_ts=since_ts, master=master, report=report, progress=step)
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
        note(f"audit of {out['root']}: " + (f"findings: {counts}" if counts else "clean")
             + f"; {len(out['resets'])} resets" + (f"; report {out['report']}"
                                                    if out["report"] else ""))
    if not out["clean"]:
        raise typer.Exit(EXIT_REFUSED)


# ---------------------------------------------------------------------- (end of Spark commands)
