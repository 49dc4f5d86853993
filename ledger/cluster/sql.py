"""SQL over a cluster: one query over the union of the shards' tables, in one DuckDB.

"Merged as one ledger would answer" for an arbitrary SELECT means the query sees one table per
name, holding every shard's rows: so a GROUP BY, a join, an ORDER BY ... LIMIT or a count is
answered over all of them at once, never per shard and then concatenated. Each table the query
names is fetched from every shard whole (`SELECT * FROM name`, through the shard's own read-only
SQL, locally or over HTTP as Arrow) with a `shard` column added, then the query runs in the same
locked engine as one ledger's SQL. Queues are held on every shard, so `queues` and `appends`
come from the primary shard only, and so do the queue events of `events` and `events_raw`.
The cost is the named tables' size: aggregate early in the query, never expect the shards to.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from ledger.errors import InvalidInput
from ledger.reads.sandbox import LOCKED_CONFIG, run_over_tables, statement_kind

#: The names one ledger's SQL knows (ledger/reads/sandbox.py), each a table of a cluster's SQL.
TABLES = ("events", "events_raw", "offsets", "client_offsets", "queues", "appends", "groups",
          "progress", "pending_resets")
#: Held alike on every shard: taken from the primary only.
REPLICATED = frozenset({"queues", "appends"})
#: Group events from every shard, queue events from the primary only.
EVENT_TABLES = frozenset({"events", "events_raw"})


def tables_named(query: str) -> list[str]:
    """The ledger tables `query` reads (a read-only statement, checked first)."""
    con = duckdb.connect(":memory:", config=dict(LOCKED_CONFIG))
    try:
        statement_kind(con, query)
    finally:
        con.close()
    try:
        names = duckdb.get_table_names(query)
    except duckdb.Error as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "lag_series" in text:
            raise InvalidInput("sql over a cluster cannot call lag_series(): use `lag --since "
                               "--until --every` (it asks every shard)") from None
        raise InvalidInput(f"sql error: {text}") from None
    return sorted({n.lower() for n in names} & set(TABLES))


def shard_query(name: str, primary: bool) -> str | None:
    """What one shard is asked for table `name` (None: nothing, it is the primary's)."""
    if name in REPLICATED and not primary:
        return None
    if name in EVENT_TABLES and not primary:
        return f"SELECT * FROM {name} WHERE consumer_group IS NOT NULL"
    return f"SELECT * FROM {name}"


def union(parts: list[tuple[int, pa.Table]]) -> pa.Table:
    """The shards' tables of one name as one, each row with its shard."""
    tables = [t.append_column("shard", pa.array([index] * t.num_rows, pa.int32()))
              for index, t in parts]
    return pa.concat_tables(tables, promote_options="permissive")


def run(query: str, tables: dict[str, list[tuple[int, pa.Table]]],
        timeout_s: float | None = None) -> pa.Table:
    """`query` over the union of each named table's parts, stopped after `timeout_s`."""
    return run_over_tables({name: union(parts) for name, parts in tables.items()}, query,
                           timeout_s)
