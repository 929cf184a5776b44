"""read_lerobot on v3.0 datasets laid out with real H.264 video."""

from __future__ import annotations

import json
import os

import pytest

import refiner_core as mdr
from tests.core.lerobot.layout import FPS, TASKS, pixel, write_dataset, write_dataset_v21
from tests.core.lerobot.reading import av_frames, rows_of

CAM = "observation.images.front"


@pytest.fixture
def dataset(tmp_path) -> str:
    return write_dataset(
        str(tmp_path / "ds"), [10, 6, 8], cameras=(CAM, "observation.images.wrist")
    )


def test_frames_rows_carry_data_task_and_a_clip_of_each_frame(dataset):
    rows = rows_of(mdr.read_lerobot(dataset))
    assert [r["index"] for r in rows] == list(range(24))
    second = rows[12]  # episode 1, frame 2
    assert second["episode_index"] == 1 and second["frame_index"] == 2
    assert second["task"] == TASKS[1]
    assert second["observation.state"] == [12.0, -12.0]
    clip = second[CAM]
    assert clip["path"] == f"{dataset}/videos/{CAM}/chunk-000/file-000.mp4"
    assert clip["from_timestamp"] == pytest.approx(1.2)  # episode 1 starts at 1.0 s in the file
    assert clip["to_timestamp"] == pytest.approx(1.3)
    [(at, frame)] = list(mdr.read_frames(clip))
    assert at == pytest.approx(1.2) and frame.shape == (24, 32, 3) and frame.dtype.name == "uint8"
    assert abs(int(frame[0, 0, 0]) - pixel(12, 0)) <= 3


def test_clip_columns_are_marked_video_clips(dataset):
    pipeline = mdr.read_lerobot(dataset)
    block = next(pipeline.source.read(pipeline.plan()[0], batch_rows=4))
    info = mdr.datatype.asset_of(block.schema.field(CAM))
    assert (info.kind, info.form) == ("video", "clip")


def test_episode_rows_have_length_tasks_and_one_clip_per_camera(dataset):
    rows = rows_of(mdr.read_lerobot(dataset, rows="episodes"))
    assert [(r["episode_index"], r["length"], r["tasks"]) for r in rows] == [
        (0, 10, [TASKS[0]]),
        (1, 6, [TASKS[1]]),
        (2, 8, [TASKS[0]]),
    ]
    assert [(r[CAM]["from_timestamp"], r[CAM]["to_timestamp"]) for r in rows] == [
        (0.0, 1.0),
        (1.0, 1.6),
        (1.6, 2.4),
    ]
    assert rows[2]["observation.images.wrist"]["path"].endswith("wrist/chunk-000/file-000.mp4")


def test_episodes_filter_and_video_keys(dataset):
    rows = rows_of(mdr.read_lerobot(dataset, episodes=[2], video_keys=[CAM]))
    assert {r["episode_index"] for r in rows} == {2}
    assert len(rows) == 8 and "observation.images.wrist" not in rows[0]


def test_episodes_filter_reads_only_the_row_groups_of_those_episodes(tmp_path):
    root = write_dataset(str(tmp_path / "ds"), [10, 10, 10], row_group_rows=10)
    data = f"{root}/data/chunk-000/file-000.parquet"
    with open(data, "r+b") as f:  # spoil episode 0's row group: reading it would fail
        f.seek(4)
        f.write(b"\0" * 200)
    assert len(rows_of(mdr.read_lerobot(root, episodes=[2]))) == 10


def test_shards_hold_whole_episodes(dataset):
    shards = mdr.read_lerobot(dataset, num_shards=2).plan()
    assert [[e.index for e in s.payload[2]] for s in shards] == [[0], [1, 2]]


def test_unknown_episode_and_camera_are_named(dataset):
    with pytest.raises(ValueError, match=r"episodes \[7\] are not in the dataset"):
        mdr.read_lerobot(dataset, episodes=[0, 7]).plan()
    with pytest.raises(ValueError, match=r"video_keys \['top'\] are not video features"):
        mdr.read_lerobot(dataset, video_keys=["top"]).plan()


def test_not_a_v3_dataset_is_refused_with_the_reason(tmp_path):
    with pytest.raises(ValueError, match="no meta/info.json"):
        mdr.read_lerobot(str(tmp_path)).plan()


def test_frames_write_to_parquet_keeping_clip_references(dataset, tmp_path):
    out = str(tmp_path / "out")
    mdr.read_lerobot(dataset, episodes=[1]).write_parquet(out).launch_local(num_workers=1)
    back = rows_of(mdr.read_parquet(out))
    assert len(back) == 6 and back[0][CAM]["from_timestamp"] == pytest.approx(1.0)


@pytest.mark.parametrize("assets", [mdr.FileAssetConfig(), mdr.BlobAssetConfig()])
def test_asset_writers_refuse_clip_columns_naming_the_column(dataset, tmp_path, assets):
    pipeline = mdr.read_lerobot(dataset, episodes=[1], video_keys=[CAM])
    out = tmp_path / "out"
    with pytest.raises(Exception, match=r"column 'observation.images.front' holds video clips"):
        pipeline.write_parquet(str(out), assets=assets).launch_local(num_workers=1)
    assert not [p for p in out.rglob("*") if p.is_file() and "_refiner" not in p.parts]


