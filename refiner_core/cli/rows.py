"""The rows of an output's table files, and the media references their cells hold.

Rows come numbered: ``row`` counts over the whole table (files in the summary's order),
``file_row`` within the file. Asset columns are read from the Parquet schema's asset
marks, else from the Dagster version record; cells shaped like ``{path, offset, size}``
count as blob references in any column.

Example:
    >>> import tempfile, refiner_core as mdr
    >>> from refiner_core.cli.rows import iter_rows
    >>> from refiner_core.cli.storage import open_output
    >>> out = tempfile.mkdtemp()
    >>> _ = mdr.from_items([{"n": 1}, {"n": 2}]).write_parquet(out).launch_local()
    >>> [(r.row, r.values["n"]) for r in iter_rows(open_output(out))]
    [(0, 1), (1, 2)]
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..datatype import asset_of
from ..io.parallel_reads import map_in_order, open_table_file
from .storage import StoredOutput

BATCH_ROWS = 1024


@dataclass(frozen=True)
class AssetColumn:
    """A column whose cells point at media: ``kind`` (image, video …), ``form`` (blob,
    path or bytes), and whether cells are lists."""

    name: str
    kind: str
    form: str
    is_list: bool


@dataclass(frozen=True)
class TableRow:
    """One row of the table and where it is."""

    row: int
    file: str
    file_row: int
    values: dict[str, Any]

    def where(self) -> str:
        return f"row {self.row} ({self.file}, row {self.file_row} of that file)"


@dataclass(frozen=True)
class Reference:
    """One media reference in a cell: a blob range (``offset``/``size`` set) or a file path."""

    column: str
    path: str
    offset: int | None = None
    size: int | None = None
    checksum: str | None = None
    element: int | None = None  # index inside a list cell
    kind: str = "file"

    @property
    def is_blob(self) -> bool:
        return self.offset is not None

    def describe(self) -> str:
        cell = self.column if self.element is None else f"{self.column}[{self.element}]"
        if self.is_blob:
            end = (self.offset or 0) + (self.size or 0)
            return f"column {cell}: {self.path} [{self.offset}, {end})"
        return f"column {cell}: {self.path}"


def _schema_columns(schema: pa.Schema) -> list[AssetColumn]:
    columns = []
    for f in schema:
        info = asset_of(f)
        if info is not None:
            columns.append(AssetColumn(f.name, info.kind, info.form, info.is_list))
    return columns


def _open(output: StoredOutput, relative: str):
    return open_table_file(output.folder.fs, output.table_path(relative))


def asset_columns(output: StoredOutput) -> list[AssetColumn]:
    """The output's asset columns (Parquet schema marks, else the Dagster version record)."""
    files = output.tables
    if output.format == "parquet" and files:
        import pyarrow.parquet as pq

        with _open(output, files[0]) as f:
            return _schema_columns(pq.ParquetFile(f).schema_arrow)
    if output.format == "lance":
        from .. import read_lance

        pipeline = read_lance(output.url, storage_options=output.storage_options or None)
        pipeline.plan()  # reads the dataset's schema, asset marks included
        schema = pipeline.source.schema_hint()
        if schema is not None:
            return _schema_columns(schema)
    recorded = (output.version or {}).get("asset_columns") or {}
    return [
        AssetColumn(
            name,
            str(info.get("kind", "file")),
            str(info.get("form", "path")),
            bool(info.get("list")),
        )
        for name, info in recorded.items()
    ]


def _parquet_rows(output: StoredOutput, relative: str) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    with _open(output, relative) as f:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=BATCH_ROWS):
            yield from batch.to_pylist()


def _jsonl_rows(output: StoredOutput, relative: str) -> Iterator[dict[str, Any]]:
    with _open(output, relative) as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def iter_rows(output: StoredOutput, *, threads: int = 1) -> Iterator[TableRow]:
    """Every row of the output's table, numbered over the table and within its file.

    With ``threads`` above 1, Parquet and JSONL files are read whole, that many at once,
    up to twice as many ahead of the row being used (more memory, far less waiting on
    an object store); with 1 they stream one batch at a time."""
    row = 0
    if output.format == "lance":
        from .. import read_lance

        for file_row, lance_row in enumerate(
            read_lance(output.url, storage_options=output.storage_options or None).iter_rows()
        ):
            yield TableRow(row, "(lance dataset)", file_row, dict(lance_row))
            row += 1
        return
    read = _jsonl_rows if output.format == "jsonl" else _parquet_rows
    files: Iterable[tuple[str, Iterable[dict[str, Any]]]]
    if threads > 1:  # whole files, read ahead concurrently
        tables = output.tables
        loaded = map_in_order(lambda r: list(read(output, r)), tables, max_workers=threads)
        files = zip(tables, loaded, strict=True)
    else:
        files = ((relative, read(output, relative)) for relative in output.tables)
    for relative, rows in files:
        for file_row, values in enumerate(rows):
            yield TableRow(row, relative, file_row, values)
            row += 1


def _is_blob(value: Any) -> bool:
    return isinstance(value, dict) and {"path", "offset", "size"} <= set(value)


def _reference(column: str, value: Any, element: int | None, kind: str) -> Reference | None:
    if _is_blob(value):
        return Reference(
            column=column,
            path=value["path"],
            offset=value["offset"],
            size=value["size"],
            checksum=value.get("checksum"),
            element=element,
            kind=kind,
        )
    if isinstance(value, str):
        return Reference(column=column, path=value, element=element, kind=kind)
    return None


def asset_prefixes(output: StoredOutput) -> tuple[str, ...]:
    """URL prefixes of the output's asset folders: a string cell under one of them is a
    copied file even where no schema marks its column (JSONL)."""
    subdirs = output.layout.get("asset_subdirs") or ["assets"]
    return tuple(output.folder.url_of(d).rstrip("/") + "/" for d in subdirs)


def references(
    row: TableRow, columns: list[AssetColumn], prefixes: tuple[str, ...] = ()
) -> Iterator[Reference]:
    """The media references of ``row``: asset columns' blobs and paths, and elsewhere any
    blob-shaped cell or path under ``prefixes``. Nulls and inline bytes have none."""
    marked = {c.name: c for c in columns}
    for name, value in row.values.items():
        column = marked.get(name)
        if column is not None and column.form == "bytes":
            continue
        kind = column.kind if column is not None else "file"
        cells = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for element, cell in cells:
            if cell is None:
                continue
            under_assets = bool(prefixes) and isinstance(cell, str) and cell.startswith(prefixes)
            if column is None and not (_is_blob(cell) or under_assets):
                continue
            ref = _reference(name, cell, element, kind)
            if ref is not None:
                yield ref
