"""Asset configs: validation at construction, the old keywords, and JSONL outputs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

import refiner_core as mdr

from .media import attempt_dirs, blocks, launch, read_jsonl_rows, read_rows, write_files

dt = mdr.datatype
CONFIG_CLASSES = [mdr.FileAssetConfig, mdr.BlobAssetConfig]


# validation -----------------------------------------------------------------------


@pytest.mark.parametrize("cls", CONFIG_CLASSES)
def test_defaults(cls):
    config = cls()
    assert (config.subdir, config.missing_policy, config.max_in_flight) == ("assets", "error", 16)
    if cls is mdr.BlobAssetConfig:
        assert config.target_bytes == 1 << 30


@pytest.mark.parametrize("cls", CONFIG_CLASSES)
@pytest.mark.parametrize("value", [0, -1, 1.5, "8", True, None])
def test_max_in_flight_must_be_a_positive_integer(cls, value):
    with pytest.raises(ValueError, match="max_in_flight must be a positive integer"):
        cls(max_in_flight=value)


@pytest.mark.parametrize("value", [0, -1, 2.0, "1", False])
def test_target_bytes_must_be_a_positive_integer(value):
    with pytest.raises(ValueError, match="target_bytes must be a positive integer"):
        mdr.BlobAssetConfig(target_bytes=value)


@pytest.mark.parametrize("cls", CONFIG_CLASSES)
@pytest.mark.parametrize("policy", ["skip", "", "ERROR", None, "null"])
def test_unknown_missing_policy(cls, policy):
    with pytest.raises(ValueError, match="missing_policy") as caught:
        cls(missing_policy=policy)
    for known in ("'error'", "'set_null'", "'drop_row'"):
        assert known in str(caught.value)


@pytest.mark.parametrize("cls", CONFIG_CLASSES)
@pytest.mark.parametrize(
    "subdir",
    [
        "",
        "/abs/assets",
        "..",
        "../assets",
        "media/../../x",
        "media/..",
        "a\\b",
        "s3://bucket/assets",
        "file://assets",
        "a//b",
        "media/",
        "~/assets",
        "C:assets",
        None,
        5,
        "_refiner",
        ".hidden",
    ],
)
def test_subdir_must_stay_inside_the_output(cls, subdir):
    with pytest.raises(ValueError, match="subdir"):
        cls(subdir=subdir)


@pytest.mark.parametrize("cls", CONFIG_CLASSES)
@pytest.mark.parametrize("subdir", ["assets", "media/v1", "blobs-2", "a.b", "x..y"])
def test_valid_subdirs(cls, subdir):
    assert cls(subdir=subdir).subdir == subdir


def test_configs_are_frozen_and_comparable():
    config = mdr.BlobAssetConfig(target_bytes=10)
    with pytest.raises(AttributeError):
        config.target_bytes = 0
    assert config == mdr.BlobAssetConfig(target_bytes=10)


def test_assets_argument_of_the_wrong_type(tmp_path):
    with pytest.raises(TypeError, match="FileAssetConfig"):
        mdr.from_items([{"a": 1}]).write_parquet(str(tmp_path), assets="blobs")
    with pytest.raises(TypeError, match="unexpected keyword"):
        mdr.from_items([{"a": 1}]).write_parquet(str(tmp_path), upload_asset=True)


# old keywords ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("legacy", "call", "config"),
    [
        ({"upload_assets": True}, "assets=mdr.FileAssetConfig()", mdr.FileAssetConfig()),
        (
            {"assets_subdir": "media"},
            "assets=mdr.FileAssetConfig(subdir='media')",
            mdr.FileAssetConfig(subdir="media"),
        ),
        (
            {"upload_assets": True, "max_asset_uploads_in_flight": 4},
            "assets=mdr.FileAssetConfig(max_in_flight=4)",
            mdr.FileAssetConfig(max_in_flight=4),
        ),
        (
            {"missing_asset_policy": "drop_row"},
            "assets=mdr.FileAssetConfig(missing_policy='drop_row')",
            mdr.FileAssetConfig(missing_policy="drop_row"),
        ),
        (
            {
                "upload_assets": True,
                "assets_subdir": "media",
                "max_asset_uploads_in_flight": 32,
                "missing_asset_policy": "set_null",
            },
            "assets=mdr.FileAssetConfig(subdir='media', max_in_flight=32, "
            "missing_policy='set_null')",
            mdr.FileAssetConfig(subdir="media", max_in_flight=32, missing_policy="set_null"),
        ),
    ],
)
@pytest.mark.parametrize("writer", ["write_parquet", "write_jsonl"])
def test_old_keywords_map_to_file_asset_config(tmp_path, legacy, call, config, writer):
    pipeline = mdr.from_items([{"a": 1}])
    with pytest.warns(DeprecationWarning) as caught:
        sequence = getattr(pipeline, writer)(str(tmp_path / "out"), **legacy)
    (message,) = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert call in message
    assert writer in message
    assert sequence.stages[0].sink.assets == config
    # the warning points at the caller, not at refiner's own modules
    assert {Path(w.filename).name for w in caught} == {Path(__file__).name}


@pytest.mark.parametrize(
    "legacy",
    [{"upload_assets": False}, {"upload_assets": False, "assets_subdir": "media"}],
)
def test_upload_assets_false_means_no_asset_config(tmp_path, legacy):
    with pytest.warns(DeprecationWarning, match="assets=None"):
        sequence = mdr.from_items([{"a": 1}]).write_parquet(str(tmp_path / "out"), **legacy)
    assert sequence.stages[0].sink.assets is None


@pytest.mark.parametrize("cls", CONFIG_CLASSES)
def test_mixing_old_keywords_with_assets_is_an_error(tmp_path, cls):
    with pytest.raises(ValueError, match="assets=") as caught:
        mdr.from_items([{"a": 1}]).write_parquet(
            str(tmp_path), assets=cls(), missing_asset_policy="error"
        )
    assert "missing_asset_policy" in str(caught.value)


def test_old_keywords_are_validated_like_the_config(tmp_path):
    with pytest.raises(ValueError, match="subdir"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        mdr.from_items([{"a": 1}]).write_parquet(str(tmp_path), assets_subdir="../up")


def test_a_script_sees_the_deprecation_warning(tmp_path):
    """Python shows DeprecationWarning by default only when it is attributed to ``__main__``."""
    script = tmp_path / "old_script.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import refiner_core as mdr
            mdr.from_items([{{"a": 1}}]).write_parquet({str(tmp_path / "out")!r}, upload_assets=True)
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    assert "DeprecationWarning" in result.stderr
    assert "assets=mdr.FileAssetConfig()" in result.stderr
    assert "old_script.py" in result.stderr


# JSONL ----------------------------------------------------------------------------


def test_jsonl_with_inline_bytes_and_no_asset_config_fails(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(mdr.StageFailed) as caught:
        mdr.from_items(
            [{"i": 0, "image": b"\x89PNG"}], dtypes={"image": dt.image_bytes()}
        ).write_jsonl(str(out)).launch_local()
    message = str(caught.value).split("\n\n", 1)[0]
    assert "'image'" in message
    assert "assets=mdr.FileAssetConfig()" in message
    assert "assets=mdr.BlobAssetConfig()" in message
    assert not list(out.glob("*.jsonl"))


@pytest.mark.parametrize("config", [mdr.FileAssetConfig(), mdr.BlobAssetConfig(target_bytes=8)])
def test_jsonl_with_assets_writes_and_reads_back(tmp_path, config):
    files = write_files(tmp_path / "src", {"a.y4m": b"video-a", "b.y4m": b"video-b"})
    rows = [
        {"i": 0, "image": b"img-0", "video": files["a.y4m"], "frames": [b"f0", b"f1"]},
        {"i": 1, "image": b"img-1", "video": files["b.y4m"], "frames": []},
    ]
    out = tmp_path / "out"
    summary = launch(
        mdr.from_items(
            rows,
            dtypes={
                "image": dt.image_bytes(),
                "video": dt.video_path(),
                "frames": dt.list_(dt.image_bytes()),
            },
        ).write_jsonl(str(out), assets=config)
    )
    assert summary.counters["rows_written"] == 2 and summary.counters["assets_written"] == 6
    is_blob = isinstance(config, mdr.BlobAssetConfig)
    written = sorted(read_jsonl_rows(out), key=lambda r: r["i"])
    if is_blob:
        assert set(written[0]["image"]) == {"path", "offset", "size"}
        read = mdr.read_blob
        assert blocks(out)
    else:
        assert isinstance(written[0]["image"], str)
        read = lambda p: Path(p).read_bytes()  # noqa: E731
        assert attempt_dirs(out)
    for row, source in zip(written, rows, strict=True):
        assert read(row["image"]) == source["image"]
        assert read(row["video"]) == Path(source["video"]).read_bytes()
        assert [read(v) for v in row["frames"]] == source["frames"]

    # the output folder reads back as JSONL (asset folders skipped) and packs again
    ref = dt.blob_reference("image") if is_blob else dt.image_path()
    back = mdr.read_jsonl(
        str(out), dtypes={"image": ref, "video": dt.video_path() if not is_blob else ref}
    )
    again = tmp_path / "again"
    launch(back.write_parquet(str(again), assets=mdr.BlobAssetConfig()))
    repacked = sorted(read_rows(again), key=lambda r: r["i"])
    assert [mdr.read_blob(r["image"]) for r in repacked] == [b"img-0", b"img-1"]
    assert [mdr.read_blob(r["video"]) for r in repacked] == [b"video-a", b"video-b"]


@pytest.mark.parametrize("config", [mdr.FileAssetConfig, mdr.BlobAssetConfig])
def test_source_storage_options_must_be_a_dict(config):
    assert config(source_storage_options={"anon": True}).source_storage_options == {"anon": True}
    with pytest.raises(ValueError, match="source_storage_options must be a dict"):
        config(source_storage_options="anon")
