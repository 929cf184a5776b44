"""Tables whose media columns carry another tool's ``asset_type`` field metadata are
packed and copied like columns declared with refiner's asset dtypes, and come out
with refiner's own marks."""

from __future__ import annotations

import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from refiner_core.datatype import FORM_KEY, KIND_KEY, asset_of
from refiner_core.sinks.assets.unmarked import UnmarkedAssetsWarning

from .media import launch, read_table, write_files, write_videos

FOREIGN_KIND_KEY = b"asset_type"  # the other tool's mark, as its files carry it


def marked(name: str, arrow_type: pa.DataType, kind: bytes) -> pa.Field:
    return pa.field(name, arrow_type, metadata={FOREIGN_KIND_KEY: kind})


def foreign_table(tmp_path: Path) -> tuple[Path, dict[str, list]]:
    """A Parquet file as the other tool writes it: paths, lists of paths and inline bytes."""
    videos = write_videos(tmp_path / "videos", 3)
    frames = write_files(tmp_path / "frames", {f"f{i}.png": b"png-%d" % i for i in range(4)})
    depth = write_files(tmp_path / "depth", {f"d{i}.bin": b"depth-%d" % i for i in range(3)})
    columns = {
        "episode": [0, 1, 2],
        "video": videos,
        "frames": [[frames["f0.png"], frames["f1.png"]], [frames["f2.png"]], [frames["f3.png"]]],
        "depth": [depth[f"d{i}.bin"] for i in range(3)],
        "thumb": [b"thumb-%d" % i for i in range(3)],
        "note": ["a.mp4", "b.mp4", "c.mp4"],  # no mark: left as it is
    }
    schema = pa.schema(
        [
            pa.field("episode", pa.int64()),
            marked("video", pa.string(), b"video"),
            marked("frames", pa.list_(pa.large_string()), b"image"),
            marked("depth", pa.string(), b"depth_map"),
            marked("thumb", pa.binary(), b"image"),
            pa.field("note", pa.string()),
        ]
    )
    path = tmp_path / "foreign.parquet"
    pq.write_table(pa.table(columns, schema=schema), path)
    contents = {
        "video": [Path(p).read_bytes() for p in videos],
        "frames": [[Path(p).read_bytes() for p in cell] for cell in columns["frames"]],
        "depth": [Path(p).read_bytes() for p in columns["depth"]],
        "thumb": columns["thumb"],
    }
    return path, contents


def test_asset_type_marks_read_as_refiner_marks() -> None:
    def info(field: pa.Field) -> tuple | None:
        found = asset_of(field)
        return None if found is None else (found.kind, found.form, found.is_list)

    assert info(marked("v", pa.string(), b"video")) == ("video", "path", False)
    assert info(marked("v", pa.large_binary(), b"Image")) == ("image", "bytes", False)
    assert info(marked("v", pa.list_(pa.string()), b"audio")) == ("audio", "path", True)
    assert info(marked("v", pa.string(), b"point_cloud")) == ("file", "path", False)
    ref = mdr.datatype.BLOB_REFERENCE_TYPE
    assert info(marked("v", ref, b"file")) == ("file", "blob", False)
    assert info(marked("v", pa.int64(), b"video")) is None  # nothing a writer could fetch
    ours = mdr.datatype.audio_path().to_field("v")
    both = ours.with_metadata({**ours.metadata, FOREIGN_KIND_KEY: b"video"})
    assert info(both) == ("audio", "path", False)


@pytest.mark.parametrize("config", ["blobs", "files"])
def test_foreign_asset_columns_are_packed_and_copied(tmp_path: Path, config: str) -> None:
    source, contents = foreign_table(tmp_path)
    out = tmp_path / "out"
    assets = mdr.BlobAssetConfig() if config == "blobs" else mdr.FileAssetConfig()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnmarkedAssetsWarning)
        summary = launch(mdr.read_parquet(str(source)).write_parquet(str(out), assets=assets))
    assert summary.counters["assets_written"] == 3 + 4 + 3 + 3

    table = read_table(out).sort_by("episode")
    form = "blob" if config == "blobs" else "path"
    expected = {"video": "video", "frames": "image", "depth": "file", "thumb": "image"}
    for name, kind in expected.items():
        metadata = table.schema.field(name).metadata
        assert metadata[KIND_KEY] == kind.encode() and metadata[FORM_KEY] == form.encode()
        assert FOREIGN_KIND_KEY not in metadata  # only refiner's marks are written
    assert table.schema.field("note").metadata is None

    def load(value: object) -> bytes:
        if config == "blobs":
            return mdr.read_blob(value)
        assert str(value).startswith(str(out))
        return Path(str(value)).read_bytes()

    rows = table.to_pylist()
    assert [r["note"] for r in rows] == ["a.mp4", "b.mp4", "c.mp4"]
    for name in ("video", "depth", "thumb"):
        assert [load(r[name]) for r in rows] == contents[name]
    assert [[load(v) for v in r["frames"]] for r in rows] == contents["frames"]
