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


def test_the_pipelines_block_byte_cap_sizes_what_the_source_reads(tmp_path, monkeypatch):
    from refiner_core.sources import parquet

    read = parquet.iter_row_range_batches
    batches: list[int] = []

    def recording(*args, **kwargs):
        for batch in read(*args, **kwargs):
            batches.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(parquet, "iter_row_range_batches", recording)
    path = tmp_path / "wide.parquet"
    table = write_wide(path, 600, 4 * KIB)
    pipeline = mdr.read_parquet(str(path)).with_max_vectorized_block_bytes(40 * KIB)
    rows = pipeline.take(600)
    # the source read 9 rows of just over 4 KiB at a time, not 600 sliced afterwards
    assert sum(batches) == 600 and max(batches) <= 10
    assert [r.id for r in rows] == list(range(600))
    assert [r.image for r in rows] == table.column("image").to_pylist()


# Through fsspec, pyarrow reads into Python bytes (seen by tracemalloc) and decodes into
# its memory pool; the sum of both peaks bounds what reading held at once.
_HELD_AT_PEAK = """
import sys, tracemalloc
import pyarrow as pa
from refiner_core.sources.parquet import ParquetSource
source = ParquetSource(sys.argv[1])
(shard,) = source.plan()
tracemalloc.start()
batches = source.read(shard, batch_rows=65_536, batch_bytes=int(sys.argv[2]))
rows = sum(t.num_rows for t in batches)
print(rows, tracemalloc.get_traced_memory()[1] + pa.default_memory_pool().max_memory())
"""


def held_at_peak(path, batch_bytes: int) -> tuple[int, int]:
    """Rows read and the memory reading ``path`` as one shard held at its peak, in a
    fresh process (both peaks are per process)."""
    out = subprocess.run(
        [sys.executable, "-c", _HELD_AT_PEAK, str(path), str(batch_bytes)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


def test_a_row_group_larger_than_a_few_batches_is_streamed_not_held_whole(tmp_path):
    # 48 MiB in one row group, pages of 64 rows (1 MiB): read in 4 MiB batches
    path = tmp_path / "wide.parquet"
    write_wide(path, 3_072, 16 * KIB, write_batch_size=64)
    rows, peak = held_at_peak(path, 4 * MIB)
    assert rows == 3_072
    # batches, the read buffer and a page (about 20 MiB); reading the chunk whole: 58 MiB
    assert peak < 32 * MIB, f"reading held {peak / MIB:.1f} MiB"


def test_a_shard_of_many_row_groups_is_read_a_few_groups_at_a_time(tmp_path):
    # 32 MiB in 16 row groups of 2 MiB, one shard, 1 MiB batches: at most 4 MiB of
    # row groups are read ahead of decoding, not the whole shard
    path = tmp_path / "groups.parquet"
    table = pa.table({"id": range(2_048), "image": cells(2_048, 16 * KIB, seed=1)})
    pq.write_table(table, path, row_group_size=128, compression="none")
    assert pq.ParquetFile(path).metadata.num_row_groups == 16
    rows, peak = held_at_peak(path, MIB)
    assert rows == 2_048
    # about 6 MiB; all 16 groups at once: 36 MiB
    assert peak < 16 * MIB, f"reading held {peak / MIB:.1f} MiB"


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


def test_reading_a_few_columns_on_s3_fetches_only_their_bytes(
    tmp_path, s3_server, s3_bucket, s3_proxy
):
    path = tmp_path / "episodes.parquet"
    table = pa.table({"id": range(4_000), "image": cells(4_000, 8 * KIB, seed=2)})
    pq.write_table(table, path, row_group_size=500, compression="none")
    size = path.stat().st_size
    s3_server.client().upload_file(str(path), s3_bucket, "episodes.parquet")
    s3_proxy.clear()

    ids = mdr.read_parquet(
        f"s3://{s3_bucket}/episodes.parquet",
        columns=["id"],
        storage_options=s3_proxy.storage_options(),
    ).materialize()
    assert sorted(r.id for r in ids) == list(range(4_000))
    fetched = sum(r.response_bytes for r in s3_proxy.records("GetObject"))
    # the ids are 32 kB of a 33 MB file; s3fs's read-ahead would fetch all of it
    assert fetched < 0.02 * size, f"{fetched} bytes fetched of a {size}-byte file"
