"""read_lerobot against a dataset recorded by LeRobot itself (lerobot==0.4.2 in its own venv).

The venv comes from scripts/lerobot_env.sh (a no-op once cached, several GB and minutes the
first time); when it cannot be built the test fails with the script's error.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import av
import pytest

import refiner_core as mdr
from tests.core.lerobot.reading import rows_of

REPO = Path(__file__).resolve().parents[3]
SCRIPT = Path(__file__).with_name("lerobot_client_script.py")
CAMERA = "observation.images.cam"


@pytest.fixture(scope="session")
def lerobot_python() -> str:
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "lerobot_env.sh")],
        capture_output=True,
        text=True,
        timeout=3000,
    )
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if not line.startswith("WARNING:")]
        pytest.fail(
            f"scripts/lerobot_env.sh exited {done.returncode}:\n" + "\n".join(errors[-40:]),
            pytrace=False,
        )
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def recorded(lerobot_python, tmp_path_factory) -> tuple[str, list[dict]]:
    """A dataset LeRobot recorded and finalized, and its frames as LeRobot reads them."""
    work = tmp_path_factory.mktemp("lerobot")
    root = str(work / "ds")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(work / "hf")}
    done = subprocess.run(
        [lerobot_python, str(SCRIPT), root],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=work,
    )
    assert done.returncode == 0, f"{SCRIPT.name} failed:\n{done.stderr[-4000:]}"
    return root, json.loads(done.stdout)


@pytest.mark.timeout(3600)
def test_frames_match_what_lerobot_reads(recorded):
    root, expected = recorded
    rows = rows_of(mdr.read_lerobot(root))
    assert len(rows) == len(expected) == 18
    for row, want in zip(rows, expected, strict=True):
        for key in ("index", "episode_index", "frame_index", "task"):
            assert row[key] == want[key], (key, row, want)
        assert row["timestamp"] == pytest.approx(want["timestamp"])
        assert row["observation.state"] == pytest.approx(want["observation.state"])
        assert row["action"] == pytest.approx(want["action"])
        [(_, frame)] = list(mdr.read_frames(row[CAMERA]))
        assert float(frame.mean()) == pytest.approx(want["pixel"], abs=1.0), row["index"]


@pytest.mark.timeout(3600)
def test_episode_clips_remux_to_lerobots_frames(recorded):
    root, expected = recorded
    episodes = rows_of(mdr.read_lerobot(root, rows="episodes"))
    assert [(e["episode_index"], e["length"], e["tasks"]) for e in episodes] == [
        (0, 5, ["pick"]),
        (1, 7, ["place"]),
        (2, 6, ["pick"]),
    ]
    # the statistics LeRobot computed per episode come with the episode rows
    actions = [f["action"] for f in expected if f["episode_index"] == 1]
    assert episodes[1]["stats/action/count"] == [7]
    assert episodes[1]["stats/action/mean"] == pytest.approx(
        [sum(column) / len(actions) for column in zip(*actions, strict=True)], rel=1e-4
    )
    assert episodes[1]["stats/action/max"] == pytest.approx(
        [max(column) for column in zip(*actions, strict=True)], rel=1e-4
    )
    second = episodes[1][CAMERA]
    data = mdr.read_clip(second)
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        decoded = [
            (float(f.pts * stream.time_base), f.to_ndarray(format="rgb24"))
            for f in container.decode(stream)
        ]
    want = [f for f in expected if f["episode_index"] == 1]
    assert [t for t, _ in decoded] == pytest.approx([f["timestamp"] for f in want], abs=1e-3)
    assert [float(a.mean()) for _, a in decoded] == pytest.approx(
        [f["pixel"] for f in want], abs=1.0
    )


@pytest.mark.timeout(3600)
def test_verify_video_passes_on_lerobots_dataset(recorded):
    root, expected = recorded
    audit = mdr.verify_video(root)
    assert audit.ok, [str(f) for f in audit.failures]
    assert (audit.clips, audit.packets) == (3, len(expected))
