"""Batch sizes, block limits, and the row groups the Parquet sink makes of blocks.

``SinkBlocks`` records the row count of every block that reaches the sink.
"""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr

from .helpers import SinkBlocks, read_output_rows, row_group_sizes


@pytest.fixture
def sink_blocks(monkeypatch, tmp_path) -> SinkBlocks:
    return SinkBlocks(monkeypatch, tmp_path / "sink_blocks.txt")


def items(n: int, per_shard: int = 1000, **extra) -> mdr.Pipeline:
    return mdr.from_items([{"i": i, **extra} for i in range(n)], items_per_shard=per_shard)


@pytest.mark.parametrize("block_rows", [1, 7, 10, 64])
def test_batch_map_sizes_exact_except_last_across_blocks(block_rows):
    sizes = []

    def fn(batch):
        sizes.append([r.i for r in batch])
        return batch

    rows = items(103).with_max_block_rows(block_rows).batch_map(fn, batch_size=10).materialize()
    assert [len(s) for s in sizes] == [10] * 10 + [3]
    assert [i for s in sizes for i in s] == list(range(103))
    assert [r.i for r in rows] == list(range(103))


@pytest.mark.parametrize("block_rows", [1, 7, 64])
def test_batch_map_async_sizes_exact_except_last_across_blocks(block_rows):
    sizes = []

    async def fn(batch):
        sizes.append(len(batch))
        await asyncio.sleep(0)
        return batch

    pipeline = items(103).with_max_block_rows(block_rows)
    rows = pipeline.batch_map_async(fn, batch_size=10, max_in_flight=4).materialize()
    assert sizes == [10] * 10 + [3]
    assert [r.i for r in rows] == list(range(103))


def test_batches_do_not_span_shards_and_follow_a_filter():
    sizes = []

    def fn(batch):
        sizes.append([r.i for r in batch])
        return batch

    # a filter empties some blocks; batches are still regrouped to exactly 4 rows
    pipeline = items(50, per_shard=25).with_max_block_rows(3).filter(lambda r: r.i % 5 != 0)
    pipeline.batch_map(fn, batch_size=4).materialize()
    assert [len(s) for s in sizes] == [4] * 5 + [4] * 5
    assert [i for s in sizes for i in s] == [i for i in range(50) if i % 5]


def test_batches_from_arrow_source_blocks(tmp_path):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"i": list(range(1000))}), path, row_group_size=300)
    sizes = []

    def fn(batch):
        sizes.append(len(batch))
        return batch

    rows = mdr.read_parquet(str(path)).batch_map(fn, batch_size=128).materialize()
    assert sizes == [128] * 7 + [104]
    assert [r.i for r in rows] == list(range(1000))


def test_max_block_rows_caps_source_blocks_reaching_the_sink(tmp_path, sink_blocks):
    items(100, payload="x" * 10).with_max_block_rows(16).write_parquet(
        str(tmp_path / "out")
    ).launch_local()
    assert sink_blocks.sizes() == [16] * 6 + [4]


def test_max_block_rows_caps_arrow_source_blocks(tmp_path, sink_blocks):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"i": list(range(100))}), path)
    mdr.read_parquet(str(path)).with_max_block_rows(30).write_parquet(
        str(tmp_path / "out")
    ).launch_local()
    assert sink_blocks.sizes() == [30, 30, 30, 10]


def test_max_block_rows_caps_transformed_blocks(tmp_path, sink_blocks):
    # batch_map turns 50-row batches into 200 rows, flat_map multiplies rows by 7:
    # both outputs are split so no block over 16 rows reaches the sink
    def quadruple(batch):
        return [r.update(copy=k) for r in batch for k in range(4)]

    seen_by_map = []

    def record(row):
        seen_by_map.append(row.i)
        return {}

    pipeline = (
        items(100)
        .with_max_block_rows(16)
        .batch_map(quadruple, batch_size=50)
        .flat_map(lambda r: [r.update(rep=k) for k in range(7)])
        .map(record)
    )
    out = tmp_path / "out"
    stats = pipeline.write_parquet(str(out)).launch_local()
    sizes = sink_blocks.sizes()
    assert sum(sizes) == 100 * 4 * 7 == stats.summary.counters["rows_written"]
    assert max(sizes) == 16
    rows = read_output_rows(out)
    assert [(r["i"], r["copy"], r["rep"]) for r in rows[:9]] == [
        (0, 0, 0),
        (0, 0, 1),
        (0, 0, 2),
        (0, 0, 3),
        (0, 0, 4),
        (0, 0, 5),
        (0, 0, 6),
        (0, 1, 0),
        (0, 1, 1),
    ]


