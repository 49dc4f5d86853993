"""One group's state at a point, in Arrow: what `timeline.state_at_table` answers for a group
that clusters throughout, without DuckDB.

A group neither at broadcast at the checkpoint nor set to it by an event of the range has its
state as SCAN_SQL says (timeline.py): per key, the newest committed-setting row over the range's
events and the checkpoint's positions, its offset the committed one (a key whose newest row has
none is left out), its generation or 0. That is a sort and a pick of the last row of each key,
about a millisecond for a group's few thousand rows, where the two DuckDB queries of the general
path cost 8-10 ms of planning and pipelines whatever the rows (one group's state at T at 1M
events: 9.3 ms, bench/results/read-scaling-latest.md). A group that is or may be at broadcast
(its pulls and clients matter) answers None: the caller takes the general path.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ledger.reads.timeline import SETTING_KINDS, STATE_AT_SCHEMA

_KEY = ["topic", "queue_id"]
_SETTING = pa.array(SETTING_KINDS, pa.string())


def keyed_state(group: str, events: pa.Table, checkpoint: pa.Table | None) -> pa.Table | None:
    """STATE_AT_SCHEMA rows of `group` from its `events` of the range (seq order) and its
    `checkpoint` key rows (None: the empty start), in key order; None when the group is or may
    be at broadcast (or a mode cannot be read here): the general path answers then."""
    kinds = events.column("kind")
    settings = [events.filter(pc.equal(kinds, "group_config"))]
    if checkpoint is not None:
        settings.append(checkpoint.filter(pc.equal(checkpoint.column("row"), "group")))
    if any(broadcast_groups(rows) != set() for rows in settings):
        return None
    setting = events.filter(pc.is_in(kinds, value_set=_SETTING))
    parts = [pa.table({"topic": setting.column("topic"), "queue_id": setting.column("queue_id"),
                       "offset": setting.column("offset"),
                       "generation": setting.column("generation"),
                       "seq": setting.column("seq")})]
    if checkpoint is not None:
        positions = checkpoint.filter(pc.and_(pc.equal(checkpoint.column("row"), "position"),
                                              pc.is_null(checkpoint.column("client_id"))))
        parts.append(pa.table({
            "topic": positions.column("topic"), "queue_id": positions.column("queue_id"),
            "offset": positions.column("committed"),
            "generation": positions.column("generation"),
            "seq": pa.array(np.full(positions.num_rows, -1, np.int64))}))
    rows = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
    rows = rows.sort_by([("topic", "ascending", "at_end"), ("queue_id", "ascending", "at_end"),
                         ("seq", "ascending", "at_end")])  # DuckDB's order: bytes, nulls last
    newest = _last_of_each_key(rows)
    picked = rows.take(pa.array(newest, pa.int64()))
    picked = picked.filter(pc.is_valid(picked.column("offset")))
    return pa.Table.from_arrays([
        pa.array([group] * picked.num_rows, pa.string()),
        picked.column("topic").cast(pa.string()),
        picked.column("queue_id").cast(pa.int32()),
        picked.column("offset").cast(pa.int64()),
        pc.fill_null(picked.column("generation"), 0).cast(pa.int32()),
    ], schema=STATE_AT_SCHEMA)


def broadcast_mode(detail: str | None) -> bool | None:
    """Whether a group config's detail sets broadcast mode, as `json_extract_string(detail,
    '$.mode') = 'broadcast'` says in the SQL; None when it cannot be read here (not a JSON
    object: the SQL path decides, and raises as it would)."""
    if detail is None:
        return False
    try:
        config = msgspec.json.decode(detail)
    except msgspec.DecodeError:
        return None
    if not isinstance(config, dict):
        return None
    return config.get("mode") == "broadcast"


def broadcast_groups(rows: pa.Table) -> set[str] | None:
    """Groups of `rows` (group_config events or checkpoint group rows: consumer_group and
    detail) whose detail sets broadcast mode; None when a detail cannot be read here (the SQL
    path decides)."""
    found = set()
    for group, detail in zip(rows.column("consumer_group").to_pylist(),
                             rows.column("detail").to_pylist(), strict=True):
        mode = broadcast_mode(detail)
        if mode is None:
            return None
        if mode:
            found.add(group)
    return found


def _last_of_each_key(rows: pa.Table) -> np.ndarray:
    """Row numbers of the last row of each run of equal (topic, queue_id) in `rows`."""
    n = rows.num_rows
    if n == 0:
        return np.zeros(0, np.int64)
    last = np.zeros(n, bool)
    last[-1] = True
    for name in _KEY:
        column = rows.column(name).combine_chunks()
        valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), bool)
        differs = pc.fill_null(pc.not_equal(column.slice(0, n - 1), column.slice(1)), True)
        differs = np.asarray(differs.to_numpy(zero_copy_only=False), bool)
        differs &= ~(~valid[:-1] & ~valid[1:])  # two nulls are one key
        last[:-1] |= differs
    return np.flatnonzero(last)
