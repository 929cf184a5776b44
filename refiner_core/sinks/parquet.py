"""Parquet sink."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..blocks import split_table
from ..validation import check_positive
from .files import FileSink

DEFAULT_ROW_GROUP_ROWS = 1024 * 1024
DEFAULT_ROW_GROUP_BYTES = 64 * 1024 * 1024


class RowGroupWriter:
    """Writes tables to one Parquet file in row groups of ``max_rows`` rows, or fewer
    when ``max_bytes`` (in memory, as Arrow) is reached first, whatever the size of
    the blocks it is given.

    Blocks are held (not copied) until they fill a row group; :meth:`close` writes the
    rest as the last, smaller group. A pipeline whose steps yield 1,024-row blocks
    thus still writes large row groups, which compress better and read much faster.

    Example:
        >>> import io
        >>> out = io.BytesIO()
        >>> writer = RowGroupWriter(out, pa.schema([("i", pa.int64())]), max_rows=250)
        >>> for start in range(0, 900, 100):
        ...     writer.write(pa.table({"i": range(start, start + 100)}))
        >>> writer.close()
        >>> meta = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata
        >>> [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        [250, 250, 250, 150]
    """

    def __init__(
        self,
        file: Any,
        schema: pa.Schema,
        *,
        compression: str = "zstd",
        max_rows: int = DEFAULT_ROW_GROUP_ROWS,
        max_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    ) -> None:
        self._writer = pq.ParquetWriter(file, schema, compression=compression)
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._pending: list[pa.Table] = []
        self._rows = 0
        self._bytes = 0

    def write(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._rows += table.num_rows
        self._bytes += table.nbytes
        if self._rows >= self.max_rows or self._bytes >= self.max_bytes:
            self._flush(last=False)

    def _flush(self, *, last: bool) -> None:
        groups = list(split_table(pa.concat_tables(self._pending), self.max_rows, self.max_bytes))
        # a limit was reached, so every slice is a full group but perhaps the last, which
        # then waits for more rows
        partial = len(groups) > 1 and groups[-1].num_rows < groups[0].num_rows
        rest = [groups.pop()] if partial and not last else []
        for group in groups:
            self._writer.write_table(group, row_group_size=group.num_rows)
        self._pending = rest
        self._rows = sum(t.num_rows for t in rest)
        self._bytes = sum(t.nbytes for t in rest)

    def close(self) -> None:
        if self._pending:
            self._flush(last=True)
        self._writer.close()


class ParquetSink(FileSink):
    """Writes ``<output>/<shard>__<attempt>.parquet`` per shard attempt (zstd by default).

    Row groups hold ``row_group_size`` rows (about 1M by default), or fewer when they
    would pass ``row_group_bytes`` of Arrow data (64 MiB by default), however small the
    blocks the pipeline produces.

    Example:
        >>> import tempfile, refiner_core as mdr
        >>> out = tempfile.mkdtemp()
        >>> stats = mdr.from_items([{"a": 1}]).write_parquet(out).launch_local()
        >>> stats.summary.counters["rows_written"]
        1
    """

    format = "parquet"
    extension = "parquet"
    read_suffixes = (".parquet", ".pq")

    def __init__(
        self,
        output: str,
        *,
        compression: str = "zstd",
        row_group_size: int = DEFAULT_ROW_GROUP_ROWS,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        **options: Any,
    ) -> None:
        check_positive("write_parquet row_group_size", row_group_size)
        check_positive("write_parquet row_group_bytes", row_group_bytes)
        super().__init__(output, **options)
        self.compression = compression
        self.row_group_size = row_group_size
        self.row_group_bytes = row_group_bytes

    def open_table_writer(self, file: Any, schema: pa.Schema) -> RowGroupWriter:
        return RowGroupWriter(
            file,
            schema,
            compression=self.compression,
            max_rows=self.row_group_size,
            max_bytes=self.row_group_bytes,
        )
