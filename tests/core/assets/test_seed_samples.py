"""The code samples of the media assets guide, run as written on generated videos.

The samples use the absolute paths ``/data/videos.parquet`` and ``/tmp/out``. Each test
that takes ``samples`` runs in a private mount namespace where those are folders of the
test (``conftest.py``, ``sample_mounts.py``): there the fixture creates the first (real
``.y4m`` videos referenced) and empties the second. A sample's
``pipeline.write_parquet(...)`` returns a sequence that the sample discards; the
``written`` fixture records it so the test can launch it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import refiner_core as mdr

from .media import attempt_dirs, blocks, read_rows, relative_files


def sample_pipeline():
    pipeline = mdr.read_parquet(
        "/data/videos.parquet",
        dtypes={"video": mdr.datatype.video_path()},
    )
    return pipeline


def test_dtype_sample_marks_the_video_column(samples):
    pipeline = mdr.read_parquet(
        "/data/videos.parquet",
        dtypes={"video": mdr.datatype.video_path()},
    )

    rows = pipeline.materialize()
    assert [r.video for r in rows] == samples["videos"]
    field = pipeline.declared_fields()["video"]
    info = mdr.datatype.asset_of(field)
    assert (info.kind, info.form, info.is_list) == ("video", "path", False)


def test_blob_reference_sample_reads_the_packed_range(samples, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    payloads = [bytes([i]) * (10 + i) for i in range(3)]
    paths = []
    for i, data in enumerate(payloads):
        (images / f"{i}.png").write_bytes(data)
        paths.append(str(images / f"{i}.png"))
    packed = tmp_path / "packed"
    mdr.from_items(
        [{"image": p} for p in paths], dtypes={"image": mdr.datatype.image_path()}
    ).write_parquet(str(packed), assets=mdr.BlobAssetConfig()).launch_local()
    rows = mdr.read_parquet(str(packed)).materialize()
    row = rows[2]

    field = mdr.datatype.blob_reference("image")
    encoded = mdr.read_blob(row["image"])

    assert encoded == payloads[2]
    assert field.arrow_type == mdr.datatype.BLOB_REFERENCE_TYPE
    assert mdr.datatype.asset_of(field.to_field("image")).kind == "image"
    assert set(row["image"]) == {"path", "offset", "size"}


def test_file_asset_config_sample(samples, written):
    pipeline = sample_pipeline()

    pipeline.write_parquet(
        "/tmp/out",
        assets=mdr.FileAssetConfig(),
    )

    summary = written[-1].launch_local().summary
    assert summary.counters["assets_written"] == len(samples["videos"])
    rows = sorted(read_rows(Path("/tmp/out")), key=lambda r: r["episode"])
    (attempt,) = attempt_dirs(Path("/tmp/out"))
    for row, source in zip(rows, samples["videos"], strict=True):
        assert row["video"].startswith(f"{attempt}/video/")
        assert Path(row["video"]).read_bytes() == Path(source).read_bytes()
        assert Path(row["video"]).read_bytes().startswith(b"YUV4MPEG2 ")


def test_blob_asset_config_sample(samples, written):
    pipeline = sample_pipeline()

    pipeline.write_parquet(
        "/tmp/out",
        assets=mdr.BlobAssetConfig(target_bytes=1 << 30),
    )

    summary = written[-1].launch_local().summary
    assert summary.counters["blocks_written"] == 1
    assert summary.counters["assets_written"] == len(samples["videos"])
    (block,) = blocks(Path("/tmp/out"))
    sources = [Path(v).read_bytes() for v in samples["videos"]]
    assert block.read_bytes() == b"".join(sources)
    rows = sorted(read_rows(Path("/tmp/out")), key=lambda r: r["episode"])
    assert [mdr.read_blob(r["video"]) for r in rows] == sources
    assert written[-1].stages[0].sink.assets.target_bytes == 1_073_741_824


def test_migration_samples_before_and_now_write_the_same_layout(samples, written):
    pipeline = sample_pipeline()

    # Before
    with pytest.warns(DeprecationWarning) as caught:
        pipeline.write_parquet(
            "/tmp/out",
            upload_assets=True,
            assets_subdir="media",
            max_asset_uploads_in_flight=32,
            missing_asset_policy="error",
        )
    (message,) = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert (
        "assets=mdr.FileAssetConfig(subdir='media', max_in_flight=32, missing_policy='error')"
        in message
    )
    before = written[-1].stages[0].sink.assets
    written[-1].launch_local()
    before_layout = _layout(Path("/tmp/out"), "media")

    # Now
    pipeline.write_parquet(
        "/tmp/out",
        assets=mdr.FileAssetConfig(
            subdir="media",
            max_in_flight=32,
            missing_policy="error",
        ),
    )
    now = written[-1].stages[0].sink.assets
    assert now == before == mdr.FileAssetConfig(subdir="media", max_in_flight=32)
    written[-1].launch_local()
    now_layout = _layout(Path("/tmp/out"), "media")
    assert now_layout == before_layout
    assert len(now_layout) == len(samples["videos"])


def test_missing_policy_sample(samples, written):
    pipeline = sample_pipeline()

    pipeline.write_parquet(
        "/tmp/out",
        assets=mdr.FileAssetConfig(missing_policy="error"),
    )

    summary = written[-1].launch_local().summary
    assert summary.counters["missing_assets"] == 0
    assert summary.counters["assets_written"] == len(samples["videos"])


def _layout(output: Path, subdir: str) -> list[str]:
    """Asset files relative to their attempt folder (which differs per run)."""
    names = []
    for relative in relative_files(output, subdir):
        parts = relative.split("/")
        assert parts[0] == subdir
        names.append("/".join(parts[2:]))
    return sorted(names)
