"""Dagster's standard table metadata for a published dataset version.

Every finalization (and inline publication) records, besides the engine counters:

``dagster/column_schema``        the written Arrow schema; asset columns are typed as what
                                 they hold (``image blob reference``, ``list<video path>``)
                                 and tagged ``refiner/asset``
``dagster/table_name``           the dataset's dotted name: its asset key joined by dots
                                 (``robotics.episodes``), the same for every version and
                                 partition
``dagster/row_count``            rows of an unpartitioned dataset
``dagster/partition_row_count``  rows of the partition, on partitioned datasets
``dagster/uri``                  the published version folder
``refiner/dataset_folder``       the dataset (partition) folder: readers given it, such as
                                 ``mdr.read_parquet``, read its published version

Example:
    >>> import pyarrow as pa, refiner_core as mdr
    >>> from refiner_dagster.table_metadata import column_schema
    >>> schema = pa.schema([pa.field("episode", pa.int64()),
    ...                     mdr.datatype.to_field("image", mdr.datatype.blob_reference("image"))])
    >>> [(c.name, c.type) for c in column_schema(schema).columns]
    [('episode', 'int64'), ('image', 'image blob reference')]
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import pyarrow as pa

import refiner_core as mdr

from .append import version_inheritance
from .storage import DatasetVersion
from .tables import version_schema

__all__ = ["column_schema", "dataset_table_name", "table_metadata"]

_FORM_NAMES = {"blob": "blob reference", "path": "path", "bytes": "bytes"}


def _column(field: pa.Field) -> dg.TableColumn:
    info = mdr.datatype.asset_of(field)
    nullable = "" if field.nullable else " (not null)"
    if info is None:
        return dg.TableColumn(field.name, str(field.type), description=nullable.strip() or None)
    shown = f"{info.kind} {_FORM_NAMES.get(info.form, info.form)}"
    if info.is_list:
        shown = f"list<{shown}>"
    what = {
        "blob": "references {path, offset, size} into packed blocks",
        "path": "paths of copied files",
        "bytes": "inline bytes",
    }.get(info.form, info.form)
    return dg.TableColumn(
        field.name,
        shown,
        description=f"{info.kind} asset column: {what}; Arrow type {field.type}{nullable}",
        tags={"refiner/asset": info.kind, "refiner/asset_form": info.form},
    )


def column_schema(schema: pa.Schema) -> dg.TableSchema:
    """A ``TableSchema`` of an Arrow schema, asset columns typed by what they hold."""
    return dg.TableSchema(columns=[_column(f) for f in schema])


def dataset_table_name(version: DatasetVersion) -> str:
    """The dataset's name, the same across versions and partitions: its asset key
    joined by dots (``["robotics", "episodes"]`` -> ``robotics.episodes``)."""
    return ".".join(version.asset_path)


def table_metadata(version: DatasetVersion, summary: mdr.DatasetSummary) -> dict[str, Any]:
    """The standard ``dagster/*`` table metadata of a published (or pending) version."""
    rows = summary.rows_written
    metadata: dict[str, Any] = {
        "dagster/table_name": dg.MetadataValue.text(dataset_table_name(version)),
        "dagster/uri": dg.MetadataValue.path(version.url),
        "refiner/dataset_folder": dg.MetadataValue.path(version.folder.url),
    }
    inheritance = version_inheritance(version)
    if inheritance is not None:  # an append: its rows are the parent's and the new ones
        rows += inheritance.rows
        metadata["refiner/appended_to"] = dg.MetadataValue.text(inheritance.parent)
        metadata["refiner/rows_inherited"] = dg.MetadataValue.int(inheritance.rows)
        metadata["refiner/rows_appended"] = dg.MetadataValue.int(summary.rows_written)
        metadata["refiner/files_inherited"] = dg.MetadataValue.int(len(inheritance.files))
    if version.partition_key is None:
        metadata["dagster/row_count"] = dg.MetadataValue.int(rows)
    else:
        metadata["dagster/partition_row_count"] = dg.MetadataValue.int(rows)
    schema = version_schema(version)
    if schema is not None:
        metadata["dagster/column_schema"] = dg.MetadataValue.table_schema(column_schema(schema))
    return metadata
