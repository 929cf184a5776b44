"""JSON Lines sink."""

from __future__ import annotations

import datetime
import decimal
import json
import math
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


def _non_finite(value: Any) -> float | None:
    """The first NaN or infinite float inside ``value`` (nested lists and dicts too)."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found = _non_finite(item)
            if found is not None:
                return found
    return None


class _JsonlWriter:
    def __init__(self, file: Any) -> None:
        self.file = file
        self.lines = 0

    def write(self, table: pa.Table) -> None:
        dumps = json.dumps
        rows = table.to_pylist()
        try:
            lines = [
                dumps(row, default=_json_default, ensure_ascii=False, allow_nan=False)
                for row in rows
            ]
        except ValueError:  # a NaN or infinity: JSON has no token for them
            raise self._non_finite_error(rows) from None
        self.file.write(("\n".join(lines) + "\n").encode())
        self.lines += len(lines)

    def _non_finite_error(self, rows: list[dict[str, Any]]) -> ValueError:
        for index, row in enumerate(rows):
            for column, value in row.items():
                found = _non_finite(value)
                if found is not None:
                    return ValueError(
                        f"write_jsonl: column {column!r} of output line {self.lines + index + 1} "
                        f"holds {found!r}, which JSON cannot represent (readers such as "
                        "pyarrow.json reject it). Replace it in a map step (e.g. with None), "
                        "or write Parquet, which stores NaN and infinities"
                    )
        return ValueError("write_jsonl: a value is out of JSON's range")  # pragma: no cover

    def close(self) -> None:
        pass


class JsonlSink(FileSink):
    """Writes ``<output>/<shard>__<attempt>.jsonl`` per shard attempt, one object per line.

    Values must be JSON: bytes need ``assets=``, and a NaN or infinite float fails the
    shard naming its column and line (JSON has no token for them; Parquet stores them).

    Example:
        >>> import tempfile, refiner_core as mdr
        >>> out = tempfile.mkdtemp()
        >>> mdr.from_items([{"a": 1}]).write_jsonl(out).launch_local().summary.counters["rows_written"]
        1
    """

    format = "jsonl"
    extension = "jsonl"
    read_suffixes = (".jsonl", ".json", ".ndjson")

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
