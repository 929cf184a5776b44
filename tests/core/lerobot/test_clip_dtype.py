"""The video_clip asset dtype: its mark, its checks, and the forms it does not turn into."""

from __future__ import annotations

import pyarrow as pa
import pytest

import refiner_core as mdr
from refiner_core.asset_values import check_arrow_column
from refiner_core.datatype import asset_of, with_asset_form
from refiner_dagster.tables import asset_dtype


def test_video_clip_is_a_marked_struct_with_time_range_and_optional_byte_range():
    field = mdr.datatype.to_field("cam", mdr.datatype.video_clip())
    assert asset_of(field) == mdr.datatype.AssetInfo("video", "clip", False)
    assert field.type.names == [
        "path",
        "from_timestamp",
        "to_timestamp",
        "offset",
        "size",
        "checksum",
    ]
    assert field.type.field("from_timestamp").type == pa.float64()


def test_the_mark_survives_a_parquet_round_trip(tmp_path):
    import pyarrow.parquet as pq

    field = mdr.datatype.to_field("cam", mdr.datatype.video_clip())
    value = {"path": "a.mp4", "from_timestamp": 1.0, "to_timestamp": 2.0}
    pq.write_table(
        pa.table({"cam": pa.array([value], field.type)}, schema=pa.schema([field])),
        tmp_path / "t.parquet",
    )
    assert asset_of(pq.read_schema(tmp_path / "t.parquet").field("cam")).form == "clip"


def test_a_foreign_video_mark_on_a_time_range_struct_reads_as_a_clip():
    struct = pa.struct(
        [("path", pa.string()), ("from_timestamp", pa.float64()), ("to_timestamp", pa.float64())]
    )
    field = pa.field("cam", struct, metadata={"asset_type": "video"})
    assert asset_of(field).form == "clip"


def test_a_path_column_declared_a_clip_is_named():
    field = mdr.datatype.to_field("cam", mdr.datatype.video_clip())
    with pytest.raises(
        TypeError,
        match=r"'cam' is declared video_clip\(\) but row 0 .*path, from_timestamp, to_timestamp",
    ):
        check_arrow_column("cam", pa.chunked_array([["a.mp4"]]), field, where="demo")


def test_clips_do_not_silently_become_paths_or_blobs():
    field = mdr.datatype.to_field("cam", mdr.datatype.video_clip())
    with pytest.raises(ValueError, match="holds video clips .* assets=None"):
        with_asset_form(field, "blob")
    assert with_asset_form(field, "clip").type == field.type


def test_dagster_reads_recorded_clip_columns_back_as_clips():
    assert asset_dtype({"kind": "video", "form": "clip", "list": False}).arrow_type.names[:3] == [
        "path",
        "from_timestamp",
        "to_timestamp",
    ]
