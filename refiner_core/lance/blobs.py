"""Lance blob columns, read as the bytes they hold.

Lance stores a ``large_binary`` column marked ``lance-encoding:blob`` apart from the
other columns (large values in files of their own) and, scanned plainly, returns a
descriptor struct per row (where the bytes sit in Lance's files), which means nothing
outside Lance. ``read_lance`` asks Lance for the bytes themselves
(``blob_handling="all_binary"``), and its rows and blocks show such a column as
``large_binary`` that keeps the blob mark, so ``write_lance`` stores it as a blob again.

Example:
    >>> import pyarrow as pa
    >>> schema = pa.schema([pa.field("clip", pa.large_binary(), metadata={BLOB_KEY: b"true"})])
    >>> blob_columns(schema, None)
    ['clip']
    >>> readable_schema(schema).field("clip").type
    DataType(large_binary)
"""

from __future__ import annotations

import pyarrow as pa

BLOB_KEY = b"lance-encoding:blob"
_BLOB_EXTENSION = "lance.blob"  # Lance's schema type of blob columns of file format 2.2+


def is_blob_field(field: pa.Field) -> bool:
    """Whether Lance stores ``field`` as a blob column."""
    if (field.metadata or {}).get(BLOB_KEY) == b"true":
        return True
    return getattr(field.type, "extension_name", "").startswith(_BLOB_EXTENSION)


def blob_field(field: pa.Field) -> pa.Field:
    """``field`` as ``read_lance`` returns it: ``large_binary`` bytes with the blob mark."""
    metadata = {k: v for k, v in (field.metadata or {}).items() if not k.startswith(b"lance-")}
    metadata[BLOB_KEY] = b"true"
    return pa.field(field.name, pa.large_binary(), nullable=True, metadata=metadata)


def readable_schema(schema: pa.Schema) -> pa.Schema:
    """A dataset's schema with its blob columns as the bytes ``read_lance`` returns."""
    return pa.schema(
        [blob_field(f) if is_blob_field(f) else f for f in schema], metadata=schema.metadata
    )


def blob_columns(schema: pa.Schema, columns: list[str] | None) -> list[str]:
    """The blob columns of ``schema`` among ``columns`` (all columns when ``None``)."""
    wanted = set(schema.names if columns is None else columns)
    return [f.name for f in schema if f.name in wanted and is_blob_field(f)]


def mark_blob_columns(table: pa.Table, names: list[str]) -> pa.Table:
    """``table`` (read with ``blob_handling="all_binary"``) with the blob mark back on
    ``names``: Lance returns the bytes without it."""
    if not names:
        return table
    fields = [blob_field(f) if f.name in names else f for f in table.schema]
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))
