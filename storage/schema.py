"""The log's row contract: an Arrow schema with int64 `seq` (dense, assigned by the log) and int64
`ts` (the caller's epoch ms), and appended rows conformed to it before they reach a frame.

Frames carry no dictionaries, so the schema has no dictionary columns; rows with the right
columns in another order are reordered, anything else is refused saying what differs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from storage.errors import SchemaError

SEQ_COLUMN = "seq"
TS_COLUMN = "ts"


def check_schema(schema: pa.Schema) -> None:
    """The log needs int64 `seq` and `ts` and no dictionary columns (frames carry no dictionaries)."""
    for name in (SEQ_COLUMN, TS_COLUMN):
        index = schema.get_field_index(name)
        if index < 0:
            raise SchemaError(f"the log's schema needs an int64 column {name!r}")
        if not schema.field(index).type.equals(pa.int64()):
            raise SchemaError(f"column {name!r} must be int64, got {schema.field(index).type}")
    if len(set(schema.names)) != len(schema.names):
        raise SchemaError(f"duplicate column names in {schema.names}")
    for field in schema:
        if pa.types.is_dictionary(field.type):
            raise SchemaError(
                f"column {field.name} is dictionary-typed; use the value type (Parquet "
                "dictionary-encodes strings anyway)"
            )


def not_null_indices(schema: pa.Schema) -> tuple[int, ...]:
    """Columns that must hold no nulls: the non-nullable ones and ts (seq is overwritten)."""
    seq_index = schema.get_field_index(SEQ_COLUMN)
    ts_index = schema.get_field_index(TS_COLUMN)
    return tuple(
        i for i, f in enumerate(schema)
        if i != seq_index and (not f.nullable or i == ts_index)
    )


def conform(
    data: pa.RecordBatch | pa.Table, schema: pa.Schema, not_null: tuple[int, ...]
) -> pa.RecordBatch:
    """The rows as one record batch of the log's schema, or SchemaError saying what differs."""
    if isinstance(data, pa.Table):
        table = data.combine_chunks()
        batches = table.to_batches()
        if not batches:
            batch = pa.RecordBatch.from_pylist([], schema=table.schema)
        elif len(batches) == 1:
            batch = batches[0]
        else:
            batch = pa.concat_batches(batches)
    elif isinstance(data, pa.RecordBatch):
        batch = data
    else:
        raise SchemaError(f"append takes a pyarrow RecordBatch or Table, got {type(data)}")
    if batch.schema.equals(schema):
        for index in not_null:
            if batch.column(index).null_count:
                name = schema.field(index).name
                raise SchemaError(f"column {name} holds nulls but is not nullable")
        return batch
    found = batch.schema.names
    if found != schema.names:
        missing = [n for n in schema.names if n not in found]
        extra = [n for n in found if n not in schema.names]
        if missing or extra or len(found) != len(set(found)):
            raise SchemaError(
                f"rows do not match the log's columns: missing {missing}, extra {extra}"
            )
        batch = batch.select(schema.names)
    for index, field in enumerate(schema):
        column = batch.column(index)
        if not column.type.equals(field.type):
            raise SchemaError(f"column {field.name} is {column.type}, the log has {field.type}")
        if column.null_count and index in not_null:
            raise SchemaError(f"column {field.name} holds nulls but is not nullable")
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def check_columns(schema: pa.Schema, columns: list[str] | None) -> list[str]:
    """The columns a read asked for (all when None); unknown names are refused up front."""
    if columns is None:
        return list(schema.names)
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise SchemaError(f"unknown columns {unknown}; the log has {schema.names}")
    return list(columns)


def check_cluster_columns(schema: pa.Schema, columns: tuple[str, ...]) -> None:
    """The clustering key names columns of the schema other than seq."""
    unknown = [c for c in columns if c not in schema.names or c == SEQ_COLUMN]
    if unknown:
        raise SchemaError(f"cluster_columns {unknown} are not columns of the log (seq comes "
                          f"last by itself); the log has {schema.names}")


def check_where(schema: pa.Schema, where: Mapping[str, Sequence[object]] | None
                ) -> dict[str, tuple[object, ...]] | None:
    """A keyed read's conditions: known columns, each with a list of non-null values."""
    if not where:
        return None
    out: dict[str, tuple[object, ...]] = {}
    for name, values in where.items():
        if name not in schema.names:
            raise SchemaError(f"unknown column {name!r} in where; the log has {schema.names}")
        if isinstance(values, str | bytes) or any(v is None for v in values):
            raise SchemaError(f"where {name!r} takes a list of non-null values, got {values!r}")
        out[name] = tuple(values)
    return out
