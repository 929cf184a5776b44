"""write_lance then read_lance: values, dtypes, asset marks, blob and file assets."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import refiner_core as mdr
from refiner_core.datatype import asset_of

from .helpers import data_files, facts, journals, media, payload, table


def episodes(paths: list[str]) -> list[dict]:
    return [
        {"episode": i, "score": i / 4, "tags": [f"t{i}", "x"], "image": path}
        for i, path in enumerate(paths)
    ]


def test_round_trip_values_and_dtypes(tmp_path: Path) -> None:
    out = str(tmp_path / "plain.lance")
    rows = [{"episode": i, "score": i / 2, "name": f"ep{i}", "tags": [i, i + 1]} for i in range(25)]
    stats = (
        mdr.from_items(rows, items_per_shard=10, dtypes={"episode": mdr.datatype.int32()})
        .write_lance(out)
        .launch_local(num_workers=2)
    )
    assert stats.summary.counters["rows_written"] == 25
    assert stats.summary.commit["version"] == 1
    written = facts(out)
    assert written["rows"] == 25 and written["fragments"] == 3
    assert written["data_files"] == data_files(out)  # nothing uncommitted left behind
    assert sorted(stats.summary.files) == written["data_files"]
    assert journals(out) == []

    pipeline = mdr.read_lance(out)
    back = sorted(pipeline.materialize(), key=lambda r: r.episode)
    assert [r.to_dict() for r in back] == rows
    schema = pipeline.source.schema_hint()
    assert schema.field("episode").type == pa.int32()
    assert schema.field("tags").type == pa.list_(pa.int64())
    assert table(out).sort_by("episode").to_pylist() == rows


def test_blob_assets_round_trip(tmp_path: Path) -> None:
    paths = media(tmp_path / "media", 12)
    out = str(tmp_path / "blobs.lance")
    stats = (
        mdr.from_items(
            episodes(paths), items_per_shard=5, dtypes={"image": mdr.datatype.image_path()}
        )
        .write_lance(out, assets=mdr.BlobAssetConfig(target_bytes=300))
        .launch_local(num_workers=2)
    )
    assert stats.summary.counters["assets_written"] == 12
    assert stats.summary.counters["blocks_written"] == 7
    assert stats.summary.commit["rows"] == 12

    pipeline = mdr.read_lance(out)
    rows = pipeline.materialize()
    field = pipeline.source.schema_hint().field("image")
    assert field.type == mdr.datatype.BLOB_REFERENCE_TYPE
    assert (asset_of(field).kind, asset_of(field).form) == ("image", "blob")
    block = next(pipeline.source.read(pipeline.plan()[0], batch_rows=100))
    assert asset_of(block.schema.field("image")).form == "blob"  # the mark rides on every block
    assert sorted(row.episode for row in rows) == list(range(12))
    for row in rows:
        ref = row.image
        assert ref["path"].startswith(out + "/assets/")
        assert mdr.read_blob(ref) == payload(row.episode)
    # The blocks live in the attempt folders the manifests name.
    blocks = {Path(r.image["path"]).parent.parent.name for r in rows}
    assert {Path(d).name for d in stats.summary.asset_dirs} == blocks


def test_file_assets_round_trip(tmp_path: Path) -> None:
    paths = media(tmp_path / "media", 6)
    out = str(tmp_path / "files.lance")
    (
        mdr.from_items(
            episodes(paths), items_per_shard=4, dtypes={"image": mdr.datatype.image_path()}
        )
        .write_lance(out, assets=mdr.FileAssetConfig(subdir="media"))
        .launch_local(num_workers=2)
    )
    pipeline = mdr.read_lance(out)
    rows = pipeline.materialize()
    field = pipeline.source.schema_hint().field("image")
    assert field.type == pa.string() and asset_of(field).form == "path"
    assert sorted(row.episode for row in rows) == list(range(len(paths)))
    for row in rows:
        assert row.image.startswith(out + "/media/")
        assert row.image not in paths
        assert Path(row.image).read_bytes() == payload(row.episode)


def test_assets_none_keeps_values(tmp_path: Path) -> None:
    paths = media(tmp_path / "media", 3)
    out = str(tmp_path / "keep.lance")
    mdr.from_items(episodes(paths), dtypes={"image": mdr.datatype.image_path()}).write_lance(
        out
    ).launch_local()
    rows = mdr.read_lance(out).materialize()
    assert sorted(r.image for r in rows) == sorted(paths)
    assert not (Path(out) / "assets").exists()


def test_blob_references_pass_through_a_second_dataset(tmp_path: Path) -> None:
    """read_lance of packed references, re-packed into another dataset's blocks."""
    paths = media(tmp_path / "media", 8)
    first, second = str(tmp_path / "a.lance"), str(tmp_path / "b.lance")
    blobs = mdr.BlobAssetConfig(target_bytes=10_000)
    mdr.from_items(
        episodes(paths), items_per_shard=3, dtypes={"image": mdr.datatype.image_path()}
    ).write_lance(first, assets=blobs).launch_local(num_workers=2)
    mdr.read_lance(first).write_lance(second, assets=blobs).launch_local(num_workers=2)
    rows = mdr.read_lance(second).materialize()
    assert sorted(row.episode for row in rows) == list(range(8))
    for row in rows:
        assert row.image["path"].startswith(second + "/assets/")
        assert mdr.read_blob(row.image) == payload(row.episode)