def test_max_block_rows_caps_map_async_output(tmp_path, sink_blocks):
    async def fn(row):
        return {"blob": bytes(10)}

    out = tmp_path / "out"
    items(200).with_max_block_rows(8).map_async(fn, max_in_flight=64).write_parquet(
        str(out)
    ).launch_local()
    sizes = sink_blocks.sizes()
    assert sum(sizes) == 200 and max(sizes) <= 8


def test_max_vectorized_block_bytes_caps_arrow_source_blocks(tmp_path, sink_blocks):
    path = tmp_path / "in.parquet"
    table = pa.table(
        {"i": pa.array(range(4000), pa.int64()), "j": pa.array(range(4000), pa.int64())}
    )
    pq.write_table(table, path)  # one row group, 16 bytes per row
    out = tmp_path / "out"
    mdr.read_parquet(str(path)).with_max_vectorized_block_bytes(8 * 1024).write_parquet(
        str(out)
    ).launch_local()
    sizes = sink_blocks.sizes()
    assert sum(sizes) == 4000
    assert max(sizes) * 16 <= 8 * 1024
    assert len(sizes) >= 4000 * 16 // (8 * 1024)
    assert [r["i"] for r in read_output_rows(out)] == list(range(4000))


def test_max_vectorized_block_bytes_does_not_size_python_rows(tmp_path, sink_blocks):
    out = tmp_path / "out"
    items(40, payload="y" * 5000).with_max_vectorized_block_bytes(1024).write_parquet(
        str(out)
    ).launch_local()
    assert sink_blocks.sizes() == [40]


def test_parquet_gathers_small_blocks_into_large_row_groups(tmp_path, sink_blocks):
    """1,024-row blocks from a map step still make one row group per ~1M rows."""
    out = tmp_path / "out"
    items(5000, per_shard=5000).map(lambda row: {"sq": row.i * row.i}).write_parquet(
        str(out)
    ).launch_local()
    assert sink_blocks.sizes() == [1024] * 4 + [904]
    assert row_group_sizes(out) == [5000]
    assert [r["sq"] for r in read_output_rows(out)] == [i * i for i in range(5000)]


def test_parquet_row_group_size_and_bytes_bound_each_group(tmp_path):
    by_rows = tmp_path / "by_rows"
    items(5000, per_shard=5000).map(lambda row: {"sq": row.i}).write_parquet(
        str(by_rows), row_group_size=2000
    ).launch_local()
    assert row_group_sizes(by_rows) == [2000, 2000, 1000]

    by_bytes = tmp_path / "by_bytes"  # 2 int64 columns: 16 bytes per row in Arrow
    items(5000, per_shard=5000).map(lambda row: {"sq": row.i}).write_parquet(
        str(by_bytes), row_group_bytes=16 * 1500
    ).launch_local()
    sizes = row_group_sizes(by_bytes)
    assert sum(sizes) == 5000 and max(sizes) <= 1500 and len(sizes) == 4
    assert [r["i"] for r in read_output_rows(by_bytes)] == list(range(5000))


@pytest.mark.parametrize("option", ["row_group_size", "row_group_bytes"])
@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_parquet_row_group_limits_are_checked_when_the_pipeline_is_built(tmp_path, option, value):
    with pytest.raises(ValueError, match=f"write_parquet {option} must be a positive integer"):
        items(3).write_parquet(str(tmp_path / "out"), **{option: value})


def test_a_full_row_group_is_written_at_once_not_held_for_the_next_block():
    import io

    from refiner_core.sinks.parquet import RowGroupWriter

    out = io.BytesIO()
    writer = RowGroupWriter(out, pa.schema([("i", pa.int64())]), max_rows=250)
    writer.write(pa.table({"i": range(250)}))
    written = len(out.getvalue())
    assert written > len(b"PAR1")  # the group is in the file, not waiting in memory
    writer.write(pa.table({"i": range(250, 350)}))
    assert len(out.getvalue()) == written  # 100 rows: not a group yet
    writer.close()
    meta = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [250, 100]
    assert pq.read_table(io.BytesIO(out.getvalue())).column("i").to_pylist() == list(range(350))