def test_fps_is_the_clip_length_of_a_frame(dataset):
    rows = rows_of(mdr.read_lerobot(dataset, episodes=[0]))
    assert all(
        r[CAM]["to_timestamp"] - r[CAM]["from_timestamp"] == pytest.approx(1 / FPS) for r in rows
    )


def test_v21_datasets_read_with_one_video_per_episode(tmp_path):
    root = write_dataset_v21(str(tmp_path / "ds21"), [10, 6, 8], cameras=(CAM,))
    frames = rows_of(mdr.read_lerobot(root, episodes=[1]))
    assert [r["index"] for r in frames] == list(range(10, 16))
    assert frames[2]["task"] == TASKS[1]
    clip = frames[2][CAM]
    assert clip["path"] == f"{root}/videos/chunk-000/{CAM}/episode_000001.mp4"
    assert (clip["from_timestamp"], clip["to_timestamp"]) == pytest.approx((0.2, 0.3))
    [(_, frame)] = list(mdr.read_frames(clip))
    assert abs(int(frame[0, 0, 0]) - pixel(12, 0)) <= 3
    episodes = rows_of(mdr.read_lerobot(root, rows="episodes"))
    assert [e["length"] for e in episodes] == [10, 6, 8]
    assert [e[CAM]["to_timestamp"] for e in episodes] == pytest.approx([1.0, 0.6, 0.8])
    assert len(av_frames(mdr.read_clip(episodes[2][CAM]))) == 8


def test_a_missing_data_file_is_named(dataset):
    os.remove(f"{dataset}/data/chunk-000/file-000.parquet")
    with pytest.raises(
        ValueError, match=r"file-000.parquet, the data file of episodes \[0, 1, 2\], does not exist"
    ):
        rows_of(mdr.read_lerobot(dataset))


def test_frame_rows_of_a_shard_come_episode_by_episode(dataset):
    pipeline = mdr.read_lerobot(dataset, num_shards=1)
    [shard] = pipeline.plan()
    blocks = list(pipeline.source.read(shard, batch_rows=4))
    assert [len(b) for b in blocks] == [4, 4, 2, 4, 2, 4, 4]
    assert all(len(set(b.column("episode_index").to_pylist())) == 1 for b in blocks)


def test_other_versions_and_bad_arguments_are_refused_naming_them(dataset):
    import json

    with pytest.raises(ValueError, match=r"rows='steps' is not one of 'frames', 'episodes'"):
        mdr.read_lerobot(dataset, rows="steps")
    with pytest.raises(TypeError, match=r"episodes must be a list of episode indexes, got '0'"):
        mdr.read_lerobot(dataset, episodes="0")
    info_path = f"{dataset}/meta/info.json"
    with open(info_path) as f:
        info = json.load(f)
    info["codebase_version"] = "v2.0"
    with open(info_path, "w") as f:
        json.dump(info, f)
    with pytest.raises(ValueError, match=r"codebase_version='v2.0'; read_lerobot reads v3.0, v2.1"):
        mdr.read_lerobot(dataset).plan()


def test_refiner_verify_checks_that_clip_videos_exist(dataset, tmp_path):
    from refiner_core.cli.storage import open_output
    from refiner_core.cli.verify import verify_output

    out = str(tmp_path / "out")
    mdr.read_lerobot(dataset, episodes=[0], video_keys=[CAM]).write_parquet(out).launch_local()
    report = verify_output(open_output(out))
    assert report.ok and (report.rows, report.paths) == (10, 10)
    video = f"{dataset}/videos/{CAM}/chunk-000/file-000.mp4"
    os.remove(video)
    report = verify_output(open_output(out))
    assert not report.ok and f"column {CAM}: {video}: the file does not exist" in report.failures[0]


def test_v21_episode_rows_carry_the_episodes_stats_file(tmp_path):
    root = write_dataset_v21(str(tmp_path / "ds21"), [10, 6, 8], cameras=(CAM,))
    with open(f"{root}/meta/episodes_stats.jsonl", "w") as f:
        for index, length in enumerate([10, 6, 8]):
            stats = {
                "action": {"mean": [index + 0.5], "count": [length]},
                CAM: {"mean": [[[0.5]], [[0.5]], [[0.5]]]},
            }
            f.write(json.dumps({"episode_index": index, "stats": stats}) + "\n")
    episodes = rows_of(mdr.read_lerobot(root, rows="episodes"))
    assert [e["stats/action/mean"] for e in episodes] == [[0.5], [1.5], [2.5]]
    assert [e["stats/action/count"] for e in episodes] == [[10], [6], [8]]
    assert episodes[0][f"stats/{CAM}/mean"] == [[[0.5]], [[0.5]], [[0.5]]]
    frames = rows_of(mdr.read_lerobot(root, episodes=[0]))
    assert not [k for k in frames[0] if k.startswith("stats/")]  # frame rows have none
