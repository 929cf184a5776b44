"""create / append / overwrite, and the errors that stop a write before it does harm."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import refiner_core as mdr
from refiner_core.errors import StageFailed

from .helpers import data_files, facts, manifests, media, table


def items(start: int, n: int) -> list[dict]:
    return [{"id": i, "name": f"row{i}"} for i in range(start, start + n)]


def write(out: str, rows: list[dict], **options) -> mdr.LaunchStats:
    return (
        mdr.from_items(rows, items_per_shard=4)
        .write_lance(out, **options)
        .launch_local(num_workers=2)
    )


def test_append_and_overwrite(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    write(out, items(0, 6))
    stats = write(out, items(6, 5), mode="append")
    assert stats.summary.commit["read_version"] == 1
    assert stats.summary.commit["version"] == 2
    assert sorted(table(out).column("id").to_pylist()) == list(range(11))
    assert table(out, version=1).num_rows == 6  # older versions stay readable

    stats = write(out, items(100, 3), mode="overwrite")
    assert stats.summary.commit["version"] == 3
    assert sorted(table(out).column("id").to_pylist()) == [100, 101, 102]
    assert table(out, version=2).num_rows == 11
    history = facts(out)
    assert history["versions"] == [1, 2, 3]
    assert [history["properties"][v]["refiner.mode"] for v in (1, 2, 3)] == [
        "create",
        "append",
        "overwrite",
    ]
    # Each run's manifests stay; earlier runs' files were never treated as rejected.
    assert {m["run_id"] for m in manifests(out)} == {
        history["properties"][v]["refiner.run_id"] for v in (1, 2, 3)
    }
    assert set(history["data_files"]) <= set(data_files(out))


def test_overwrite_and_append_create_a_missing_dataset(tmp_path: Path) -> None:
    for mode in ("overwrite", "append"):
        out = str(tmp_path / f"{mode}.lance")
        stats = write(out, items(0, 5), mode=mode)
        assert stats.summary.commit["read_version"] is None
        assert facts(out)["version"] == 1 and facts(out)["rows"] == 5


def test_create_over_existing_fails_before_writing(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    write(out, items(0, 4))
    before = (data_files(out), manifests(out))
    with pytest.raises(ValueError) as caught:
        write(out, items(4, 4))
    message = str(caught.value)
    assert "already exists at " + out in message and "(version 1)" in message
    assert "mode='append'" in message and "mode='overwrite'" in message
    assert (data_files(out), manifests(out)) == before
    assert facts(out)["version"] == 1


def test_append_with_another_schema_fails(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    write(out, items(0, 4))
    rows = [{"id": i, "name": i * 10} for i in range(3)]
    with pytest.raises(StageFailed) as caught:
        write(out, rows, mode="append")
    message = str(caught.value)
    assert f"cannot append to {out} version 1" in message
    assert "column 'name' is int64 but the dataset stores string" in message
    assert "mode='overwrite'" in message
    assert facts(out)["version"] == 1
    assert data_files(out) == facts(out)["data_files"]  # the failed attempts cleaned up

    with pytest.raises(StageFailed, match=r"unexpected \['extra'\]"):
        write(out, [{"id": 1, "name": "a", "extra": 1.5}], mode="append")


def test_append_with_another_asset_layout_fails(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    paths = media(tmp_path / "media", 2)
    mdr.from_items([{"image": p} for p in paths]).write_lance(out).launch_local()
    marked = mdr.from_items(
        [{"image": p} for p in paths], dtypes={"image": mdr.datatype.image_path()}
    )
    with pytest.raises(StageFailed) as caught:
        marked.write_lance(out, mode="append").launch_local()
    assert "column 'image' is a image/path asset but the dataset stores a plain column" in str(
        caught.value
    )
    assert "asset layout differs" in str(caught.value)

    packed = str(tmp_path / "packed.lance")
    marked.write_lance(packed, assets=mdr.BlobAssetConfig()).launch_local()
    with pytest.raises(StageFailed, match="column 'image' is string but the dataset stores struct"):
        marked.write_lance(packed, mode="append", assets=mdr.FileAssetConfig()).launch_local()
    assert facts(packed)["version"] == 1


@pytest.mark.parametrize("mode", ["create", "overwrite"])
def test_empty_create_or_overwrite_fails(tmp_path: Path, mode: str) -> None:
    out = str(tmp_path / "ds.lance")
    if mode == "overwrite":
        write(out, items(0, 3))
    empty = mdr.from_items(items(0, 8), items_per_shard=4).filter(lambda r: False)
    with pytest.raises(ValueError, match=f"mode='{mode}'.*produced no rows"):
        empty.write_lance(out, mode=mode).launch_local(num_workers=2)
    if mode == "create":
        assert not (Path(out) / "_versions").exists()
    else:
        assert facts(out)["version"] == 1 and facts(out)["rows"] == 3
    with pytest.raises(ValueError, match="produced no rows"):
        mdr.from_items([]).write_lance(str(tmp_path / "none.lance"), mode=mode).launch_local()


def test_empty_append_commits_nothing(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    write(out, items(0, 3))
    stats = (
        mdr.from_items(items(0, 3)).filter(lambda r: False).write_lance(out, mode="append")
    ).launch_local()
    assert stats.summary.commit["version"] == 1 and stats.summary.commit["rows"] == 0
    assert facts(out)["versions"] == [1]


def test_shards_with_different_schemas_fail_at_commit(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    rows = [{"v": 1}, {"v": "one"}]
    with pytest.raises(ValueError, match="shard 00001 wrote another schema.*dtypes="):
        mdr.from_items(rows, items_per_shard=1).write_lance(out).launch_local()
    assert data_files(out) == []
    assert not (Path(out) / "_versions").exists()


def test_bad_arguments(tmp_path: Path) -> None:
    pipeline = mdr.from_items([{"a": 1}])
    with pytest.raises(ValueError, match="mode must be one of"):
        pipeline.write_lance(str(tmp_path / "x.lance"), mode="upsert")
    with pytest.raises(ValueError, match="'data' is where Lance keeps its own files"):
        pipeline.write_lance(str(tmp_path / "x.lance"), assets=mdr.FileAssetConfig(subdir="data"))
    with pytest.raises(TypeError, match="unexpected keyword"):
        pipeline.write_lance(str(tmp_path / "x.lance"), compression="zstd")
    with pytest.raises(
        TypeError, match=r"write_lance\(\) got unexpected keyword.*filename_template"
    ):
        pipeline.write("lance", str(tmp_path / "x.lance"), filename_template="{shard}.lance")


def test_schema_metadata_survives(tmp_path: Path) -> None:
    out = str(tmp_path / "ds.lance")
    mdr.from_items(
        [{"clip": "/v.mp4", "n": 1}], dtypes={"clip": mdr.datatype.video_path()}
    ).write_lance(out).launch_local()
    schema = facts(out)["schema"]
    assert schema.field("clip").metadata == {
        b"refiner.asset.kind": b"video",
        b"refiner.asset.form": b"path",
    }
    assert schema.field("n").type == pa.int64()
