"""write_lerobot: episode rows become a LeRobot v3.0 dataset that read_lerobot reads back."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from tests.core.lerobot.layout import pixel, write_dataset
from tests.core.lerobot.reading import rows_of
from tests.core.lerobot.writing import episode_rows

FRONT, WRIST = "observation.images.front", "observation.images.wrist"
LENGTHS = [5, 7, 6]


def _json(root: str, name: str) -> dict:
    with open(f"{root}/meta/{name}.json") as f:
        return json.load(f)


def _frames(clip) -> list[np.ndarray]:
    return [frame for _, frame in mdr.read_frames(clip)]


@pytest.fixture
def source(tmp_path) -> str:
    return write_dataset(str(tmp_path / "src"), LENGTHS, cameras=(FRONT, WRIST))


def test_round_trip_keeps_frames_timestamps_and_video(source, tmp_path):
    out = str(tmp_path / "out")
    result = episode_rows(source).write_lerobot(out, fps=10).launch_local()
    counters = result.summary.counters
    assert (counters["clips_remuxed"], counters["clips_transcoded"]) == (6, 0)
    assert counters["frames_written"] == sum(LENGTHS)
    assert counters["rows_written"] == 3  # episodes
    root = tmp_path / "out"
    written = [*root.glob("data/*/*.parquet"), *root.glob("videos/*/*/*.mp4")]
    assert counters["files_written"] == len(written) == 3
    # the attempt's bytes: the data file is rewritten with the dataset's numbers at commit
    total = sum(p.stat().st_size for p in written)
    assert abs(counters["bytes_written"] - total) < 0.05 * total

    before, after = rows_of(mdr.read_lerobot(source)), rows_of(mdr.read_lerobot(out))
    assert len(after) == len(before) == sum(LENGTHS)
    for old, new in zip(before, after, strict=True):
        for key in ("index", "episode_index", "frame_index", "task", "observation.state", "action"):
            assert new[key] == old[key], (key, old, new)
        assert new["timestamp"] == pytest.approx(old["timestamp"])
        for camera in (FRONT, WRIST):
            # packets are copied, so decoding gives the very same pixels
            [old_frame], [new_frame] = _frames(old[camera]), _frames(new[camera])
            assert np.array_equal(old_frame, new_frame), (camera, old["index"])
    # the three episodes share one MP4 per camera, one after another
    episodes = pq.read_table(f"{out}/meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [e[f"videos/{FRONT}/file_index"] for e in episodes] == [0, 0, 0]
    assert [e[f"videos/{FRONT}/from_timestamp"] for e in episodes] == pytest.approx([0, 0.5, 1.2])
    assert [(e["dataset_from_index"], e["dataset_to_index"]) for e in episodes] == [
        (0, 5),
        (5, 12),
        (12, 18),
    ]
    info = _json(out, "info")
    assert (info["codebase_version"], info["total_episodes"], info["total_frames"]) == (
        "v3.0",
        3,
        18,
    )
    assert info["total_tasks"] == 2
    assert info["features"][FRONT]["shape"] == [24, 32, 3]
    assert info["features"]["observation.state"] == {
        "dtype": "float32",
        "shape": [2],
        "names": None,
    }
    assert pq.read_table(f"{out}/meta/tasks.parquet").to_pandas().index.tolist() == [
        "pick the cube",
        "place the cube",
    ]


def test_stats_are_merged_over_episodes(source, tmp_path):
    out = str(tmp_path / "out")
    episode_rows(source).write_lerobot(out, fps=10).launch_local()
    stats = _json(out, "stats")
    state = stats["observation.state"]
    # the frames' states are [i, -i] for i in 0..17
    assert state["min"] == [0.0, -17.0] and state["max"] == [17.0, 0.0]
    assert state["mean"] == pytest.approx([8.5, -8.5])
    assert state["std"] == pytest.approx([np.std(range(18))] * 2)
    assert state["count"] == [18]
    assert set(state) >= {"q01", "q10", "q50", "q90", "q99"}
    assert stats["index"]["max"] == [17]
    front = stats[FRONT]
    assert np.array(front["mean"]).shape == (3, 1, 1)
    values = [pixel(i, 0) / 255 for i in range(18)]
    assert front["max"][0][0][0] == pytest.approx(max(values), abs=2 / 255)
    assert front["min"][1][0][0] == pytest.approx(min(values), abs=2 / 255)
    assert front["mean"][2][0][0] == pytest.approx(np.mean(values), abs=2 / 255)
    # merged quantiles are the episodes' weighted by their frames, as LeRobot merges them
    bounds = np.cumsum([0, *LENGTHS])
    medians = [
        np.quantile(values[a:b], 0.5, method="inverted_cdf") * (b - a)
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    assert front["q50"][0][0][0] == pytest.approx(sum(medians) / 18, abs=2 / 255)
    assert front["count"] == [18]


def test_a_clip_of_another_resolution_is_transcoded(source, tmp_path):
    big = write_dataset(str(tmp_path / "big"), LENGTHS, cameras=(FRONT,), size=(64, 48))
    big_clips = {
        r["episode_index"]: r[FRONT] for r in rows_of(mdr.read_lerobot(big, rows="episodes"))
    }
    rows = episode_rows(source, video_keys=[FRONT]).map(
        lambda r: {FRONT: big_clips[1]} if r.episode_index == 1 else {}
    )
    out = str(tmp_path / "out")
    counters = rows.write_lerobot(out, fps=10).launch_local().summary.counters
    assert (counters["clips_remuxed"], counters["clips_transcoded"]) == (2, 1)
    info = _json(out, "info")
    assert info["features"][FRONT]["shape"] == [24, 32, 3]
    after = rows_of(mdr.read_lerobot(out))
    for row in after:
        [frame] = _frames(row[FRONT])
        assert frame.shape == (24, 32, 3)
        # dataset frame i shows pixel(i); the big dataset's episode 1 shows the same frames
        assert abs(float(frame.mean()) - pixel(row["index"], 0)) <= 3, row["index"]
    episodes = pq.read_table(f"{out}/meta/episodes/chunk-000/file-000.parquet").to_pylist()
    # the re-encoded clip lives in its own file; the copied ones share theirs
    assert [e[f"videos/{FRONT}/file_index"] for e in episodes] == [0, 1, 0]


def test_shards_make_one_dataset(source, tmp_path):
    out = str(tmp_path / "out")
    rows = episode_rows(source, num_shards=3)
    result = rows.write_lerobot(out, fps=10).launch_local(num_workers=2)
    assert result.summary.shards == 3
    after = rows_of(mdr.read_lerobot(out))
    assert [r["index"] for r in after] == list(range(18))
    assert [r["episode_index"] for r in after] == [0] * 5 + [1] * 7 + [2] * 6
    before = rows_of(mdr.read_lerobot(source))
    assert [r["observation.state"] for r in after] == [r["observation.state"] for r in before]
    assert [r["task"] for r in after] == [r["task"] for r in before]
    for row in after:
        [frame] = _frames(row[WRIST])
        assert abs(float(frame.mean()) - pixel(row["index"], 1)) <= 2
    info = _json(out, "info")
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 18, 2)
    assert sorted(p.name for p in (tmp_path / "out" / "data" / "chunk-000").iterdir()) == [
        "file-000.parquet",
        "file-001.parquet",
        "file-002.parquet",
    ]
    assert list((tmp_path / "out" / "_refiner" / "lerobot").iterdir()) == []


def test_files_roll_over_at_the_size_limits_and_chunks_fill_up(source, tmp_path):
    out = str(tmp_path / "out")
    episode_rows(source).write_lerobot(
        out, fps=10, video_files_size_in_mb=1e-6, data_files_size_in_mb=1e-6, chunks_size=2
    ).launch_local()
    episodes = pq.read_table(f"{out}/meta/episodes/chunk-000/file-000.parquet").to_pylist()
    where = [(0, 0), (0, 1), (1, 0)]  # (chunk, file): a chunk holds two files
    assert [
        (e[f"videos/{FRONT}/chunk_index"], e[f"videos/{FRONT}/file_index"]) for e in episodes
    ] == where
    assert [(e["data/chunk_index"], e["data/file_index"]) for e in episodes] == where
    assert [e[f"videos/{FRONT}/from_timestamp"] for e in episodes] == [0, 0, 0]
    assert (tmp_path / "out" / "videos" / FRONT / "chunk-001" / "file-000.mp4").exists()
    assert (tmp_path / "out" / "data" / "chunk-001" / "file-000.parquet").exists()
    for row in rows_of(mdr.read_lerobot(out)):
        [frame] = _frames(row[FRONT])
        assert abs(float(frame.mean()) - pixel(row["index"], 0)) <= 2


def test_a_clip_that_does_not_start_on_a_keyframe_is_transcoded(source, tmp_path):
    def one_frame_later(row):
        clip = dict(row[FRONT])
        clip["from_timestamp"] += 0.1
        clip["to_timestamp"] += 0.1
        return {FRONT: clip} if row.episode_index == 1 else {}

    out = str(tmp_path / "out")
    rows = episode_rows(source, video_keys=[FRONT]).map(one_frame_later)
    counters = rows.write_lerobot(out, fps=10).launch_local().summary.counters
    assert (counters["clips_remuxed"], counters["clips_transcoded"]) == (2, 1)
    rows = rows_of(mdr.read_lerobot(out))
    assert len(rows) == sum(LENGTHS)
    for row in rows:
        shown = row["index"] + (row["episode_index"] == 1)
        [frame] = _frames(row[FRONT])
        assert abs(float(frame.mean()) - pixel(shown, 0)) <= 3, row["index"]


def test_a_clip_with_the_wrong_frame_count_fails_and_leaves_no_dataset(source, tmp_path):
    def shorten_the_last(row):
        clip = dict(row[FRONT])
        clip["to_timestamp"] -= 0.1
        return {FRONT: clip} if row.episode_index == 2 else {}

    out = tmp_path / "out"
    rows = episode_rows(source, video_keys=[FRONT]).map(shorten_the_last)
    # tiny video files: the first episodes' videos are staged before the last one fails
    with pytest.raises(Exception, match=r"has 5 frames but the episode has 6"):
        rows.write_lerobot(str(out), fps=10, video_files_size_in_mb=1e-6).launch_local()
    assert not (out / "meta").exists() and not (out / "data").exists()
    assert not (out / "videos").exists()
    assert [p for p in (out / "_refiner").rglob("*.mp4")] == []  # the staging is gone too


def test_frame_lists_of_different_lengths_are_refused(tmp_path):
    rows = [{"tasks": ["t"], "action": [[1.0], [2.0]], "observation.state": [[1.0]]}]
    with pytest.raises(Exception, match=r"disagree on the episode's length.*'action': 2"):
        mdr.from_items(rows).write_lerobot(str(tmp_path / "o"), fps=10).launch_local()


def test_rows_without_tasks_are_refused(tmp_path):
    with pytest.raises(Exception, match=r"no 'tasks' column"):
        mdr.from_items([{"action": [[1.0]]}]).write_lerobot(
            str(tmp_path / "o"), fps=10
        ).launch_local()


def test_frame_rows_are_gathered_into_episodes(source, tmp_path):
    out = str(tmp_path / "out")
    # read_lerobot's frame rows, in blocks that cut episodes apart
    pipeline = mdr.read_lerobot(source, num_shards=2).with_max_block_rows(4)
    counters = pipeline.write_lerobot(out, fps=10).launch_local().summary.counters
    assert (counters["clips_remuxed"], counters["frames_written"]) == (6, sum(LENGTHS))
    before, after = rows_of(mdr.read_lerobot(source)), rows_of(mdr.read_lerobot(out))
    for old, new in zip(before, after, strict=True):
        for key in ("index", "episode_index", "frame_index", "task", "observation.state", "action"):
            assert new[key] == old[key], (key, old, new)
        [old_frame], [new_frame] = _frames(old[WRIST]), _frames(new[WRIST])
        assert np.array_equal(old_frame, new_frame)
    info = _json(out, "info")
    assert info["features"]["observation.state"]["dtype"] == "float32"


def test_frame_rows_whose_clips_skip_frames_are_refused(source, tmp_path):
    rows = mdr.read_lerobot(source, video_keys=[FRONT]).filter(lambda r: r.index != 2)
    with pytest.raises(
        Exception, match=r"frame 2's clip starts at 0.3s but the frame before ends at 0.2s"
    ):
        rows.write_lerobot(str(tmp_path / "o"), fps=10).launch_local()


def test_frame_blocks_that_cut_episodes_apart_make_whole_episodes(source):
    from refiner_core.sinks.lerobot.frame_rows import FrameGrouper

    frames = pa.Table.from_pylist(rows_of(mdr.read_lerobot(source)))
    grouper = FrameGrouper("test")
    episodes = [e for start in range(0, 18, 4) for e in grouper.add(frames.slice(start, 4))]
    episodes += list(grouper.close())
    assert [len(e.column("action")[0].values) for e in episodes] == LENGTHS
    assert [e.column("tasks")[0].as_py() for e in episodes] == [
        ["pick the cube"],
        ["place the cube"],
        ["pick the cube"],
    ]
    assert [e.column(FRONT)[0].as_py()["to_timestamp"] for e in episodes] == pytest.approx(
        [0.5, 1.2, 1.8]
    )


def test_an_fps_that_is_not_the_videos_is_refused(source, tmp_path):
    rows = mdr.read_lerobot(source, rows="episodes", video_keys=[FRONT])
    with pytest.raises(Exception, match=r"spans 0.5s but holds 5 frames, 0.166667s at fps=30"):
        rows.write_lerobot(str(tmp_path / "o"), fps=30).launch_local()


def test_finalizing_again_keeps_the_dataset(source, tmp_path):
    out = tmp_path / "out"
    sequence = episode_rows(source).write_lerobot(str(out), fps=10)
    result = sequence.launch_local()
    before = {
        p: p.read_bytes() for p in out.rglob("*") if p.is_file() and "_refiner" not in p.parts
    }
    again = sequence.stages[1].run(run_id=result.run_id)
    assert again.counters["clips_remuxed"] == 6
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and "_refiner" not in p.parts}
    assert after == before
    assert len(rows_of(mdr.read_lerobot(str(out)))) == sum(LENGTHS)


def test_writing_over_a_dataset_is_refused(source, tmp_path):
    out = str(tmp_path / "out")
    episode_rows(source).write_lerobot(out, fps=10).launch_local()
    with pytest.raises(FileExistsError, match=r"already holds a LeRobot dataset"):
        episode_rows(source).write_lerobot(out, fps=10).launch_local()


def test_the_summary_lists_every_file_and_counts_clips_as_engine_counters(source, tmp_path):
    from refiner_core.cli.counters import MEANINGS
    from refiner_core.manifests import COUNTER_KEYS

    out = tmp_path / "out"
    sequence = episode_rows(source).write_lerobot(str(out), fps=10)
    result = sequence.launch_local()
    on_disk = sorted(
        str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and "_refiner" not in p.parts
    )
    assert len(on_disk) == 7  # data, two videos, episodes, info, stats, tasks
    assert list(result.summary.files) == on_disk
    # a second finalization (nothing left to commit) lists the same files
    assert list(sequence.stages[1].run(run_id=result.run_id).files) == on_disk
    for key in ("frames_written", "clips_remuxed", "clips_transcoded"):
        assert key in COUNTER_KEYS and key in MEANINGS


def test_a_long_remuxed_clip_takes_its_image_statistics_from_keyframes(tmp_path):
    # 120 frames with a keyframe every 30: the frames cycle through 15 values, and every
    # keyframe (frames 0, 30, 60, 90) shows the first of them
    source = write_dataset(str(tmp_path / "src"), [120], cameras=(FRONT,), gop=30)
    out = str(tmp_path / "out")
    result = episode_rows(source).write_lerobot(out, fps=10).launch_local()
    assert result.summary.counters["clips_remuxed"] == 1
    front = _json(out, "stats")[FRONT]
    assert front["count"] == [120]
    keyframe = pixel(0, 0) / 255
    assert [front["min"][0][0][0], front["max"][0][0][0]] == pytest.approx(
        [keyframe] * 2, abs=2 / 255
    )
    assert max(pixel(i, 0) for i in range(15)) / 255 > keyframe + 0.5  # what decoding all shows


def test_a_written_dataset_is_finalized_from_its_options_without_a_pipeline(source, tmp_path):
    from refiner_core.integration import finalize_output

    out = str(tmp_path / "out")
    write = episode_rows(source).write_lerobot(out, fps=10, chunks_size=2).write_stage
    write.run_task(write.plan("0123456789ab"), run_id="0123456789ab")
    summary = finalize_output(
        "lerobot", out, "0123456789ab", sink_options={"fps": 10, "chunks_size": 2}
    )
    assert summary.format == "lerobot" and summary.counters["clips_remuxed"] == 6
    assert _json(out, "info")["chunks_size"] == 2
    assert len(rows_of(mdr.read_lerobot(out))) == sum(LENGTHS)
    with pytest.raises(ValueError, match=r"unknown output format 'lerobot'"):
        episode_rows(source).write("lerobot", str(tmp_path / "other"))


def test_episode_rows_carry_the_written_statistics_and_write_back(source, tmp_path):
    out = str(tmp_path / "out")
    episode_rows(source).write_lerobot(out, fps=10).launch_local()
    kept = pq.read_table(f"{out}/meta/episodes/chunk-000/file-000.parquet").to_pylist()
    episodes = rows_of(mdr.read_lerobot(out, rows="episodes"))
    names = sorted(k for k in kept[0] if k.startswith("stats/"))
    assert f"stats/{FRONT}/mean" in names and "stats/observation.state/std" in names
    for row, want in zip(episodes, kept, strict=True):
        assert {k: row[k] for k in names} == {k: want[k] for k in names}
    assert row["stats/observation.state/count"] == [LENGTHS[-1]]
    only_front = rows_of(mdr.read_lerobot(out, rows="episodes", video_keys=[FRONT]))
    assert not [k for k in only_front[0] if k.startswith(f"stats/{WRIST}/")]
    # episode rows with their statistics are write_lerobot's input again (stats recomputed)
    again = str(tmp_path / "again")
    episode_rows(out).write_lerobot(again, fps=10).launch_local()
    rewritten = pq.read_table(f"{again}/meta/episodes/chunk-000/file-000.parquet").to_pylist()
    for new, old in zip(rewritten, kept, strict=True):
        assert new["stats/observation.state/mean"] == pytest.approx(
            old["stats/observation.state/mean"]
        )