def test_read_lance_shards_pin_a_version(tmp_path: Path) -> None:
    out = str(tmp_path / "pinned.lance")
    first = pa.table({"x": list(range(40))})
    from .helpers import write_dataset

    write_dataset(first, out, max_rows_per_file=10)
    pipeline = mdr.read_lance(out, num_shards=2)
    shards = pipeline.plan()
    assert len(shards) == 2
    assert pipeline.source.pinned_version == 1
    spans = [span for s in shards for span in s.payload[1]]
    # whole fragments (rows 0 to 10 of each), each once
    assert sorted(spans) == [(i, 0, 10) for i in range(4)]

    write_dataset(pa.table({"x": [100, 101]}), out, mode="append")  # version 2
    read = [
        v
        for shard in shards
        for t in pipeline.source.read(shard, batch_rows=7)
        for v in t.column("x").to_pylist()
    ]
    assert sorted(read) == list(range(40))  # still version 1
    blocks = list(pipeline.source.read(shards[0], batch_rows=7))
    assert max(t.num_rows for t in blocks) <= 7

    assert len(mdr.read_lance(out).materialize()) == 42
    assert len(mdr.read_lance(out, version=1).materialize()) == 40
    assert mdr.read_lance(out, columns=["x"], num_shards=4).plan()[0].payload[0] == 2


def test_read_lance_dtypes_and_columns(tmp_path: Path) -> None:
    out = str(tmp_path / "typed.lance")
    from .helpers import write_dataset

    write_dataset(pa.table({"video": ["/a.mp4", "/b.mp4"], "n": [1, 2]}), out)
    pipeline = mdr.read_lance(out, columns=["video"], dtypes={"video": mdr.datatype.video_path()})
    [block] = list(pipeline.source.read(pipeline.plan()[0], batch_rows=100))
    assert block.column_names == ["video"]
    assert asset_of(block.schema.field("video")).kind == "video"
    assert asset_of(pipeline.source.schema_hint().field("video")).kind == "video"


def test_read_lance_errors(tmp_path: Path) -> None:
    out = str(tmp_path / "errors.lance")
    with pytest.raises(FileNotFoundError, match="no Lance dataset at .*errors.lance"):
        mdr.read_lance(out).plan()
    from .helpers import write_dataset

    write_dataset(pa.table({"x": [1]}), out)
    with pytest.raises(ValueError, match=r"has no version 5 \(its versions are \[1\]\)"):
        mdr.read_lance(out, version=5).plan()
    with pytest.raises(ValueError, match=r"columns \['y'\] are not in .* version 1"):
        mdr.read_lance(out, columns=["y"]).plan()
    with pytest.raises(ValueError, match="num_shards"):
        mdr.read_lance(out, num_shards=0)
    with pytest.raises(ValueError, match="version"):
        mdr.read_lance(out, version=0)


def test_read_lance_sizes_batches_of_wide_rows_by_bytes(tmp_path: Path) -> None:
    out = str(tmp_path / "wide.lance")
    rows = [{"id": i, "image": i.to_bytes(4, "big") * 256} for i in range(2_000)]  # 1 KiB each
    mdr.from_items(rows, items_per_shard=2_000).write_lance(out).launch_local()
    source = mdr.read_lance(out).source
    (shard,) = source.plan()

    tables = list(source.read(shard, batch_rows=65_536, batch_bytes=64 * 1024))
    assert max(t.num_rows for t in tables) <= 64  # 64 KiB of rows over 1 KiB on disk
    back = pa.concat_tables(tables)
    assert back.column("id").to_pylist() == list(range(2_000))
    assert back.column("image").to_pylist() == [r["image"] for r in rows]

    (whole,) = source.read(shard, batch_rows=65_536, batch_bytes=None)
    assert whole.num_rows == 2_000


def test_lance_gets_large_blocks_when_no_step_needs_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    from refiner_core.sinks.lance.writer import LanceAttemptWriter
    from tests.core.engine.helpers import SinkBlocks

    source = tmp_path / "frames.parquet"
    pq.write_table(pa.table({"id": range(300_000), "x": [0.5] * 300_000}), source)
    blocks = SinkBlocks(monkeypatch, tmp_path / "blocks.txt", LanceAttemptWriter)

    mdr.read_parquet(str(source)).write_lance(str(tmp_path / "a.lance")).launch_local()
    # one block (Lance pays for every batch), not the engine's 65,536-row default
    assert blocks.sizes() == [300_000]

    blocks.path.unlink()
    pipeline = mdr.read_parquet(str(source)).with_max_block_rows(100_000)
    pipeline.write_lance(str(tmp_path / "b.lance")).launch_local()
    assert blocks.sizes() == [100_000] * 3
    assert [r.id for r in mdr.read_lance(str(tmp_path / "b.lance")).take(3)] == [0, 1, 2]


def test_nd_numpy_arrays_round_trip_as_nested_lists(tmp_path: Path) -> None:
    import numpy as np

    out = str(tmp_path / "arrays.lance")
    source = mdr.from_items([{"i": i} for i in range(4)], items_per_shard=2)
    rows = source.map(
        lambda r: {
            "i": r.i,
            "actions": np.arange(2 * (r.i + 1)).reshape(r.i + 1, 2),
            "image": np.full((2, 2, 3), r.i, dtype=np.uint8),
            "reward": np.array(r.i / 2),
        },
        dtypes={"image": pa.list_(pa.list_(pa.list_(pa.uint8(), 3), 2), 2)},
    )
    rows.write_lance(out).launch_local(num_workers=2)
    back = table(out).sort_by("i")
    assert back.schema.field("actions").type == pa.list_(pa.list_(pa.int64()))
    assert back.schema.field("reward").type == pa.float64()
    assert back.to_pylist() == [
        {
            "i": i,
            "actions": [[2 * k, 2 * k + 1] for k in range(i + 1)],
            "image": [[[i] * 3] * 2] * 2,
            "reward": i / 2,
        }
        for i in range(4)
    ]
