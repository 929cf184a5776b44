"""Blocks: Arrow tables or lists of rows, their size limits and conversions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from .asset_values import check_python_values
from .ndarrays import nested_list_array, plain_values
from .row import Row

DEFAULT_ROW_BLOCK_ROWS = 1024
DEFAULT_ARROW_BLOCK_ROWS = 65_536
DEFAULT_VECTORIZED_BLOCK_BYTES = 64 * 1024 * 1024


def split_table(table: pa.Table, max_rows: int | None, max_bytes: int | None) -> Iterator[pa.Table]:
    """Slice ``table`` so no piece exceeds ``max_rows`` rows or about ``max_bytes`` bytes."""
    n = table.num_rows
    if n == 0:
        return
    step = max_rows or n
    if max_bytes is not None and table.nbytes > max_bytes:
        per_row = max(1, table.nbytes // n)
        step = max(1, min(step, max_bytes // per_row))
    if step >= n:
        yield table
        return
    for start in range(0, n, step):
        yield table.slice(start, step)


def split_rows(rows: list[Row], max_rows: int) -> Iterator[list[Row]]:
    if len(rows) <= max_rows:
        yield rows
        return
    for start in range(0, len(rows), max_rows):
        yield rows[start : start + max_rows]


def table_to_rows(table: pa.Table) -> list[Row]:
    wrap = Row._wrap
    return [wrap(d) for d in table.to_pylist()]


_ARROW_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


def build_array(values: list[Any], arrow_type: pa.DataType | None = None) -> pa.Array:
    """``pa.array(values, type=arrow_type)``, with N-D numpy arrays as nested lists and 0-D
    ones as scalars (:mod:`refiner_core.ndarrays`); only a column Arrow rejects is walked."""
    nested = nested_list_array(values)
    if nested is not None:
        return nested if arrow_type is None else nested.cast(arrow_type)
    try:
        return pa.array(values, type=arrow_type)
    except _ARROW_ERRORS:
        plain = plain_values(values)
        if plain is values:
            raise
    return pa.array(plain, type=arrow_type)


def _first_bad_value(values: list[Any], arrow_type: pa.DataType) -> tuple[int, Any]:
    for i, v in enumerate(values):
        try:
            build_array([v], arrow_type)
        except _ARROW_ERRORS:
            return i, v
    return -1, None


class SchemaBuilder:
    """Turns row blocks into Arrow tables with stable column types across blocks.

    Declared dtypes win; then the type a column took in an earlier block; then the
    source's own type; otherwise Arrow infers it from the values.
    """

    def __init__(self, declared: dict[str, pa.Field], hint: pa.Schema | None = None) -> None:
        self.declared = dict(declared)
        self.hint = {f.name: f for f in hint} if hint is not None else {}
        self.fixed: dict[str, pa.Field] = {}

    def to_table(
        self, rows: list[Row], *, shard_id: str | None = None, first_row: int = 0
    ) -> pa.Table:
        names: dict[str, None] = {}
        for row in rows:
            for key in row:
                names.setdefault(key, None)
        arrays, fields = [], []
        for name in names:
            values = [row.get(name) for row in rows]
            field = self.declared.get(name) or self.fixed.get(name) or self.hint.get(name)
            array = None
            if field is not None:
                check_python_values(name, values, field, shard_id=shard_id, first_row=first_row)
                try:
                    array = build_array(values, field.type)
                except _ARROW_ERRORS as exc:
                    if name in self.declared or name in self.fixed:
                        i, bad = _first_bad_value(values, field.type)
                        origin = (
                            "declared dtype" if name in self.declared else "type from earlier rows"
                        )
                        raise ValueError(
                            f"column {name!r}: value {bad!r} in row {first_row + max(i, 0)} of "
                            f"shard {shard_id} does not fit the {origin} {field.type} ({exc}). "
                            f"Fix the callback, or declare the type with dtypes={{{name!r}: ...}}"
                        ) from exc
                    field = None
            if array is None:
                try:
                    array = build_array(values)
                except _ARROW_ERRORS as exc:
                    raise ValueError(
                        f"column {name!r} of shard {shard_id}: cannot build an Arrow column from "
                        f"the values ({exc}); return one consistent type per column or declare it "
                        f"with dtypes={{{name!r}: ...}}"
                    ) from exc
                field = pa.field(name, array.type)
            assert field is not None  # an array built from a field keeps it; others made one
            if not pa.types.is_null(field.type):
                self.fixed.setdefault(name, field)
            arrays.append(array)
            fields.append(field.with_nullable(True))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def conform(table: pa.Table, schema: pa.Schema, *, where: str) -> pa.Table:
    """Make ``table`` match ``schema`` (the first block's) or raise an error naming the column."""
    if table.schema.equals(schema, check_metadata=False):
        return table.cast(schema) if table.schema != schema else table
    columns = []
    for field in schema:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, type=field.type))
            continue
        column = table.column(field.name)
        if not column.type.equals(field.type):
            try:
                column = column.cast(field.type)
            except (pa.ArrowException, TypeError, ValueError) as exc:
                hint = (
                    " (it was all null in the first block, so its type was unknown)"
                    if pa.types.is_null(field.type)
                    else ""
                )
                raise ValueError(
                    f"{where}: column {field.name!r} has type {column.type} but earlier rows "
                    f"wrote {field.type}{hint}. Declare its type with dtypes={{{field.name!r}: ...}}"
                ) from exc
        columns.append(column)
    extra = [n for n in table.column_names if n not in schema.names]
    if extra:
        raise ValueError(
            f"{where}: columns {extra} appear in later rows but not in the first block written; "
            "give every row the same columns (None for missing values)"
        )
    return pa.Table.from_arrays(columns, schema=schema)
