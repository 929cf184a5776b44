"""What write_lerobot writes, loaded by LeRobot itself (lerobot==0.4.2 in its own venv)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import refiner_core as mdr
from tests.core.lerobot.layout import pixel, write_dataset
from tests.core.lerobot.reading import rows_of
from tests.core.lerobot.test_lerobot_client import lerobot_python  # noqa: F401 (a fixture)
from tests.core.lerobot.writing import episode_rows

SCRIPT = Path(__file__).with_name("lerobot_load_script.py")
FRONT, WRIST = "observation.images.front", "observation.images.wrist"


@pytest.mark.timeout(3600)
def test_lerobot_loads_what_write_lerobot_wrote(lerobot_python, tmp_path):  # noqa: F811
    source = write_dataset(str(tmp_path / "src"), [5, 7, 6], cameras=(FRONT, WRIST))
    big = write_dataset(str(tmp_path / "big"), [5, 7, 6], cameras=(FRONT,), size=(64, 48))
    [big_clip] = [r[FRONT] for r in rows_of(mdr.read_lerobot(big, rows="episodes"))][1:2]
    # episode 1's front camera comes from a bigger video, so it is re-encoded
    rows = episode_rows(source, num_shards=2).map(
        lambda r: {FRONT: big_clip} if r.episode_index == 1 else {}
    )
    out = str(tmp_path / "out")
    counters = rows.write_lerobot(out, fps=10).launch_local(num_workers=2).summary.counters
    assert (counters["clips_remuxed"], counters["clips_transcoded"]) == (5, 1)

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run(
        [lerobot_python, str(SCRIPT), out],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, f"{SCRIPT.name} failed:\n{done.stderr[-4000:]}"
    loaded = json.loads(done.stdout)
    frames = loaded["frames"]
    before = rows_of(mdr.read_lerobot(source))
    written = rows_of(mdr.read_lerobot(out))
    assert len(frames) == len(before) == len(written) == 18
    for want, got, ours in zip(before, frames, written, strict=True):
        for key in ("index", "episode_index", "frame_index", "task"):
            assert got[key] == want[key], (key, want, got)
        assert got["timestamp"] == pytest.approx(want["timestamp"], abs=1e-6)
        # float32 values, compared exactly
        assert got["observation.state"] == want["observation.state"]
        assert got["action"] == want["action"]
        i = want["index"]
        for camera, number in ((FRONT, 0), (WRIST, 1)):
            # LeRobot decodes the frame refiner decodes; both are near the recorded value
            # (re-encoding, and scaling episode 1's front frames, moves pixels a little)
            [(_, frame)] = list(mdr.read_frames(ours[camera]))
            assert got[camera] == pytest.approx(float(frame.mean()), abs=1.0), (camera, i)
            assert got[camera] == pytest.approx(pixel(i, number), abs=4), (camera, i)
    assert {"observation.state", "action", FRONT, WRIST} <= set(loaded["stats_keys"])


@pytest.mark.timeout(3600)
def test_lerobot_loads_the_image_statistics_write_lerobot_kept(lerobot_python, tmp_path):  # noqa: F811
    source = write_dataset(str(tmp_path / "src"), [5, 7, 6], cameras=(FRONT, WRIST))
    first = str(tmp_path / "first")
    episode_rows(source).write_lerobot(first, fps=10).launch_local()
    # the first dataset's episode rows carry its statistics: copied clips keep them
    out = str(tmp_path / "out")
    counters = episode_rows(first).write_lerobot(out, fps=10).launch_local().summary.counters
    assert (counters["clip_stats_reused"], counters["frames_decoded"]) == (6, 0)

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run(
        [lerobot_python, str(SCRIPT), out],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, f"{SCRIPT.name} failed:\n{done.stderr[-4000:]}"
    loaded = json.loads(done.stdout)["camera_stats"]
    with open(f"{first}/meta/stats.json") as f:
        kept = json.load(f)
    for camera in (FRONT, WRIST):
        assert set(loaded[camera]) == set(kept[camera])
        for name, value in kept[camera].items():
            np.testing.assert_allclose(loaded[camera][name], value, err_msg=f"{camera} {name}")
