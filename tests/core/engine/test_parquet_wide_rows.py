"""read_parquet over row groups of wide rows (inline images): batches sized in bytes,
column chunks larger than a batch streamed instead of read whole."""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import refiner_core as mdr
from refiner_core.sources.parquet import ParquetSource
from tests.s3_fixtures import *  # noqa: F403

ROOT = Path(__file__).resolve().parents[3]
KIB = 1024
MIB = 1024 * KIB


def cells(n: int, size: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(n)]


def write_wide(path, rows: int, cell: int, *, columns=("image",), **kw) -> pa.Table:
    """One row group of ``rows`` rows: an id and incompressible ``cell``-byte columns."""
    data = {"id": list(range(rows))}
    for k, name in enumerate(columns):
        data[name] = cells(rows, cell, seed=k)
    table = pa.table(data)
    pq.write_table(table, path, row_group_size=rows, compression="none", **kw)
    return table


def test_batches_of_wide_rows_are_sized_by_bytes_of_the_read_columns(tmp_path):
    path = tmp_path / "wide.parquet"
    table = write_wide(path, 2_000, KIB)
    source = ParquetSource(str(path))
    (shard,) = source.plan()

    tables = list(source.read(shard, batch_rows=65_536, batch_bytes=64 * KIB))
    assert max(t.num_rows for t in tables) <= 64  # 64 KiB of rows just over 1 KiB wide
    assert len(tables) >= 2_000 // 64
    assert pa.concat_tables(tables).equals(table)

    # without the wide column, the same cap allows every row in one batch
    narrow = ParquetSource(str(path), columns=["id"])
    (shard,) = narrow.plan()
    tables = list(narrow.read(shard, batch_rows=65_536, batch_bytes=64 * KIB))
    assert [t.num_rows for t in tables] == [2_000]


def test_rows_read_in_byte_bounded_batches_come_back_whole_and_in_order(tmp_path):
    path = tmp_path / "wide.parquet"
    table = write_wide(path, 600, 4 * KIB)
    pipeline = mdr.read_parquet(str(path)).with_max_vectorized_block_bytes(40 * KIB)
    rows = pipeline.take(600)
    assert [r.id for r in rows] == list(range(600))
    assert [r.image for r in rows] == table.column("image").to_pylist()


_POOL_PEAK = """
import sys
import pyarrow as pa
from refiner_core.sources.parquet import ParquetSource
source = ParquetSource(sys.argv[1])
(shard,) = source.plan()
rows = sum(t.num_rows for t in source.read(shard, batch_rows=65_536, batch_bytes=4 << 20))
print(rows, pa.default_memory_pool().max_memory())
"""


def test_a_column_chunk_larger_than_a_batch_is_never_held_whole(tmp_path):
    # 48 MiB in one row group, pages of 64 rows (1 MiB): read in 4 MiB batches
    path = tmp_path / "wide.parquet"
    write_wide(path, 3_072, 16 * KIB, write_batch_size=64)
    out = subprocess.run(
        [sys.executable, "-c", _POOL_PEAK, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    rows, peak = int(out[0]), int(out[1])
    assert rows == 3_072
    # a batch, the read buffer, a page and slack; reading the chunk whole takes 48 MiB
    assert peak < 16 * MIB, f"Arrow memory peaked at {peak / MIB:.1f} MiB"


def test_wide_columns_on_s3_are_streamed_in_bounded_reads_without_refetching(
    tmp_path, s3_server, s3_bucket, s3_proxy
):
    # two wide columns: streaming alternates between their chunks, which s3fs's
    # read-ahead cache (2 MiB blocks here, smaller than the file) would answer by
    # fetching a whole block for every read
    path = tmp_path / "cams.parquet"
    table = write_wide(path, 384, 16 * KIB, columns=("cam_left", "cam_right"), write_batch_size=16)
    size = path.stat().st_size
    s3_server.client().upload_file(str(path), s3_bucket, "cams.parquet")
    s3_proxy.clear()

    pipeline = mdr.read_parquet(
        f"s3://{s3_bucket}/cams.parquet",
        storage_options=s3_proxy.storage_options(default_block_size=2 * MIB),
    ).with_max_vectorized_block_bytes(MIB)
    blocks = list(pipeline.iter_rows())
    digest = hashlib.sha256(b"".join(r.cam_left + r.cam_right for r in blocks)).hexdigest()
    expected = hashlib.sha256(
        b"".join(
            a + b
            for a, b in zip(
                table.column("cam_left").to_pylist(),
                table.column("cam_right").to_pylist(),
                strict=True,
            )
        )
    ).hexdigest()
    assert [r.id for r in blocks] == list(range(384)) and digest == expected

    gets = s3_proxy.records("GetObject")
    fetched = sum(r.response_bytes for r in gets)
    assert fetched <= 1.25 * size, f"{fetched} bytes fetched for a {size}-byte file"
    assert max(r.response_bytes for r in gets) <= MIB + 64 * KIB
