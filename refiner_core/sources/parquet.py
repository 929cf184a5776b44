"""Parquet source: files, folders and globs, sharded by row groups up to a byte target."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..datatype import fields_from_dtypes
from ..io.datafile import full_url, resolve
from ..io.versions import Wanted
from ..validation import check_positive
from .arrow_cast import apply_fields, projected_schema
from .base import (
    DEFAULT_TARGET_SHARD_BYTES,
    Shard,
    check_columns,
    check_num_shards,
    group_runs,
    log_short_plan,
    make_shards,
)
from .files import expand_inputs
from .parquet_reads import FileRows, iter_row_range_batches
from .row_ranges import RowSpan, ShardHint, cut_to_target, split_pieces, wanted_shards

FOOTER_READ_THREADS = 16
"""Footers read at once while planning: a folder of many small files is planned at the
pace of this many concurrent reads (latency-bound on object stores)."""


class ParquetSource:
    """Reads Parquet files; one shard is a run of row groups of about ``target_shard_bytes``
    (a larger row group is cut into row ranges of about that size, one shard each).

    With ``num_shards`` the plan has exactly ``min(num_shards, rows)`` shards, row groups
    cut into row ranges where there are fewer of them; a pipeline with asset columns run
    by several workers gets enough shards to keep each busy (see :class:`ShardHint`).
    A shard reads only the row groups its rows are in.

    Example:
        >>> import tempfile, pyarrow as pa, pyarrow.parquet as pq, refiner_core as mdr
        >>> path = tempfile.mkdtemp() + "/index.parquet"
        >>> pq.write_table(pa.table({"i": range(10)}), path)  # one row group
        >>> len(mdr.read_parquet(path, num_shards=4).plan())
        4
    """

    name = "read_parquet"

    def __init__(
        self,
        inputs: Any,
        *,
        dtypes: dict[str, Any] | None = None,
        columns: list[str] | None = None,
        num_shards: int | None = None,
        target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES,
        storage_options: dict[str, Any] | None = None,
        uncommitted: bool = False,
        version: Wanted = None,
    ) -> None:
        check_num_shards(num_shards)
        check_positive("target_shard_bytes", target_shard_bytes)
        check_columns(columns)
        self.inputs = inputs
        self.fields = fields_from_dtypes(dtypes)
        self.columns = list(columns) if columns is not None else None
        self.num_shards = num_shards
        self.target_shard_bytes = target_shard_bytes
        self.storage_options = storage_options
        self.uncommitted = bool(uncommitted)
        self.version = version
        self._schema: pa.Schema | None = None

    def _metadata(self, fs, path: str) -> pq.FileMetaData:
        try:
            with fs.open(path, "rb") as f:
                return pq.ParquetFile(f).metadata
        except (pa.ArrowInvalid, OSError) as exc:
            raise ValueError(
                f"read_parquet: cannot read Parquet file {full_url(fs, path)}: {exc}. "
                "Remove or replace the file, or exclude it from the inputs"
            ) from exc

    def plan(self, hint: ShardHint | None = None) -> list[Shard]:
        files = expand_inputs(
            self.inputs,
            suffixes=(".parquet", ".pq"),
            storage_options=self.storage_options,
            what="read_parquet",
            uncommitted=self.uncommitted,
            version=self.version,
        )
        with ThreadPoolExecutor(max_workers=max(1, min(FOOTER_READ_THREADS, len(files)))) as pool:
            metas = list(pool.map(lambda fp: self._metadata(*fp), files))
        self._schema = metas[0].schema.to_arrow_schema()
        self._check_columns(self._schema.names, full_url(*files[0]))
        pieces = _row_group_pieces(files, metas)
        if self.num_shards is None:
            spans, weights = cut_to_target(
                [p[3] for p in pieces], [p[4] for p in pieces], self.target_shard_bytes
            )
        else:  # an exact count: cut below, by split_pieces
            spans = [RowSpan(i, 0, piece[3]) for i, piece in enumerate(pieces)]
            weights = [piece[4] for piece in pieces]
        groups = group_runs(weights, target=self.target_shard_bytes, num_shards=self.num_shards)
        runs = [[spans[i] for i in group] for group in groups]
        minimum = (hint or ShardHint()).min_shards(self.schema_hint())
        count = wanted_shards(self.num_shards, minimum, len(runs))
        total_rows = sum(piece[3] for piece in pieces)
        if count is not None and total_rows:
            runs = split_pieces([p[3] for p in pieces], [p[4] for p in pieces], count)
        payloads = [self._payload(run, pieces) for run in runs]
        log_short_plan("read_parquet", self.num_shards, len(payloads), f"{total_rows} rows")
        return make_shards(payloads, source="read_parquet")

    def _check_columns(self, names: list[str], first_url: str) -> None:
        missing = [c for c in self.columns or () if c not in names]
        if missing:
            raise ValueError(
                f"read_parquet: columns {missing} are not in {first_url} (it has {names})"
            )

    @staticmethod
    def _payload(run: list[RowSpan], pieces: list[tuple]) -> tuple[FileRows, ...]:
        """A shard's payload: the rows it reads of each file (:class:`FileRows`)."""
        by_file: dict[str, FileRows] = {}
        for span in run:
            url, group, first, _, _ = pieces[span.piece]
            known = by_file.get(url)
            if known is None:
                by_file[url] = FileRows(url, first + span.start, first + span.stop, group, first)
            else:
                by_file[url] = known._replace(stop=first + span.stop)
        return tuple(by_file.values())

    def schema_hint(self) -> pa.Schema | None:
        if self._schema is None:
            return None
        return projected_schema(self._schema, self.columns, self.fields)

    def read(
        self, shard: Shard, *, batch_rows: int, batch_bytes: int | None = None
    ) -> Iterator[pa.Table]:
        for rows in shard.payload:
            fs, path = resolve(rows.url, self.storage_options)
            where = f"read_parquet {rows.url}"
            try:
                for batch in iter_row_range_batches(
                    fs, path, rows, self.columns, batch_rows, batch_bytes
                ):
                    yield apply_fields(pa.Table.from_batches([batch]), self.fields, where=where)
            except (pa.ArrowInvalid, OSError) as exc:
                raise ValueError(f"{where}: cannot read the file: {exc}") from exc


def _row_group_pieces(files: list, metas: list) -> list[tuple[str, int, int, int, int]]:
    """Every row group of ``files`` as (url, row group, its first row in the file, rows, bytes)."""
    pieces = []
    for (fs, path), meta in zip(files, metas, strict=True):
        first = 0
        for rg in range(meta.num_row_groups):
            group = meta.row_group(rg)
            pieces.append(
                (full_url(fs, path), rg, first, group.num_rows, max(1, group.total_byte_size))
            )
            first += group.num_rows
    return pieces
