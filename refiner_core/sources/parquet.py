"""Parquet source: files, folders and globs, sharded by row groups up to a byte target."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..datatype import fields_from_dtypes
from ..io.datafile import full_url, resolve
from ..validation import check_positive
from .arrow_cast import apply_fields, projected_schema
from .base import (
    DEFAULT_TARGET_SHARD_BYTES,
    Shard,
    check_columns,
    check_num_shards,
    group_runs,
    make_shards,
)
from .files import expand_inputs
from .parquet_reads import iter_row_group_batches


class ParquetSource:
    """Reads Parquet files; one shard is a run of row groups of about ``target_shard_bytes``."""

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

    def plan(self) -> list[Shard]:
        files = expand_inputs(
            self.inputs,
            suffixes=(".parquet", ".pq"),
            storage_options=self.storage_options,
            what="read_parquet",
            uncommitted=self.uncommitted,
        )
        with ThreadPoolExecutor(max_workers=min(16, len(files))) as pool:
            metas = list(pool.map(lambda fp: self._metadata(*fp), files))
        self._schema = metas[0].schema.to_arrow_schema()
        if self.columns is not None:
            missing = [c for c in self.columns if c not in self._schema.names]
            if missing:
                raise ValueError(
                    f"read_parquet: columns {missing} are not in {full_url(*files[0])} "
                    f"(it has {self._schema.names})"
                )
        pieces = [
            (full_url(fs, path), rg, max(1, meta.row_group(rg).total_byte_size))
            for (fs, path), meta in zip(files, metas, strict=True)
            for rg in range(meta.num_row_groups)
        ]
        groups = group_runs(
            [size for _, _, size in pieces],
            target=self.target_shard_bytes,
            num_shards=self.num_shards,
        )
        payloads = []
        for group in groups:
            by_file: dict[str, list[int]] = {}
            for i in group:
                path, rg, _ = pieces[i]
                by_file.setdefault(path, []).append(rg)
            payloads.append(tuple((p, tuple(rgs)) for p, rgs in by_file.items()))
        return make_shards(payloads, source="read_parquet")

    def schema_hint(self) -> pa.Schema | None:
        if self._schema is None:
            return None
        return projected_schema(self._schema, self.columns, self.fields)

    def read(
        self, shard: Shard, *, batch_rows: int, batch_bytes: int | None = None
    ) -> Iterator[pa.Table]:
        for url, row_groups in shard.payload:
            fs, path = resolve(url, self.storage_options)
            where = f"read_parquet {url}"
            try:
                for batch in iter_row_group_batches(
                    fs, path, row_groups, self.columns, batch_rows, batch_bytes
                ):
                    yield apply_fields(pa.Table.from_batches([batch]), self.fields, where=where)
            except (pa.ArrowInvalid, OSError) as exc:
                raise ValueError(f"{where}: cannot read the file: {exc}") from exc
