"""Reading a published dataset version back: a lazy ``mdr`` pipeline and its schema.

Downstream assets get references, never media bytes: Parquet and Lance keep the
asset marks in their schema, and for JSONL the IO manager records each asset
column's kind and form so the reader declares the same dtypes again.

Example:
    >>> from refiner_dagster.tables import asset_dtype
    >>> asset_dtype({"kind": "video", "form": "blob", "list": False}).arrow_type.names
    ['path', 'offset', 'size']
"""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import refiner_core as mdr
from refiner_core.vocabulary import FORMATS, AssetForm

from .append import version_inheritance
from .lerobot_format import LEROBOT_FORMAT, lerobot_schema, open_lerobot
from .storage import DatasetVersion

_PATH_DTYPES = {
    "file": mdr.datatype.file_path,
    "image": mdr.datatype.image_path,
    "video": mdr.datatype.video_path,
    "audio": mdr.datatype.audio_path,
}


def asset_dtype(info: dict[str, Any]) -> Any:
    """The ``mdr.datatype`` of a recorded asset column ``{kind, form, list}``."""
    kind = info.get("kind", "file")
    if info.get("form") == "blob":
        dtype = mdr.datatype.blob_reference(kind)
    elif info.get("form") == "clip":
        dtype = mdr.datatype.video_clip()
    else:
        dtype = _PATH_DTYPES.get(kind, mdr.datatype.file_path)()
    return mdr.datatype.list_(dtype) if info.get("list") else dtype


def written_asset_columns(pipeline: mdr.Pipeline, mode: AssetForm) -> dict[str, dict[str, Any]]:
    """Asset columns the writer will emit, as ``{name: {kind, form, list}}``.

    ``mode`` is ``"blobs"`` (cells become blob references) or ``"files"`` (paths).
    Columns come from declared ``dtypes=`` and the source's schema (known once planned).
    """
    fields: dict[str, pa.Field] = {}
    hint = None
    with contextlib.suppress(Exception):
        hint = pipeline.source.schema_hint()
    if hint is not None:
        fields.update({f.name: f for f in hint})
    fields.update(pipeline.declared_fields())
    columns = {}
    for name, field in fields.items():
        info = mdr.datatype.asset_of(field)
        if info is None:
            continue
        form = "blob" if mode == "blobs" else "path"
        columns[name] = {"kind": info.kind, "form": form, "list": info.is_list}
    return columns


def _first_data_file(version: DatasetVersion) -> mdr.DataFile | None:
    """The version's first table file: its own, else (an append that wrote no rows) the
    first one it inherits."""
    first = version.record.get("first_file")
    if first is None:
        summary = version.summary()
        first = summary.files[0] if summary is not None and summary.files else None
    if first is not None:
        return version.output_folder().file(first)
    inheritance = version_inheritance(version)
    if inheritance is not None and inheritance.tables:
        return version.folder.file(inheritance.tables[0])
    return None


def version_schema(version: DatasetVersion) -> pa.Schema | None:
    """The written table's Arrow schema with asset marks (``None`` for an empty table)."""
    fmt = version.format
    if fmt == LEROBOT_FORMAT:
        return lerobot_schema(version)
    if fmt == "parquet":
        first = _first_data_file(version)
        if first is None:
            return None
        with first.open("rb") as f:
            return pq.read_schema(f)
    if fmt == "lance":
        pipeline = open_version(version)
        pipeline.plan()  # reads the dataset's schema with the engine's storage options
        return pipeline.source.schema_hint()
    columns = version.record.get("asset_columns", {})
    return pa.schema([mdr.datatype.to_field(n, asset_dtype(i)) for n, i in columns.items()])


def open_version(version: DatasetVersion, *, columns: list[str] | None = None) -> mdr.Pipeline:
    """A lazy pipeline over a version's table (rows carry references, not media)."""
    fmt = version.format
    options = version.storage_options or None
    empty = (
        int(version.record.get("files_written", 1) or 0) == 0
        and fmt != "lance"
        and not version.record.get("inherits")
    )
    if empty:
        return mdr.from_items([])
    if fmt == "parquet":
        return mdr.read_parquet(version.url, columns=columns, storage_options=options)
    if fmt == "jsonl":
        columns_info = version.record.get("asset_columns", {})
        dtypes = {name: asset_dtype(info) for name, info in columns_info.items()}
        return mdr.read_jsonl(version.url, dtypes=dtypes or None, storage_options=options)
    if fmt == "lance":
        return mdr.read_lance(version.url, columns=columns, storage_options=options)
    if fmt == LEROBOT_FORMAT:
        return open_lerobot(version, columns)
    raise ValueError(
        f"{version.describe()} has format {fmt!r}; refiner_dagster reads {', '.join(FORMATS)}"
    )
