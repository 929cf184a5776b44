"""Declared dtypes and asset marks survive writing Parquet and reading it back."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from refiner_core.datatype import asset_of

from .helpers import data_files

DTYPES = {
    "episode": mdr.datatype.int32(),
    "video": mdr.datatype.video_path(),
    "frames": mdr.datatype.list_(mdr.datatype.image_path()),
    "thumb": mdr.datatype.image_bytes(),
    "clip": mdr.datatype.blob_reference(kind="audio"),
}


def episodes(n: int = 6) -> list[dict]:
    return [
        {
            "episode": i,
            "video": f"/media/ep{i}.mp4",
            "frames": [f"/media/ep{i}/{k}.png" for k in range(i % 3)],
            "thumb": bytes([i]) * 4,
            "clip": {"path": f"/media/ep{i}.wav", "offset": 10 * i, "size": 5},
            "plain": f"note {i}",
        }
        for i in range(n)
    ]


def check_marks(schema: pa.Schema) -> None:
    assert schema.field("episode").type == pa.int32()
    video = asset_of(schema.field("video"))
    assert (video.kind, video.form, video.is_list) == ("video", "path", False)
    frames = asset_of(schema.field("frames"))
    assert (frames.kind, frames.form, frames.is_list) == ("image", "path", True)
    assert schema.field("frames").type == pa.list_(pa.string())
    thumb = asset_of(schema.field("thumb"))
    assert (thumb.kind, thumb.form) == ("image", "bytes")
    clip = asset_of(schema.field("clip"))
    assert (clip.kind, clip.form) == ("audio", "blob")
    assert schema.field("clip").type == mdr.datatype.BLOB_REFERENCE_TYPE
    assert asset_of(schema.field("plain")) is None


def test_dtypes_declared_on_a_step_survive_a_parquet_round_trip(tmp_path):
    out = tmp_path / "out"
    source = mdr.from_items([{"i": i} for i in range(6)], items_per_shard=4)
    by_index = {e["episode"]: e for e in episodes()}
    pipeline = source.map(lambda r: mdr.Row(by_index[r.i]), dtypes=DTYPES)
    pipeline.write_parquet(str(out)).launch_local(num_workers=2)
    files = data_files(out)
    assert len(files) == 2
    for path in files:
        check_marks(pq.read_schema(path))
    # read back: the source knows the marks, and they flow through another write
    back = mdr.read_parquet(str(out))
    back.plan()
    check_marks(back.source.schema_hint())
    rows = sorted(back.materialize(), key=lambda r: r.episode)
    assert [r.to_dict() for r in rows] == episodes()

    again = tmp_path / "again"
    back.write_parquet(str(again)).launch_local()  # Arrow blocks, no steps
    check_marks(pq.read_schema(data_files(again)[0]))
    through_rows = tmp_path / "through_rows"
    back.map(lambda r: {"seen": True}).write_parquet(str(through_rows)).launch_local()
    schema = pq.read_schema(data_files(through_rows)[0])
    check_marks(schema)
    assert schema.field("seen").type == pa.bool_()


def test_dtypes_declared_on_the_source(tmp_path):
    out = tmp_path / "out"
    mdr.from_items(episodes(3), dtypes=DTYPES).write_parquet(str(out)).launch_local()
    check_marks(pq.read_schema(data_files(out)[0]))


def test_read_parquet_dtypes_add_marks_to_plain_columns(tmp_path):
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"video": ["/a.mp4", "/b.mp4"], "n": [1, 2]}), path)
    out = tmp_path / "out"
    mdr.read_parquet(
        str(path), dtypes={"video": mdr.datatype.video_path(), "n": mdr.datatype.int8()}
    ).write_parquet(str(out)).launch_local()
    schema = pq.read_schema(data_files(out)[0])
    assert asset_of(schema.field("video")).kind == "video"
    assert schema.field("n").type == pa.int8()


def test_value_not_fitting_a_declared_dtype_names_the_column(tmp_path):
    pipeline = mdr.from_items([{"n": 1}, {"n": "x"}]).map(
        lambda r: {}, dtypes={"n": mdr.datatype.int64()}
    )
    with pytest.raises(mdr.StageFailed, match=r"column 'n': value 'x'.*dtypes="):
        pipeline.write_parquet(str(tmp_path / "out")).launch_local()
