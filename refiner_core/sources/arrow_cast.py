"""Applying declared dtypes (types and asset marks) to Arrow data."""

from __future__ import annotations

import pyarrow as pa

from ..asset_values import check_arrow_column


def apply_fields(table: pa.Table, fields: dict[str, pa.Field], *, where: str) -> pa.Table:
    """Cast the declared columns of ``table`` and attach their field metadata."""
    if not fields:
        return table
    schema = table.schema
    columns = list(table.columns)
    new_fields = list(schema)
    for i, current in enumerate(schema):
        declared = fields.get(current.name)
        if declared is None:
            continue
        column = columns[i]
        check_arrow_column(current.name, column, declared, where=where)
        if not column.type.equals(declared.type):
            try:
                column = column.cast(declared.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise ValueError(
                    f"{where}: column {current.name!r} of type {current.type} cannot be cast to "
                    f"the declared dtype {declared.type}: {exc}. Fix the dtypes= entry or the data"
                ) from exc
        columns[i] = column
        new_fields[i] = declared.with_nullable(True)
    return pa.Table.from_arrays(columns, schema=pa.schema(new_fields, metadata=schema.metadata))


def projected_schema(
    schema: pa.Schema, columns: list[str] | None, fields: dict[str, pa.Field]
) -> pa.Schema:
    """``schema`` narrowed to ``columns`` (all when ``None``) with ``fields`` applied."""
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)
    return schema_with_fields(schema, fields)


def schema_with_fields(schema: pa.Schema, fields: dict[str, pa.Field]) -> pa.Schema:
    """``schema`` with declared fields replacing their namesakes."""
    return pa.schema([fields.get(f.name, f) for f in schema], metadata=schema.metadata)
