"""read_lerobot on a dataset in S3 (moto): clips point into the bucket and read from there."""

from __future__ import annotations

import pytest
import s3fs

import refiner_core as mdr
from tests.core.lerobot.layout import pixel, write_dataset
from tests.core.lerobot.reading import av_frames, rows_of
from tests.s3_fixtures import *  # noqa: F403

CAM = "observation.images.front"


def test_read_lerobot_from_s3_gives_clips_that_read_from_the_bucket(tmp_path, s3_bucket, s3_proxy):
    local = write_dataset(str(tmp_path / "ds"), [10, 10, 10], cameras=(CAM,), row_group_rows=10)
    options = s3_proxy.storage_options()
    fs = s3fs.S3FileSystem(**options)
    fs.put(local, f"{s3_bucket}/ds", recursive=True)
    root = f"s3://{s3_bucket}/ds"
    s3_proxy.clear()
    pipeline = mdr.read_lerobot(root, episodes=[2], storage_options=options)
    rows = rows_of(pipeline)
    assert [r["index"] for r in rows] == list(range(20, 30))
    clip = rows[3][CAM]
    assert clip["path"] == f"{root}/videos/{CAM}/chunk-000/file-000.mp4"
    [(at, frame)] = list(mdr.read_frames(clip, storage_options=options))
    assert at == pytest.approx(2.3) and abs(int(frame[0, 0, 0]) - pixel(23, 0)) <= 3
    episodes = mdr.read_lerobot(root, rows="episodes", storage_options=options)
    last = rows_of(episodes)[-1]
    assert len(av_frames(mdr.read_clip(last[CAM], options))) == 10
    assert {r.path.split("/")[2] for r in s3_proxy.records("GetObject")} == {"ds"}
