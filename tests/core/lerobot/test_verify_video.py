"""verify_video and ``refiner verify`` on LeRobot datasets with real H.264 video, each fault
made by editing the real files: the MP4s, the episodes table, the file tree."""

from __future__ import annotations

import json
import os
import shutil

import av
import pyarrow.parquet as pq
import pytest
import s3fs
from click.testing import CliRunner

import refiner_core as mdr
from refiner_core.cli import main
from refiner_core.video.container import READ_BLOCK_BYTES
from tests.core.lerobot.layout import write_dataset, write_dataset_v21
from tests.s3_fixtures import *  # noqa: F403

FRONT, WRIST = "observation.images.front", "observation.images.wrist"
LENGTHS = [10, 6, 8]  # episodes 0..2 lie at [0, 1), [1, 1.6) and [1.6, 2.4) seconds


@pytest.fixture
def dataset(tmp_path) -> str:
    return write_dataset(str(tmp_path / "ds"), LENGTHS, cameras=(FRONT, WRIST))


def video_of(root: str, camera: str) -> str:
    return f"{root}/videos/{camera}/chunk-000/file-000.mp4"


def remux(path: str, *, keep=lambda seconds: True, faststart: bool = False) -> None:
    """Rewrite the MP4 at ``path`` packet by packet, keeping the packets ``keep`` accepts."""
    temporary = f"{path}.remux.mp4"
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(path) as source, av.open(temporary, "w", options=options) as target:
        stream = source.streams.video[0]
        out = target.add_stream_from_template(stream, opaque=True)
        for packet in source.demux(stream):
            if packet.size and keep(float(packet.pts * stream.time_base)):
                packet.stream = out
                target.mux(packet)
    os.replace(temporary, path)


def edit_episodes(root: str, column: str, episode: int, change) -> None:
    path = f"{root}/meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[episode] = change(values[episode])
    index = table.column_names.index(column)
    table = table.set_column(index, table.field(column), [values])
    pq.write_table(table, path)


def failures(audit: mdr.video.VideoAudit) -> set[tuple[str, str, tuple[int, ...]]]:
    return {(f.check, f.camera, f.episodes) for f in audit.failures}


def test_a_clean_dataset_passes_with_one_demux_per_file(dataset):
    audit = mdr.verify_video(dataset)
    assert audit.ok and audit.failures == []
    assert (audit.files, audit.clips, audit.packets) == (2, 6, 2 * sum(LENGTHS))
    # one keyframe per episode: only the last episode's frames are decoded, per file
    assert audit.frames_decoded == 2 * LENGTHS[-1]


def test_a_clean_v21_dataset_passes(tmp_path):
    root = write_dataset_v21(str(tmp_path / "v21"), LENGTHS, cameras=(FRONT, WRIST))
    audit = mdr.verify_video(root)
    assert audit.ok, [str(f) for f in audit.failures]
    assert (audit.files, audit.clips, audit.packets) == (6, 6, 2 * sum(LENGTHS))


def test_bytes_cut_off_the_end_are_a_truncation(dataset):
    path = video_of(dataset, FRONT)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 200)
    audit = mdr.verify_video(dataset)
    assert not audit.ok
    assert failures(audit) == {("truncated", FRONT, (0, 1, 2))}
    assert audit.failures[0].file == path


def test_a_cut_file_with_its_index_in_front_is_a_truncation_and_loses_the_last_episodes(dataset):
    path = video_of(dataset, FRONT)
    remux(path, faststart=True)
    assert mdr.verify_video(dataset).ok
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 150)
    audit = mdr.verify_video(dataset)
    found = failures(audit)
    assert ("truncated", FRONT, (0, 1, 2)) in found
    assert ("frame_count", FRONT, (2,)) in found
    assert {camera for _, camera, _ in found} == {FRONT}
    details = [f.detail for f in audit.failures if f.check == "truncated"]
    assert any("box at byte" in d and "bytes short" in d for d in details), details
    assert any("index lists 24" in d for d in details), details


def test_a_few_bytes_cut_off_the_last_packet_are_a_truncation(dataset):
    path = video_of(dataset, FRONT)
    remux(path, faststart=True)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 3)
    audit = mdr.verify_video(dataset)
    assert ("truncated", FRONT, (0, 1, 2)) in failures(audit)


def test_dropped_packets_are_a_gap_and_a_frame_count_mismatch(dataset):
    # episode 1 loses its frames at 1.2 s and 1.3 s; the file still demuxes and decodes
    remux(video_of(dataset, WRIST), keep=lambda t: not 1.15 < t < 1.35)
    audit = mdr.verify_video(dataset)
    assert failures(audit) == {("gap", WRIST, (1,)), ("frame_count", WRIST, (1,))}
    by_check = {f.check: f for f in audit.failures}
    assert "4 frames in [1s, 1.6s) but length=6" in by_check["frame_count"].detail
    assert "between 1.1000s and 1.4000s (2 frame(s) missing)" in by_check["gap"].detail


def test_dropping_an_episodes_first_frame_moves_its_first_timestamp(dataset):
    remux(video_of(dataset, FRONT), keep=lambda t: not 1.55 < t < 1.65)
    audit = mdr.verify_video(dataset)
    assert failures(audit) == {("first_timestamp", FRONT, (2,)), ("frame_count", FRONT, (2,))}


