"""The ``<column>_checksum`` column that ``FileAssetConfig(checksum=...)`` writes.

A copied file's cell is a plain path, so its checksum goes into a sibling string
column (a list of strings for a list column), placed right after the asset column
and marked with field metadata naming the column it belongs to. Re-copying a table
that already has such a column replaces it; any other column of that name is an error.

Example:
    >>> import pyarrow as pa
    >>> f = checksum_field(pa.field("video", pa.string()), "sha256")
    >>> f.name, f.type, f.metadata[CHECKSUM_OF_KEY]
    ('video_checksum', DataType(string), b'video')
"""

from __future__ import annotations

import pyarrow as pa

CHECKSUM_OF_KEY = b"refiner.checksum.of"
CHECKSUM_ALGORITHM_KEY = b"refiner.checksum.algorithm"


def checksum_column_name(column: str) -> str:
    return f"{column}_checksum"


def checksum_field(asset_field: pa.Field, algorithm: str) -> pa.Field:
    is_list = pa.types.is_list(asset_field.type) or pa.types.is_large_list(asset_field.type)
    return pa.field(
        checksum_column_name(asset_field.name),
        pa.list_(pa.string()) if is_list else pa.string(),
        metadata={CHECKSUM_OF_KEY: asset_field.name.encode(), CHECKSUM_ALGORITHM_KEY: algorithm},
    )


def checksum_slot(schema: pa.Schema, asset_field: pa.Field) -> int | None:
    """Index of the existing checksum column of ``asset_field`` in ``schema`` (to be
    replaced), ``None`` when there is none; ``ValueError`` when a column of its name
    is not one."""
    name = checksum_column_name(asset_field.name)
    index = schema.get_field_index(name)
    if index < 0:
        return None
    metadata = schema.field(index).metadata or {}
    if metadata.get(CHECKSUM_OF_KEY) != asset_field.name.encode():
        raise ValueError(
            f"FileAssetConfig(checksum=...) writes the checksums of column {asset_field.name!r} "
            f"into a column {name!r}, but the table already has a column of that name; rename "
            "it (e.g. with a map step) or write without checksum="
        )
    return index
