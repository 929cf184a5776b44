"""JSON Lines sink."""

from __future__ import annotations

import datetime
import decimal
import json
from typing import Any

import pyarrow as pa

from ..datatype import asset_of
from .files import FileSink


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot write a {type(value).__name__} value to JSONL")


def _has_binary(arrow_type: pa.DataType) -> bool:
    if (
        pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_fixed_size_binary(arrow_type)
    ):
        return True
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _has_binary(arrow_type.value_type)
    if pa.types.is_struct(arrow_type):
        return any(_has_binary(f.type) for f in arrow_type)
    return False


class _JsonlWriter:
    def __init__(self, file: Any) -> None:
        self.file = file

    def write(self, table: pa.Table) -> None:
        dumps = json.dumps
        lines = [dumps(row, default=_json_default, ensure_ascii=False) for row in table.to_pylist()]
        self.file.write(("\n".join(lines) + "\n").encode())

    def close(self) -> None:
        pass


class JsonlSink(FileSink):
    """Writes ``<output>/<shard>__<attempt>.jsonl`` per shard attempt, one object per line.

    Example:
        >>> import tempfile, refiner_core as mdr
        >>> out = tempfile.mkdtemp()
        >>> mdr.from_items([{"a": 1}]).write_jsonl(out).launch_local().summary["rows_written"]
        1
    """

    format = "jsonl"
    extension = "jsonl"

    def check_schema(self, schema: pa.Schema) -> None:
        for field in schema:
            if _has_binary(field.type):
                kind = "asset " if asset_of(field) else ""
                raise ValueError(
                    f"write_jsonl: {kind}column {field.name!r} holds bytes, which JSONL cannot "
                    "store. Pass assets=mdr.FileAssetConfig() or assets=mdr.BlobAssetConfig() to "
                    "store the bytes as files and write paths/references, or drop the column"
                )

    def open_table_writer(self, file: Any, schema: pa.Schema) -> _JsonlWriter:
        return _JsonlWriter(file)
