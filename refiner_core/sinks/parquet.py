"""Parquet sink."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .files import FileSink


class ParquetSink(FileSink):
    """Writes ``<output>/<shard>__<attempt>.parquet`` per shard attempt (zstd by default).

    Example:
        >>> import tempfile, refiner_core as mdr
        >>> out = tempfile.mkdtemp()
        >>> stats = mdr.from_items([{"a": 1}]).write_parquet(out).launch_local()
        >>> stats.summary["rows_written"]
        1
    """

    format = "parquet"
    extension = "parquet"

    def __init__(self, output: str, *, compression: str = "zstd", **options: Any) -> None:
        super().__init__(output, **options)
        self.compression = compression

    def open_table_writer(self, file: Any, schema: pa.Schema) -> pq.ParquetWriter:
        return pq.ParquetWriter(file, schema, compression=self.compression)
