"""Reading row groups of a Parquet file in batches whose size is bounded in bytes.

pyarrow decodes a whole batch at once and, by default, reads every column chunk of a
row group whole before decoding it (``pre_buffer``). A media table (inline images, audio, point clouds) can
hold gigabytes in one row group, so both are bounded here: the batch size comes from
the row groups' metadata, and columns whose chunks are larger than one batch are
streamed in ``READ_BUFFER_BYTES`` reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..io.datafile import is_local

READ_BUFFER_BYTES = 8 * 1024 * 1024


def read_chunks(group: pq.RowGroupMetaData, columns: list[str] | None) -> list[Any]:
    """The column chunks of ``group`` that reading ``columns`` (``None``: all) touches."""
    chunks = []
    for i in range(group.num_columns):
        chunk = group.column(i)
        path = chunk.path_in_schema
        if columns is None or any(path == c or path.startswith(c + ".") for c in columns):
            chunks.append(chunk)
    return chunks


def rows_per_batch(
    metadata: pq.FileMetaData,
    row_groups: Any,
    columns: list[str] | None,
    batch_rows: int,
    batch_bytes: int | None,
) -> int:
    """At most ``batch_rows``, and about ``batch_bytes`` of the read columns'
    uncompressed data, judged by the widest of ``row_groups``.

    Example:
        >>> import io, pyarrow as pa, pyarrow.parquet as pq
        >>> buf = io.BytesIO()
        >>> images = [i.to_bytes(2, "big") * 5_000 for i in range(100)]  # 10 kB each
        >>> pq.write_table(pa.table({"id": range(100), "image": images}), buf)
        >>> meta = pq.ParquetFile(buf).metadata
        >>> rows_per_batch(meta, [0], None, 65_536, 1_000_000)
        99
        >>> rows_per_batch(meta, [0], ["id"], 65_536, 1_000_000)
        65536
    """
    if batch_bytes is None:
        return batch_rows
    widest = 0.0
    for index in row_groups:
        group = metadata.row_group(index)
        if group.num_rows:
            size = sum(chunk.total_uncompressed_size for chunk in read_chunks(group, columns))
            widest = max(widest, size / group.num_rows)
    if widest == 0:
        return batch_rows
    return max(1, min(batch_rows, int(batch_bytes // widest)))


def needs_streaming(
    metadata: pq.FileMetaData, row_groups: Any, columns: list[str] | None, batch_bytes: int | None
) -> bool:
    """Whether a column chunk to read is larger than one batch may be."""
    if batch_bytes is None:
        return False
    return any(
        chunk.total_compressed_size > batch_bytes
        for index in row_groups
        for chunk in read_chunks(metadata.row_group(index), columns)
    )


def iter_row_group_batches(
    fs: Any,
    path: str,
    row_groups: Any,
    columns: list[str] | None,
    batch_rows: int,
    batch_bytes: int | None,
) -> Iterator[pa.RecordBatch]:
    """The record batches of ``row_groups`` of the Parquet file at ``path`` on ``fs``."""
    with fs.open(path, "rb") as f:
        metadata = pq.ParquetFile(f).metadata
        size = rows_per_batch(metadata, row_groups, columns, batch_rows, batch_bytes)
        if not needs_streaming(metadata, row_groups, columns, batch_bytes):
            parquet = pq.ParquetFile(f, metadata=metadata)
            yield from parquet.iter_batches(
                batch_size=size, row_groups=list(row_groups), columns=columns
            )
            return
    # Streaming interleaves reads of several columns; a remote file's read-ahead cache
    # would refetch a whole block for each, so every read goes straight to the store.
    options = {} if is_local(fs) else {"cache_type": "none"}
    with fs.open(path, "rb", **options) as f:
        parquet = pq.ParquetFile(
            f,
            metadata=metadata,
            pre_buffer=False,
            buffer_size=min(READ_BUFFER_BYTES, batch_bytes),
        )
        yield from parquet.iter_batches(
            batch_size=size, row_groups=list(row_groups), columns=columns
        )
