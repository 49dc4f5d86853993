"""An order-independent content checksum of events, computed in Spark.

The sum of xxhash64 over every column of each row (plus a bitmap of which columns are null, since
xxhash64 skips nulls and would otherwise hash `(null, "a")` like `("a", null)`), summed as a
decimal so that it cannot overflow. Row order, file boundaries and row-group layout do not change
it; any changed, lost or duplicated row does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from ledger.fold.events import COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class Checksum(msgspec.Struct, frozen=True):
    """Row count and the sum of row hashes."""

    rows: int
    hash_sum: int


def checksum_expr(columns: tuple[str, ...] = COLUMNS) -> str:
    """Spark SQL of one row's hash."""
    nulls = " + ".join(
        f"(CASE WHEN `{c}` IS NULL THEN {1 << i} ELSE 0 END)" for i, c in enumerate(columns)
    )
    cols = ", ".join(f"`{c}`" for c in columns)
    return f"xxhash64(CAST({nulls} AS BIGINT), {cols})"


def content_checksums(df: DataFrame, group_expr: str) -> dict[Any, Checksum]:
    """Checksums of the rows of `df` per value of `group_expr` (Spark SQL), one Spark job."""
    from pyspark.sql import functions as F

    rows = (
        df.selectExpr(f"{group_expr} AS g", f"CAST({checksum_expr()} AS DECIMAL(38, 0)) AS h")
        .groupBy("g")
        .agg(F.count("*").alias("rows"), F.sum("h").alias("total"))
        .collect()
    )
    return {r["g"]: Checksum(rows=int(r["rows"]), hash_sum=int(r["total"])) for r in rows}


def content_checksum(df: DataFrame) -> Checksum:
    """Checksum of the rows of `df` (events columns), one Spark job."""
    row = (
        df.selectExpr(f"CAST({checksum_expr()} AS DECIMAL(38, 0)) AS h")
        .selectExpr("count(*) AS rows", "sum(h) AS total")
        .collect()[0]
    )
    rows, total = row["rows"], row["total"]
    return Checksum(rows=int(rows), hash_sum=int(total) if total is not None else 0)
