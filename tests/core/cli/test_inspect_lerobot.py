"""``refiner inspect`` and ``refiner preview`` on LeRobot datasets: one laid out by hand (no
refiner records) and one ``write_lerobot`` wrote (with its summary and counters)."""

from __future__ import annotations

import base64
import io
import json
import re

import av
import pytest
import s3fs
from click.testing import CliRunner

from refiner_core.cli import main
from refiner_core.manifests import COUNTER_KEYS
from tests.core.lerobot.layout import pixel, write_dataset
from tests.core.lerobot.writing import episode_rows
from tests.s3_fixtures import *  # noqa: F403

FRONT, WRIST = "observation.images.front", "observation.images.wrist"
CAMERAS = (FRONT, WRIST)
LENGTHS = [10, 12, 8]
IMAGE = re.compile(
    r'<img src="data:image/png;base64,(?P<png>[^"]+)" alt="[^"]*" '
    r'data-episode="(?P<episode>\d+)" data-camera="(?P<camera>[^"]+)">'
)


@pytest.fixture
def by_hand(tmp_path) -> str:
    return write_dataset(str(tmp_path / "src"), LENGTHS, cameras=CAMERAS)


@pytest.fixture
def written(by_hand, tmp_path) -> str:
    out = str(tmp_path / "out")
    episode_rows(by_hand).write_lerobot(out, fps=10).launch_local()
    return out


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _rows(output: str) -> list[list[str]]:
    """The cells of every table row printed."""
    return [
        [cell.strip() for cell in line.strip("│┃ ").split("│")]
        for line in output.splitlines()
        if line.startswith("│")
    ]


def _assert_episodes_and_cameras(output: str) -> None:
    rows = _rows(output)
    assert ["episodes", "3"] in rows and ["frames", "30 (3.0 s)"] in rows
    assert ["cameras", f"{FRONT}, {WRIST}"] in rows
    for camera in CAMERAS:
        assert [camera, "h264", "32x24", "yuv420p", "1", "3.0"] in rows
    starts = [0, 1.0, 2.2, 3.0]
    for episode, length in enumerate(LENGTHS):
        clip = f"file-000.mp4 [{starts[episode]:g}, {starts[episode + 1]:g})"
        row = [r for r in rows if r[:2] == [str(episode), str(length)]]
        assert len(row) == 1 and row[0][2] == f"{length / 10:.2f}" and row[0][4:] == [clip, clip]


def test_inspect_lists_episodes_cameras_and_lengths_of_a_dataset_refiner_did_not_write(by_hand):
    output = _run("inspect", by_hand)
    _assert_episodes_and_cameras(output)
    assert ["refiner", "not written by refiner (no _refiner/ records)"] in _rows(output)


def test_inspect_of_a_written_dataset_shows_the_video_counters_and_its_files(written):
    output = _run("inspect", written)
    _assert_episodes_and_cameras(output)
    rows = _rows(output)
    assert ["refiner", "written by refiner, finalized"] in rows
    counters = {r[0]: r[1:] for r in rows if len(r) == 3}
    assert counters["clips_remuxed"][0] == "6" and "copied" in counters["clips_remuxed"][1]
    assert counters["clips_transcoded"][0] == "0"
    assert counters["frames_written"][0] == "30"
    assert {"frames_written", "clips_remuxed", "clips_transcoded"} <= set(COUNTER_KEYS)
    with open(f"{written}/_refiner/summary.json") as f:
        summary = json.load(f)
    assert summary["files"] == [
        "data/chunk-000/file-000.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "meta/info.json",
        "meta/stats.json",
        "meta/tasks.parquet",
        f"videos/{FRONT}/chunk-000/file-000.mp4",
        f"videos/{WRIST}/chunk-000/file-000.mp4",
    ]
    assert f"{written}/data/chunk-000/file-000.parquet" in output


@pytest.mark.parametrize("which", ["by_hand", "written"])
def test_preview_shows_the_first_frame_of_every_episode_and_camera(which, request, tmp_path):
    root = request.getfixturevalue(which)
    page = tmp_path / "preview.html"
    assert "(6 images)" in " ".join(_run("preview", root, "--html", str(page)).split())
    text = page.read_text()
    images = [m.groupdict() for m in IMAGE.finditer(text)]
    assert sorted((int(i["episode"]), i["camera"]) for i in images) == [
        (e, c) for e in range(3) for c in CAMERAS
    ]
    first_frames = [0, 10, 22]
    for image in images:
        data = base64.b64decode(image["png"])
        with av.open(io.BytesIO(data), format="png_pipe") as container:
            [frame] = list(container.decode(video=0))
        value = frame.to_ndarray(format="rgb24")[0, 0, 0]
        want = pixel(first_frames[int(image["episode"])], CAMERAS.index(image["camera"]))
        assert abs(int(value) - want) <= 3, image["episode"]
    assert 'data-images-embedded="6"' in text
    assert ("clips_remuxed" in text) == (which == "written")


def test_inspect_and_preview_read_a_dataset_on_s3(by_hand, tmp_path, s3_bucket, s3_proxy):
    s3fs.S3FileSystem(**s3_proxy.storage_options()).put(by_hand, f"{s3_bucket}/ds", recursive=True)
    url, location = f"s3://{s3_bucket}/ds", ["--endpoint-url", s3_proxy.endpoint_url]
    _assert_episodes_and_cameras(_run("inspect", url, *location))
    page = tmp_path / "preview.html"
    _run("preview", url, "--html", str(page), *location)
    assert len(IMAGE.findall(page.read_text())) == 6
    assert any(r.path.endswith(".mp4") for r in s3_proxy.records("GetObject"))
