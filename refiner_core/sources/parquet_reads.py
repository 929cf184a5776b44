"""Reading row groups of a Parquet file in batches whose size is bounded in bytes.

pyarrow decodes a whole batch at once and, by default, reads every column chunk of
every row group it is handed before decoding any (``pre_buffer``). A media table
(inline images, audio, point clouds) can hold gigabytes in one row group, and a shard
can span many row groups, so both are bounded here: the batch size comes from the row
groups' metadata, row groups are read whole a few batches' worth at a time, and a row
group larger than that is streamed in ``READ_BUFFER_BYTES`` reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from ..io.ranged import open_uncached
from .parquet_counts import check_footer_counts, check_rows_read

READ_BUFFER_BYTES = 8 * 1024 * 1024
# Row groups are read whole (one request per column chunk) up to this many batches of
# data at a time; a row group larger than that is streamed.
WHOLE_READ_BATCHES = 4


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


def group_read_bytes(metadata: pq.FileMetaData, index: int, columns: list[str] | None) -> int:
    """Bytes read from the file for row group ``index`` (compressed column chunks)."""
    return sum(c.total_compressed_size for c in read_chunks(metadata.row_group(index), columns))


def whole_read_runs(
    metadata: pq.FileMetaData, row_groups: Any, columns: list[str] | None, limit: int | None
) -> list[list[int]] | None:
    """``row_groups`` as runs of consecutive groups of at most ``limit`` bytes each, to be
    read whole; ``None`` when one group alone is larger (it must be streamed).

    Example:
        >>> import io, pyarrow as pa, pyarrow.parquet as pq
        >>> buf = io.BytesIO()
        >>> pq.write_table(pa.table({"x": range(4_000)}), buf, row_group_size=1_000)
        >>> meta = pq.ParquetFile(buf).metadata
        >>> group = group_read_bytes(meta, 0, None)  # about the same for each group
        >>> whole_read_runs(meta, [0, 1, 2, 3], None, int(2.5 * group))
        [[0, 1], [2, 3]]
        >>> whole_read_runs(meta, [0, 1], None, 100) is None
        True
    """
    if limit is None:
        return [list(row_groups)]
    runs: list[list[int]] = []
    total = 0
    for index in row_groups:
        size = group_read_bytes(metadata, index, columns)
        if size > limit:
            return None
        if runs and total + size <= limit and runs[-1][-1] + 1 == index:
            runs[-1].append(index)
            total += size
        else:
            runs.append([index])
            total = size
    return runs


def _open_file_batches(
    f: Any,
    parquet: pq.ParquetFile,
    row_groups: Any,
    columns: list[str] | None,
    batch_rows: int,
    batch_bytes: int | None,
) -> Iterator[pa.RecordBatch]:
    limit = WHOLE_READ_BATCHES * batch_bytes if batch_bytes is not None else None
    metadata = parquet.metadata
    size = rows_per_batch(metadata, row_groups, columns, batch_rows, batch_bytes)
    runs = whole_read_runs(metadata, row_groups, columns, limit)
    if runs is not None:
        for run in runs:
            yield from parquet.iter_batches(batch_size=size, row_groups=run, columns=columns)
        return
    streamed = pq.ParquetFile(
        f,
        metadata=metadata,
        pre_buffer=False,
        buffer_size=min(READ_BUFFER_BYTES, batch_bytes or READ_BUFFER_BYTES),
    )
    yield from streamed.iter_batches(batch_size=size, row_groups=list(row_groups), columns=columns)


def touched_row_groups(
    metadata: pq.FileMetaData, start: int, stop: int, group: int = 0, group_start: int = 0
) -> tuple[list[int], int]:
    """The row groups holding rows ``[start, stop)`` of the file, and the file row at
    which the first of them starts; the search begins at row group ``group``, whose
    first row is ``group_start`` (a plan knows where its range begins).

    Example:
        >>> import io, pyarrow as pa, pyarrow.parquet as pq
        >>> buf = io.BytesIO()
        >>> pq.write_table(pa.table({"x": range(400)}), buf, row_group_size=100)
        >>> touched_row_groups(pq.ParquetFile(buf).metadata, 150, 250)
        ([1, 2], 100)
        >>> touched_row_groups(pq.ParquetFile(buf).metadata, 150, 250, 1, 100)
        ([1, 2], 100)
    """
    groups: list[int] = []
    first = 0
    at = group_start
    for index in range(group, metadata.num_row_groups):
        rows = metadata.row_group(index).num_rows
        if rows and at < stop and at + rows > start:
            if not groups:
                first = at
            groups.append(index)
        at += rows
        if at >= stop:
            break
    return groups, first


class FileRows(NamedTuple):
    """Rows ``[start, stop)`` of one Parquet file, counted from its first row; the range
    begins in row group ``group``, whose first row is ``group_start``."""

    url: str
    start: int
    stop: int
    group: int = 0
    group_start: int = 0


def iter_row_range_batches(
    fs: Any,
    path: str,
    rows: FileRows,
    columns: list[str] | None,
    batch_rows: int,
    batch_bytes: int | None,
) -> Iterator[pa.RecordBatch]:
    """The record batches of ``rows`` of the Parquet file at ``path``: only the row
    groups the range touches are read, and reading stops at its end. A file whose
    counts disagree, or a read that ends short, raises
    :class:`~refiner_core.sources.parquet_counts.ShortReadError`."""
    start, stop = rows.start, rows.stop
    with open_uncached(fs, path) as f:
        parquet = pq.ParquetFile(f)
        groups, at = touched_row_groups(parquet.metadata, start, stop, rows.group, rows.group_start)
        if not groups:
            return
        check_footer_counts(parquet.metadata, rows.url, groups)
        read = 0
        for batch in _open_file_batches(f, parquet, groups, columns, batch_rows, batch_bytes):
            begin = max(start - at, 0)
            end = min(stop - at, batch.num_rows)
            at += batch.num_rows
            if end > begin:
                read += end - begin
                yield (
                    batch
                    if (begin, end) == (0, batch.num_rows)
                    else batch.slice(begin, end - begin)
                )
            if at >= stop:
                return
        check_rows_read(rows.url, groups[-1], stop - start, read)
