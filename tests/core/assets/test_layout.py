"""Where both asset configs put media, how they name it, and what the cells become."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from refiner_core.datatype import BLOB_REFERENCE_TYPE, FORM_KEY, KIND_KEY

from .media import (
    attempt_dirs,
    blocks,
    data_files,
    launch,
    read_rows,
    read_table,
    relative_files,
    write_files,
    write_videos,
)

dt = mdr.datatype


def _by(rows, key="i"):
    return sorted(rows, key=lambda r: r[key])


# file-per-asset -------------------------------------------------------------------


def test_file_config_layout_and_readable_names(tmp_path):
    sources = write_files(
        tmp_path / "src",
        {"my clip (1).y4m": b"clip-one", "plain.y4m": b"plain", "ünï.y4m": b"unicode"},
    )
    rows = [
        {"i": 0, "front cam/left": sources["my clip (1).y4m"]},
        {"i": 1, "front cam/left": sources["plain.y4m"]},
        {"i": 2, "front cam/left": sources["ünï.y4m"]},
    ]
    out = tmp_path / "out"
    summary = launch(
        mdr.from_items(rows, dtypes={"front cam/left": dt.video_path()}).write_parquet(
            str(out), assets=mdr.FileAssetConfig()
        )
    )
    (attempt,) = attempt_dirs(out)
    shard, attempt_id = attempt.name.split("__")
    assert shard == "00000" and len(attempt_id) == 12
    assert data_files(out) == [out / f"{attempt.name}.parquet"]
    assert relative_files(out, "assets") == [
        f"assets/{attempt.name}/front_cam_left/00000/00000000_my_clip_1_.y4m",
        f"assets/{attempt.name}/front_cam_left/00000/00000001_plain.y4m",
        f"assets/{attempt.name}/front_cam_left/00000/00000002_n_.y4m",
    ]
    written = _by(read_rows(out))
    for row, name in zip(written, ["my clip (1).y4m", "plain.y4m", "ünï.y4m"], strict=True):
        path = row["front cam/left"]
        assert Path(path).is_absolute()
        assert path.startswith(str(attempt) + "/front_cam_left/")
        assert Path(path).read_bytes() == Path(sources[name]).read_bytes()
    assert summary.counters["assets_written"] == 3
    assert summary.counters["asset_bytes"] == len(b"clip-one") + len(b"plain") + len(b"unicode")
    assert summary.asset_dirs == (f"assets/{attempt.name}",)


def test_file_config_puts_a_thousand_rows_in_each_folder(tmp_path):
    sources = write_files(
        tmp_path / "src", {f"{i}.bin": f"asset {i}".encode() for i in range(2_345)}
    )
    rows = [{"i": i, "blob": sources[f"{i}.bin"]} for i in range(2_345)]
    out = tmp_path / "out"
    summary = launch(
        mdr.from_items(rows, items_per_shard=3_000, dtypes={"blob": dt.image_path()}).write_parquet(
            str(out), assets=mdr.FileAssetConfig()
        )
    )
    (attempt,) = attempt_dirs(out)
    folders = sorted((attempt / "blob").iterdir())
    assert [f.name for f in folders] == ["00000", "00001", "00002"]
    assert [len(list(f.iterdir())) for f in folders] == [1_000, 1_000, 345]
    for row in read_rows(out):
        path = Path(row["blob"])
        assert path.parent.name == f"{row['i'] // 1_000:05d}"
        assert path.name == f"{row['i']:08d}_{row['i']}.bin"
        assert path.read_bytes() == f"asset {row['i']}".encode()
    assert summary.counters["assets_written"] == 2_345


def test_local_copies_go_out_in_turn_from_different_row_folders():
    from refiner_core.sinks.assets.file_writer import LOCAL_RUN, local_runs, row_folder

    rows = list(range(3_000))
    runs = local_runs(rows, [row_folder(row) for row in rows])
    assert sorted(k for run in runs for k in run) == rows
    folders = [{rows[k] // 1_000 for k in run} for run in runs]
    assert all(len(f) == 1 for f in folders) and all(len(run) <= LOCAL_RUN for run in runs)
    # the first batches, the ones copied at the same time, each come from another folder
    assert [f.pop() for f in folders[:6]] == [0, 1, 2, 0, 1, 2]


def test_file_config_one_attempt_folder_per_shard_and_subdir(tmp_path):
    videos = write_videos(tmp_path / "src", 5)
    out = tmp_path / "out"
    launch(
        mdr.from_items(
            [{"i": i, "video": v} for i, v in enumerate(videos)],
            items_per_shard=2,
            dtypes={"video": dt.video_path()},
        ).write_parquet(str(out), assets=mdr.FileAssetConfig(subdir="media/v1")),
        num_workers=2,
    )
    attempts = attempt_dirs(out, "media/v1")
    assert [a.name.split("__")[0] for a in attempts] == ["00000", "00001", "00002"]
    assert not (out / "assets").exists()
    names = [p.relative_to(out / "media" / "v1").parts for p in blocks_or_files(out, "media/v1")]
    # each shard numbers its rows from 0
    assert sorted((parts[0][:5], *parts[1:]) for parts in names) == [
        ("00000", "video", "00000", "00000000_episode_000.y4m"),
        ("00000", "video", "00000", "00000001_episode_001.y4m"),
        ("00001", "video", "00000", "00000000_episode_002.y4m"),
        ("00001", "video", "00000", "00000001_episode_003.y4m"),
        ("00002", "video", "00000", "00000000_episode_004.y4m"),
    ]
    for row in read_rows(out):
        assert Path(row["video"]).read_bytes() == Path(videos[row["i"]]).read_bytes()


def blocks_or_files(output: Path, subdir: str) -> list[Path]:
    return sorted(p for p in (output / subdir).rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "config", [mdr.FileAssetConfig(), mdr.BlobAssetConfig()], ids=["file", "blob"]
)
def test_columns_with_the_same_safe_name_get_folders_of_their_own(tmp_path, config):
    sources = write_files(tmp_path / "a", {"x.y4m": b"from-a"})
    other = write_files(tmp_path / "b", {"x.y4m": b"from-b"})
    third = write_files(tmp_path / "c", {"x.y4m": b"from-c"})
    out = tmp_path / "out"
    columns = ["cam a", "cam/a", "cam_a-1"]
    launch(
        mdr.from_items(
            [dict(zip(columns, [sources["x.y4m"], other["x.y4m"], third["x.y4m"]], strict=True))],
            dtypes=dict.fromkeys(columns, dt.video_path()),
        ).write_parquet(str(out), assets=config)
    )
    (row,) = read_rows(out)
    (attempt,) = attempt_dirs(out)
    assert sorted(p.name for p in attempt.iterdir()) == ["cam_a", "cam_a-1", "cam_a-1-2"]
    read = mdr.read_blob if isinstance(config, mdr.BlobAssetConfig) else _read_file
    assert [read(row[c]) for c in columns] == [b"from-a", b"from-b", b"from-c"]


# packed blocks --------------------------------------------------------------------


def _pack(tmp_path, contents: list[bytes], target: int, **options):
    names = {f"{i}.bin": data for i, data in enumerate(contents)}
    paths = write_files(tmp_path / "src", names)
    out = tmp_path / "out"
    summary = launch(
        mdr.from_items(
            [{"i": i, "video": paths[f"{i}.bin"]} for i in range(len(contents))],
            dtypes={"video": dt.video_path()},
            **options,
        ).write_parquet(str(out), assets=mdr.BlobAssetConfig(target_bytes=target))
    )
    return out, summary


def test_rollover_example_from_the_spec(tmp_path):
    out, summary = _pack(tmp_path, [b"abc", b"de", b"fghi"], target=6)
    (attempt,) = attempt_dirs(out)
    assert relative_files(out, "assets") == [
        f"assets/{attempt.name}/video/block-00000.bin",
        f"assets/{attempt.name}/video/block-00001.bin",
    ]
    block0, block1 = blocks(out)
    assert block0.read_bytes() == b"abcde"
    assert block1.read_bytes() == b"fghi"
    rows = _by(read_rows(out))
    assert [r["video"] for r in rows] == [
        {"path": str(block0), "offset": 0, "size": 3},
        {"path": str(block0), "offset": 3, "size": 2},
        {"path": str(block1), "offset": 0, "size": 4},
    ]
    assert [mdr.read_blob(r["video"]) for r in rows] == [b"abc", b"de", b"fghi"]
    assert summary.counters["blocks_written"] == 2
    assert summary.counters["block_bytes"] == 9
    assert summary.counters["assets_written"] == 3
    assert summary.counters["asset_bytes"] == 9


def test_oversize_asset_gets_a_block_of_its_own(tmp_path):
    out, summary = _pack(tmp_path, [b"ab", b"cdefgh", b"ij", b"klmnopq", b"r"], target=4)
    assert [b.read_bytes() for b in blocks(out)] == [b"ab", b"cdefgh", b"ij", b"klmnopq", b"r"]
    rows = _by(read_rows(out))
    assert all(r["video"]["offset"] == 0 for r in rows)
    assert [mdr.read_blob(r["video"]) for r in rows] == [b"ab", b"cdefgh", b"ij", b"klmnopq", b"r"]
    assert summary.counters["blocks_written"] == 5


def test_first_asset_larger_than_target_then_small_ones_share(tmp_path):
    out, _ = _pack(tmp_path, [b"0123456789", b"a", b"b", b"c"], target=3)
    assert [b.read_bytes() for b in blocks(out)] == [b"0123456789", b"abc"]


def test_blocks_per_shard_attempt_and_column(tmp_path):
    videos = write_videos(tmp_path / "v", 4)
    thumbs = write_files(tmp_path / "t", {f"{i}.png": bytes([65 + i]) * 5 for i in range(4)})
    out = tmp_path / "out"
    launch(
        mdr.from_items(
            [{"i": i, "video": videos[i], "thumb": thumbs[f"{i}.png"]} for i in range(4)],
            items_per_shard=2,
            dtypes={"video": dt.video_path(), "thumb": dt.image_path()},
        ).write_parquet(str(out), assets=mdr.BlobAssetConfig()),
        num_workers=2,
    )
    attempts = attempt_dirs(out)
    assert len(attempts) == 2
    for attempt in attempts:
        assert sorted(p.name for p in attempt.iterdir()) == ["thumb", "video"]
        assert [p.name for p in (attempt / "video").iterdir()] == ["block-00000.bin"]
        assert [p.name for p in (attempt / "thumb").iterdir()] == ["block-00000.bin"]
    rows = _by(read_rows(out))
    for row in rows:
        assert mdr.read_blob(row["video"]) == Path(videos[row["i"]]).read_bytes()
        assert mdr.read_blob(row["thumb"]) == bytes([65 + row["i"]]) * 5
        shard = "00000" if row["i"] < 2 else "00001"
        assert Path(row["video"]["path"]).parent.parent.name.startswith(shard + "__")
    # shard 1's block holds its own rows from offset 0
    assert rows[2]["thumb"]["offset"] == 0 and rows[3]["thumb"]["offset"] == 5


def test_read_blob_returns_source_bytes_for_every_reference(tmp_path):
    videos = write_videos(tmp_path / "v", 12, frames=2)
    out = tmp_path / "out"
    size = Path(videos[0]).stat().st_size
    launch(
        mdr.from_items(
            [{"i": i, "video": v} for i, v in enumerate(videos)],
            items_per_shard=5,
            dtypes={"video": dt.video_path()},
        ).write_parquet(str(out), assets=mdr.BlobAssetConfig(target_bytes=3 * size)),
        num_workers=2,
    )
    rows = _by(read_rows(out))
    assert len(rows) == 12
    for row in rows:
        assert mdr.read_blob(row["video"]) == Path(videos[row["i"]]).read_bytes()
        ref = row["video"]
        block = Path(ref["path"]).read_bytes()
        assert (
            block[ref["offset"] : ref["offset"] + ref["size"]]
            == Path(videos[row["i"]]).read_bytes()
        )
    # shards of 5, 5 and 2 rows, three videos per block: 3 + 2, 3 + 2, 2
    assert sorted(b.stat().st_size // size for b in blocks(out)) == [2, 2, 2, 3, 3]


# list columns and inline bytes ------------------------------------------------------


@pytest.mark.parametrize(
    "config", [mdr.FileAssetConfig(), mdr.BlobAssetConfig(target_bytes=8)], ids=["file", "blob"]
)
def test_list_of_paths_column(tmp_path, config):
    files = write_files(tmp_path / "src", {f"f{i}.jpg": f"frame-{i}".encode() for i in range(5)})
    rows = [
        {"i": 0, "frames": [files["f0.jpg"], files["f1.jpg"]]},
        {"i": 1, "frames": []},
        {"i": 2, "frames": None},
        {"i": 3, "frames": [files["f2.jpg"], None, files["f3.jpg"], files["f4.jpg"]]},
    ]
    out = tmp_path / "out"
    summary = launch(
        mdr.from_items(rows, dtypes={"frames": dt.list_(dt.image_path())}).write_parquet(
            str(out), assets=config
        )
    )
    written = _by(read_rows(out))
    assert written[1]["frames"] == [] and written[2]["frames"] is None
    assert written[3]["frames"][1] is None
    read = _read_blob if isinstance(config, mdr.BlobAssetConfig) else _read_file
    got = [[read(v) for v in r["frames"]] for r in (written[0], written[3])]
    assert got == [[b"frame-0", b"frame-1"], [b"frame-2", None, b"frame-3", b"frame-4"]]
    assert summary.counters["assets_written"] == 5
    field = read_table(out).schema.field("frames")
    info = dt.asset_of(field)
    assert (info.kind, info.is_list) == ("image", True)
    if isinstance(config, mdr.BlobAssetConfig):
        assert field.type.value_type == BLOB_REFERENCE_TYPE
        # target 8: "frame-0" (7 bytes) fills a block, each frame gets its own
        assert [b.read_bytes() for b in blocks(out)] == [f"frame-{i}".encode() for i in range(5)]
    else:
        (attempt,) = attempt_dirs(out)
        assert relative_files(out, "assets") == [
            f"assets/{attempt.name}/frames/00000/{name}"
            for name in [
                "00000000-0000_f0.jpg",
                "00000000-0001_f1.jpg",
                "00000003-0000_f2.jpg",
                "00000003-0002_f3.jpg",
                "00000003-0003_f4.jpg",
            ]
        ]


def _read_file(path):
    return None if path is None else Path(path).read_bytes()


def _read_blob(ref):
    return None if ref is None else mdr.read_blob(ref)


@pytest.mark.parametrize(
    "config", [mdr.FileAssetConfig(), mdr.BlobAssetConfig()], ids=["file", "blob"]
)
def test_inline_bytes_columns_and_lists_of_bytes(tmp_path, config):
    rows = [
        {"i": i, "image": bytes([i]) * (i + 1), "audio": [b"a" * i, b"b" * (i + 2)]}
        for i in range(3)
    ]
    out = tmp_path / "out"
    summary = launch(
        mdr.from_items(
            rows, dtypes={"image": dt.image_bytes(), "audio": dt.list_(dt.audio_bytes())}
        ).write_parquet(str(out), assets=config)
    )
    written = _by(read_rows(out))
    is_blob = isinstance(config, mdr.BlobAssetConfig)
    read = mdr.read_blob if is_blob else _read_file
    for row, source in zip(written, rows, strict=True):
        assert read(row["image"]) == source["image"]
        assert [read(v) for v in row["audio"]] == source["audio"]
    assert summary.counters["assets_written"] == 9
    assert summary.counters["asset_bytes"] == sum(
        len(r["image"]) + sum(map(len, r["audio"])) for r in rows
    )
    schema = read_table(out).schema
    assert schema.field("image").metadata[FORM_KEY] == (b"blob" if is_blob else b"path")
    assert schema.field("audio").metadata[KIND_KEY] == b"audio"
    if is_blob:
        image_block, audio_block = sorted(blocks(out), key=lambda p: p.parent.name != "image")
        assert image_block.read_bytes() == b"".join(r["image"] for r in rows)
        assert audio_block.read_bytes() == b"".join(b"".join(r["audio"]) for r in rows)
    else:
        (attempt,) = attempt_dirs(out)
        assert f"assets/{attempt.name}/image/00000/00000002.bin" in relative_files(out, "assets")
        assert f"assets/{attempt.name}/audio/00000/00000001-0001.bin" in relative_files(
            out, "assets"
        )


# schema marks ---------------------------------------------------------------------


def test_asset_marks_survive_parquet_and_blob_columns_are_references(tmp_path):
    videos = write_videos(tmp_path / "v", 3)
    raw = tmp_path / "raw"
    launch(
        mdr.from_items(
            [{"i": i, "video": v, "thumb": b"t" * i} for i, v in enumerate(videos)],
            dtypes={"video": dt.video_path(), "thumb": dt.image_bytes()},
        ).write_parquet(str(raw))
    )
    # assets=None keeps values and marks as they are
    (raw_file,) = data_files(raw)
    schema = pq.read_schema(raw_file)
    assert schema.field("video").metadata == {KIND_KEY: b"video", FORM_KEY: b"path"}
    assert schema.field("thumb").metadata == {KIND_KEY: b"image", FORM_KEY: b"bytes"}
    assert not (raw / "assets").exists()
    assert _by(read_rows(raw))[1]["video"] == videos[1]

    # read back without dtypes: the marks alone make the columns assets
    packed = tmp_path / "packed"
    launch(mdr.read_parquet(str(raw)).write_parquet(str(packed), assets=mdr.BlobAssetConfig()))
    schema = read_table(packed).schema
    for name, kind in (("video", b"video"), ("thumb", b"image")):
        field = schema.field(name)
        assert field.type == BLOB_REFERENCE_TYPE
        assert field.metadata == {KIND_KEY: kind, FORM_KEY: b"blob"}
        info = dt.asset_of(field)
        assert (info.form, info.is_list) == ("blob", False)
    rows = _by(read_rows(packed))
    assert [mdr.read_blob(r["video"]) for r in rows] == [Path(v).read_bytes() for v in videos]
    assert [mdr.read_blob(r["thumb"]) for r in rows] == [b"", b"t", b"tt"]

    # and a blob column read back is copied again (to files this time)
    files = tmp_path / "files"
    launch(mdr.read_parquet(str(packed)).write_parquet(str(files), assets=mdr.FileAssetConfig()))
    rows = _by(read_rows(files))
    assert [Path(r["video"]).read_bytes() for r in rows] == [Path(v).read_bytes() for v in videos]
    field = read_table(files).schema.field("video")
    assert field.type == dt.string() and field.metadata[FORM_KEY] == b"path"
