"""write_lerobot keeps the image statistics episode rows carry when their clips are copied
unchanged, and computes them when clips are re-encoded, incomplete or asked for."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.core.lerobot.layout import write_dataset
from tests.core.lerobot.writing import episode_rows

FRONT, WRIST = "observation.images.front", "observation.images.wrist"
LENGTHS = [5, 7, 6]
# a valid statistic no sample of the test's solid frames would give
MARKED_MEAN = [[[0.125]], [[0.25]], [[0.375]]]
CUBE = pa.list_(pa.list_(pa.list_(pa.float64())))  # an image statistic's type


def _episodes(root: str) -> list[dict]:
    return pq.read_table(f"{root}/meta/episodes/chunk-000/file-000.parquet").to_pylist()


def _stats(root: str) -> dict:
    with open(f"{root}/meta/stats.json") as f:
        return json.load(f)


def _camera_stats(episode: dict, camera: str) -> dict:
    prefix = f"stats/{camera}/"
    return {k[len(prefix) :]: v for k, v in episode.items() if k.startswith(prefix)}


@pytest.fixture
def written(tmp_path) -> str:
    """A dataset write_lerobot wrote (so its episode rows carry complete statistics)."""
    source = write_dataset(str(tmp_path / "src"), LENGTHS, cameras=(FRONT, WRIST))
    out = str(tmp_path / "written")
    counters = episode_rows(source).write_lerobot(out, fps=10).launch_local().summary.counters
    assert counters["clip_stats_reused"] == 0 and counters["frames_decoded"] == sum(LENGTHS) * 2
    return out


def _mark_front(row) -> dict:
    return {f"stats/{FRONT}/mean": MARKED_MEAN}


def test_copied_clips_keep_the_statistics_their_rows_carry_without_decoding(written, tmp_path):
    out = str(tmp_path / "out")
    counters = episode_rows(written).write_lerobot(out, fps=10).launch_local().summary.counters
    assert (counters["clips_remuxed"], counters["clip_stats_reused"]) == (6, 6)
    assert counters["frames_decoded"] == 0
    for new, old in zip(_episodes(out), _episodes(written), strict=True):
        for camera in (FRONT, WRIST):
            assert _camera_stats(new, camera) == _camera_stats(old, camera)
    for name, value in _stats(written)[FRONT].items():
        np.testing.assert_allclose(_stats(out)[FRONT][name], value, err_msg=name)
    # what is kept is the row's value, not one computed again
    marked = str(tmp_path / "marked")
    episode_rows(written).map(_mark_front).write_lerobot(marked, fps=10).launch_local()
    assert [e[f"stats/{FRONT}/mean"] for e in _episodes(marked)] == [MARKED_MEAN] * 3
    np.testing.assert_allclose(_stats(marked)[FRONT]["mean"], MARKED_MEAN)


def test_recompute_stats_decodes_a_sample_instead(written, tmp_path):
    out = str(tmp_path / "out")
    rows = episode_rows(written).map(_mark_front)
    sequence = rows.write_lerobot(out, fps=10, recompute_stats=True)
    counters = sequence.launch_local().summary.counters
    assert counters["clip_stats_reused"] == 0 and counters["frames_decoded"] == sum(LENGTHS) * 2
    for new, old in zip(_episodes(out), _episodes(written), strict=True):
        assert new[f"stats/{FRONT}/mean"] == old[f"stats/{FRONT}/mean"] != MARKED_MEAN
    with pytest.raises(ValueError, match=r"recompute_stats='yes'; pass True or False"):
        rows.write_lerobot(str(tmp_path / "bad"), fps=10, recompute_stats="yes")


def test_a_re_encoded_clip_gets_statistics_of_its_new_frames(written, tmp_path):
    def one_frame_later(row):
        clip = dict(row[FRONT])
        clip["from_timestamp"] += 0.1
        clip["to_timestamp"] += 0.1
        return {FRONT: clip, **_mark_front(row)} if row.episode_index == 1 else _mark_front(row)

    out = str(tmp_path / "out")
    rows = episode_rows(written, video_keys=[FRONT]).map(one_frame_later)
    counters = rows.write_lerobot(out, fps=10).launch_local().summary.counters
    assert (counters["clips_remuxed"], counters["clips_transcoded"]) == (2, 1)
    assert counters["clip_stats_reused"] == 2 and counters["frames_decoded"] == LENGTHS[1]
    means = [e[f"stats/{FRONT}/mean"] for e in _episodes(out)]
    assert means[0] == means[2] == MARKED_MEAN and means[1] != MARKED_MEAN


def test_incomplete_statistics_are_computed_again(written, tmp_path):
    def without_front_median(row):
        return {f"stats/{FRONT}/q50": None, **_mark_front(row)}

    out = str(tmp_path / "out")
    rows = episode_rows(written).map(without_front_median, dtypes={f"stats/{FRONT}/q50": CUBE})
    counters = rows.write_lerobot(out, fps=10).launch_local().summary.counters
    # the wrist camera's statistics are whole and kept; the front camera's are decoded again
    assert counters["clip_stats_reused"] == 3 and counters["frames_decoded"] == sum(LENGTHS)
    for new, old in zip(_episodes(out), _episodes(written), strict=True):
        assert _camera_stats(new, FRONT) == _camera_stats(old, FRONT)
        assert _camera_stats(new, WRIST) == _camera_stats(old, WRIST)


def test_a_count_that_is_not_one_positive_number_is_refused(written, tmp_path):
    rows = episode_rows(written).map(lambda row: {f"stats/{FRONT}/count": [0]})
    with pytest.raises(Exception, match=r"episode row 0: statistic .*count' is \[0\]; it must"):
        rows.write_lerobot(str(tmp_path / "out"), fps=10).launch_local()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("mean", [[[0.5]], [[0.5]]], r"has shape \(2, 1, 1\), not \(3, 1, 1\)"),
        ("max", [[[1.0]], [[1.0]], [[float("nan")]]], r"has shape ragged or non-numeric"),
        ("q10", [[[0.5, 0.5]], [[0.5]], [[0.5]]], r"has shape ragged or non-numeric"),
    ],
)
def test_malformed_statistics_are_refused_naming_the_episode_and_key(
    written, tmp_path, key, value, message
):
    def broken(row):
        return {f"stats/{WRIST}/{key}": value} if row.episode_index == 2 else {}

    out = str(tmp_path / "out")
    rows = episode_rows(written).map(broken, dtypes={f"stats/{WRIST}/{key}": CUBE})
    with pytest.raises(Exception) as failure:
        rows.write_lerobot(out, fps=10).launch_local()
    text = str(failure.value)
    assert "episode row 2" in text and f"'stats/{WRIST}/{key}'" in text, text
    assert failure.match(message) and failure.match("recompute_stats=True")
    assert not os.path.exists(f"{out}/meta/info.json")
    # asking for statistics to be computed again does not look at the carried ones
    rows.write_lerobot(out, fps=10, recompute_stats=True).launch_local()
    assert os.path.exists(f"{out}/meta/info.json")
