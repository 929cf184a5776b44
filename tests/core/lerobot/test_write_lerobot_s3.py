"""write_lerobot into S3 (moto), from a dataset in the same bucket."""

from __future__ import annotations

import s3fs

import refiner_core as mdr
from tests.core.lerobot.layout import pixel, write_dataset
from tests.core.lerobot.reading import rows_of
from tests.core.lerobot.writing import episode_rows
from tests.s3_fixtures import *  # noqa: F403

CAM = "observation.images.front"


def test_write_lerobot_to_s3_commits_one_dataset(tmp_path, s3_bucket, s3_storage_options):
    options = s3_storage_options
    fs = s3fs.S3FileSystem(**options)
    local = write_dataset(str(tmp_path / "ds"), [4, 6, 5], cameras=(CAM,))
    fs.put(local, f"{s3_bucket}/src", recursive=True)
    source, out = f"s3://{s3_bucket}/src", f"s3://{s3_bucket}/out"

    rows = episode_rows(source, storage_options=options, num_shards=2)
    result = rows.write_lerobot(
        out, fps=10, storage_options=options, clip_storage_options=options
    ).launch_local(num_workers=2)
    assert result.summary.counters["clips_remuxed"] == 3

    keys = sorted(k.split("/out/", 1)[1] for k in fs.find(f"{s3_bucket}/out"))
    dataset = [k for k in keys if not k.startswith("_refiner/")]
    assert dataset == [
        "data/chunk-000/file-000.parquet",
        "data/chunk-000/file-001.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "meta/info.json",
        "meta/stats.json",
        "meta/tasks.parquet",
        f"videos/{CAM}/chunk-000/file-000.mp4",
        f"videos/{CAM}/chunk-000/file-001.mp4",
    ]
    assert not [k for k in keys if k.startswith("_refiner/lerobot/")]
    after = rows_of(mdr.read_lerobot(out, storage_options=options))
    assert [r["index"] for r in after] == list(range(15))
    assert [r["episode_index"] for r in after] == [0] * 4 + [1] * 6 + [2] * 5
    for row in after:
        [(_, frame)] = list(mdr.read_frames(row[CAM], storage_options=options))
        assert abs(float(frame.mean()) - pixel(row["index"], 0)) <= 2
