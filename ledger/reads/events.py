"""Events of the log by key, kind and time, as the `events` view shows them, read through the
log's read index (DESIGN.md, Storage): a group's or a key's events cost what the answer costs,
not what the ledger holds. Sealed segments are clustered by group, so the resident index names
the row groups that can hold a group's rows; the active segment's rows of a group are found in
memory.

Events from `Writer.prev_offset_stored_from` on store their prev_offset and are returned as
stored. Older ones (a data directory written before it was stored) get it derived as the
`events` view always did, in DuckDB, over the events before that seq only.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ledger.fold.events import EVENT_SCHEMA
from ledger.store.view import arrow_result, events_select, segments_source
from ledger.store.writer import Writer

#: The events view's columns and types (every column nullable, as a query result's).
EVENTS_SCHEMA = pa.schema([f.with_nullable(True) for f in EVENT_SCHEMA])
#: The column sealed segments are clustered by (`ledger.store.writer.log_settings`).
GROUP = "consumer_group"


def read_events(writer: Writer, *, group: str | None = None, topic: str | None = None,
                queue_id: int | None = None, kind: str | None = None,
                since_ms: int | None = None, until_ms: int | None = None,
                newest: int | None = None, queue_events: bool = True) -> pa.Table:
    """Matching events in seq order (EVENTS_SCHEMA): ts in [since_ms, until_ms], the newest
    `newest` of them when given; without the events of queues (no group) when `queue_events`
    is False. Arguments are checked by the caller."""
    wanted_newest = newest
    only_groups = not queue_events and group is None
    if only_groups:
        newest = None  # the newest N are counted after the queues' events are left out
    where: dict[str, list] = {}
    for name, value in ((GROUP, group), ("topic", topic), ("queue_id", queue_id),
                        ("kind", kind)):
        if value is not None:
            where[name] = [value]
    stored_from = writer.prev_offset_stored_from
    parts = []
    if stored_from is not None:
        parts.append(_plain(writer.log.read(
            seq_gte=stored_from or None, ts_gte=since_ms,
            ts_lt=None if until_ms is None else until_ms + 1, where=where or None,
            newest=newest)))
    if stored_from != 0 and not (newest is not None and parts and parts[0].num_rows >= newest):
        wanted = None if newest is None else newest - (parts[0].num_rows if parts else 0)
        parts.insert(0, _derived(writer, where, since_ms, until_ms, stored_from, wanted))
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    if only_groups:
        table = table.filter(pc.is_valid(table.column(GROUP)))
    if wanted_newest is not None and table.num_rows > wanted_newest:
        table = table.slice(table.num_rows - wanted_newest)
    return table


def _plain(table: pa.Table) -> pa.Table:
    """Rows as stored, shown as the events view shows them (actor defaults to the client)."""
    columns = table.columns
    at = table.schema.get_field_index("actor")
    actor = columns[at]
    if actor.null_count == len(actor):  # no actor recorded (no tokens): each is its client
        columns[at] = table.column("client_id")
    elif actor.null_count:
        columns[at] = pc.coalesce(actor, table.column("client_id"))
    return pa.Table.from_arrays(columns, schema=EVENTS_SCHEMA)


def _derived(writer: Writer, where: dict[str, list], since_ms: int | None,
             until_ms: int | None, before_seq: int | None, newest: int | None) -> pa.Table:
    """Events before seq `before_seq` (all: None) with prev_offset derived in DuckDB. Key
    conditions and the upper time bound apply before the derivation (they keep each event's
    predecessor), kind and the lower bound after. Names are of the name alphabet (checked by
    the caller): no quoting needed beyond the quotes."""
    pre, post = [], []
    for name in (GROUP, "topic", "queue_id"):
        if name in where:
            value = where[name][0]
            pre.append(f"{name} = {int(value)}" if isinstance(value, int) else f"{name} = '{value}'")
    if until_ms is not None:
        pre.append(f"ts <= {int(until_ms)}")
    if before_seq is not None:
        pre.append(f"seq < {int(before_seq)}")
    if "kind" in where:
        post.append(f"kind = '{where['kind'][0]}'")
    if since_ms is not None:
        post.append(f"ts >= {int(since_ms)}")
    log = writer.log
    paths = [s.path for s in log.segments()
             if (until_ms is None or s.ts_min <= until_ms)
             and (before_seq is None or s.base_seq < before_seq)]
    view = writer.ready_view()
    select = events_select(segments_source(paths, "events_tail"), " AND ".join(pre), None)
    inner = f"SELECT * FROM ({select}) {'WHERE ' + ' AND '.join(post) if post else ''} "
    inner += "ORDER BY seq DESC" + (f" LIMIT {int(newest)}" if newest is not None else "")
    found = arrow_result(view.con.execute(f"SELECT * FROM ({inner}) ORDER BY seq"))
    return pa.Table.from_arrays([found.column(n).cast(f.type) for n, f in
                                 zip(EVENTS_SCHEMA.names, EVENTS_SCHEMA, strict=True)],
                                schema=EVENTS_SCHEMA)