def test_a_shifted_from_timestamp_in_the_episodes_table_is_found(dataset):
    edit_episodes(dataset, f"videos/{FRONT}/from_timestamp", 2, lambda t: t + 0.5)
    audit = mdr.verify_video(dataset)
    assert failures(audit) == {("table_span", FRONT, (2,)), ("frame_count", FRONT, (2,))}
    count = next(f for f in audit.failures if f.check == "frame_count")
    assert "3 frames in [2.1s, 2.4s) but length=8" in count.detail


def test_dropping_an_episodes_last_frame_moves_its_last_timestamp(dataset):
    remux(video_of(dataset, FRONT), keep=lambda t: not 1.45 < t < 1.55)
    audit = mdr.verify_video(dataset)
    assert failures(audit) == {("last_timestamp", FRONT, (1,)), ("frame_count", FRONT, (1,))}


def test_an_episode_range_moved_onto_its_neighbour_is_an_overlap(dataset):
    # moved by whole frames, its range still holds 6 frames: only its neighbour tells
    for column in ("from_timestamp", "to_timestamp"):
        edit_episodes(dataset, f"videos/{WRIST}/{column}", 1, lambda t: t + 0.3)
    audit = mdr.verify_video(dataset)
    assert failures(audit) == {("overlap", WRIST, (1, 2))}
    assert "[1.3s, 1.9s) and episode 2 [1.6s, 2.4s)" in audit.failures[0].detail


def test_a_missing_video_file_names_every_episode_it_held(dataset):
    os.remove(video_of(dataset, WRIST))
    audit = mdr.verify_video(dataset)
    assert failures(audit) == {("missing", WRIST, (0, 1, 2))}
    assert audit.files == 2 and audit.packets == sum(LENGTHS)


def test_a_length_that_disagrees_with_the_video_is_a_frame_count_mismatch(dataset):
    edit_episodes(dataset, "length", 1, lambda n: n + 1)
    audit = mdr.verify_video(dataset)
    assert failures(audit) == {
        (check, camera, (1,))
        for check in ("frame_count", "table_span")
        for camera in (FRONT, WRIST)
    }
    count = next(f for f in audit.failures if f.check == "frame_count")
    assert "6 frames in [1s, 1.6s) but length=7" in count.detail


def test_episodes_and_video_keys_narrow_the_check(dataset):
    os.remove(video_of(dataset, WRIST))
    audit = mdr.verify_video(dataset, episodes=[2], video_keys=[FRONT], max_workers=1)
    assert audit.ok and (audit.files, audit.clips) == (1, 1)


def test_bad_arguments_name_the_value_and_the_fix(dataset):
    with pytest.raises(ValueError, match=r"episodes \[7\] are not in the dataset.*0\.\.2"):
        mdr.verify_video(dataset, episodes=[0, 7])
    with pytest.raises(ValueError, match="video_keys \\['nope'\\] are not video features"):
        mdr.verify_video(dataset, video_keys=["nope"])
    with pytest.raises(ValueError, match="max_workers=0 must be at least 1"):
        mdr.verify_video(dataset, max_workers=0)


def test_a_file_that_is_not_a_video_is_unreadable(dataset):
    with open(video_of(dataset, FRONT), "wb") as f:
        f.write(b"not a video at all" * 100)
    assert failures(mdr.verify_video(dataset)) == {("unreadable", FRONT, (0, 1, 2))}


def test_the_cli_exits_1_naming_episode_and_camera(dataset):
    runner = CliRunner()
    clean = runner.invoke(main, ["verify", dataset])
    assert clean.exit_code == 0, clean.output
    assert "OK: 6 episode videos in 2 files" in clean.output
    edit_episodes(dataset, f"videos/{FRONT}/from_timestamp", 2, lambda t: t + 0.5)
    failed = runner.invoke(main, ["verify", dataset])
    assert failed.exit_code == 1
    assert f"episode 2, camera {FRONT}, {video_of(dataset, FRONT)}: frame_count" in failed.output
    assert "FAILED: 2 problem(s)" in failed.output


def test_the_cli_names_a_dataset_version_it_cannot_check(dataset):
    path = f"{dataset}/meta/info.json"
    with open(path) as f:
        info = json.load(f)
    info["codebase_version"] = "v2.0"
    with open(path, "w") as f:
        json.dump(info, f)
    result = CliRunner().invoke(main, ["verify", dataset])
    assert result.exit_code == 1
    assert "codebase_version='v2.0'" in result.output
    assert "Traceback" not in result.output


def test_a_dataset_on_s3_is_read_in_ranges(tmp_path, s3_bucket, s3_proxy):
    local = write_dataset(
        str(tmp_path / "ds"), [10, 10, 10], cameras=(FRONT,), size=(320, 240), noise=True
    )
    options = s3_proxy.storage_options()
    fs = s3fs.S3FileSystem(**options)
    fs.put(local, f"{s3_bucket}/ds", recursive=True)
    root = f"s3://{s3_bucket}/ds"
    s3_proxy.clear()
    audit = mdr.verify_video(root, storage_options=options)
    assert audit.ok and audit.packets == 30
    video = video_of(f"{s3_bucket}/ds", FRONT)
    gets = [r for r in s3_proxy.records("GetObject") if r.path.lstrip("/") == video]
    assert len(gets) > 1 and all(r.response_bytes <= 2 * READ_BLOCK_BYTES for r in gets)
    shutil.rmtree(local)
    fs.rm(f"{s3_bucket}/ds/videos", recursive=True)
    assert failures(mdr.verify_video(root, storage_options=options)) == {
        ("missing", FRONT, (0, 1, 2))
    }
