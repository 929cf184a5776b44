"""LeRobot datasets as Dagster assets (``refiner/format: lerobot``) on a real instance.

Episodes with real H.264 video (``refiner_dagster.demo.robotics``) are written through the
IO manager + finalization asset and through ``build_dataset_asset``'s fan-out steps; what
was published is read back with ``mdr.read_lerobot`` and audited with ``mdr.verify_video``.
An episode whose camera clock drifts fails the blocking ``video_integrity`` check, and the
dataset's published version stays the one it was.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import s3fs

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.demo.robotics import CAMERA, FPS, ensure_robot_episodes, frame_value
from refiner_dagster.lerobot_format import VIDEO_INTEGRITY_CHECK
from tests.core.lerobot.test_lerobot_client import lerobot_python  # noqa: F401 (a fixture)
from tests.dagster.test_component import _package as component_package
from tests.dagster.test_demo_cli import DemoHome, demo_home  # noqa: F401

CLIPS = {CAMERA: mdr.datatype.video_clip()}
LEROBOT = {
    "refiner/format": "lerobot",
    "refiner/lerobot_fps": FPS,
    "refiner/lerobot_robot_type": "demo_arm",
}
EPISODES, SECONDS = 4, 1.0
LOAD_SCRIPT = Path(__file__).parents[1] / "core" / "lerobot" / "lerobot_load_script.py"
FRAMES = round(SECONDS * FPS)


def episodes_pipeline(folder: Path, *, drifting: int | None = None) -> mdr.Pipeline:
    rows = ensure_robot_episodes(folder, episodes=EPISODES, seconds=SECONDS, drifting=drifting)
    return mdr.from_items(rows, dtypes=CLIPS, items_per_shard=2)


def published_root(base: Path, asset: str) -> tuple[str, str]:
    """(version name, folder) of ``asset``'s published version under ``base``."""
    version = rd.DatasetStorage(str(base)).current([asset], None)
    assert version is not None, f"{asset} has no published version"
    return version.name, version.url


def assert_episodes_read_back(root: str) -> None:
    frames = mdr.read_lerobot(root).materialize()
    assert len(frames) == EPISODES * FRAMES
    assert [r["episode_index"] for r in frames] == [
        e for e in range(EPISODES) for _ in range(FRAMES)
    ]
    assert [r["index"] for r in frames] == list(range(EPISODES * FRAMES))
    # episode e's state is [e, k / fps] in the source rows, frame by frame
    states = [list(r["observation.state"]) for r in frames[FRAMES : FRAMES + 2]]
    assert states[0] == [1.0, 0.0] and states[1] == [1.0, pytest.approx(0.1)]
    episodes = mdr.read_lerobot(root, rows="episodes").materialize()
    assert [e["length"] for e in episodes] == [FRAMES] * EPISODES
    # the clip of episode 2 decodes to episode 2's frames
    _, image = next(iter(mdr.read_frames(episodes[2][CAMERA])))
    assert abs(int(image[0, 0, 0]) - frame_value(2, 0)) <= 3
    audit = mdr.verify_video(root)
    assert audit.ok, [str(f) for f in audit.failures]
    assert audit.clips == EPISODES


def check_results(result: dg.ExecuteJobResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_the_io_manager_writes_an_audited_lerobot_dataset(dagster_instance, tmp_path):
    @dg.asset(io_manager_key="refiner", metadata=LEROBOT)
    def robot() -> mdr.Pipeline:
        return episodes_pipeline(tmp_path / "videos")

    finalized = rd.build_finalization_asset(robot)
    assert VIDEO_INTEGRITY_CHECK in {s.name for s in finalized.check_specs}
    resources = {"refiner": rd.RefinerBlobIOManager(base_url=str(tmp_path / "out"))}
    result = dg.materialize([robot, finalized], instance=dagster_instance, resources=resources)
    assert result.success
    checks = check_results(result)
    assert checks[VIDEO_INTEGRITY_CHECK].passed
    assert checks[VIDEO_INTEGRITY_CHECK].metadata["clips_checked"].value == EPISODES
    (published,) = result.asset_materializations_for_node("robot_finalized")
    assert published.metadata["frames_written"].value == EPISODES * FRAMES
    assert published.metadata["clips_remuxed"].value == EPISODES
    _, root = published_root(tmp_path / "out", "robot")
    assert_episodes_read_back(root)
    info = (Path(root) / "meta" / "info.json").read_text()
    assert '"robot_type": "demo_arm"' in info

    # a downstream asset receives the published frames as a lazy pipeline
    seen: dict[str, Any] = {}

    @dg.asset(ins={"robot": dg.AssetIn(key=finalized.key)})
    def consumer(robot: mdr.Pipeline) -> None:
        seen["rows"] = robot.materialize()

    @dg.asset(ins={"robot": dg.AssetIn(key=finalized.key, metadata={"columns": ["index", CAMERA]})})
    def picker(robot: mdr.Pipeline) -> None:
        seen["picked"] = robot.materialize()

    assert dg.materialize(
        [robot, finalized, consumer, picker],
        instance=dagster_instance,
        resources=resources,
        selection=[consumer, picker],
    ).success
    assert len(seen["rows"]) == EPISODES * FRAMES
    assert sorted(seen["picked"][0].keys()) == sorted(["index", CAMERA])
    assert seen["picked"][-1][CAMERA]["to_timestamp"] == pytest.approx(2 * SECONDS)


def test_fan_out_steps_write_one_lerobot_dataset(dagster_instance, tmp_path):
    def robot(context) -> mdr.Pipeline:
        return episodes_pipeline(tmp_path / "videos")

    asset = rd.build_dataset_asset(robot, metadata=LEROBOT, max_tasks=2)
    resources = {"refiner": rd.RefinerBlobIOManager(base_url=str(tmp_path / "out"))}
    result = dg.materialize([asset], instance=dagster_instance, resources=resources)
    assert result.success
    writes = {
        e.step_key
        for e in result.all_events
        if e.event_type_value == "STEP_SUCCESS" and "robot_write" in e.step_key
    }
    assert len(writes) == 2
    assert check_results(result)[VIDEO_INTEGRITY_CHECK].passed
    _, root = published_root(tmp_path / "out", "robot")
    assert_episodes_read_back(root)
    # the two write steps' episodes landed in two video files, numbered as one dataset
    videos = sorted(p.name for p in (Path(root) / "videos" / CAMERA / "chunk-000").iterdir())
    assert videos == ["file-000.mp4", "file-001.mp4"]


def test_fan_out_steps_write_a_lerobot_dataset_on_s3(
    dagster_instance, tmp_path, s3_bucket, s3_storage_options
):
    def robot(context) -> mdr.Pipeline:
        return episodes_pipeline(tmp_path / "videos")  # the source videos stay on local disk

    asset = rd.build_dataset_asset(robot, metadata=LEROBOT, max_tasks=2)
    base = f"s3://{s3_bucket}/datasets"
    manager = rd.RefinerBlobIOManager(base_url=base, storage_options=s3_storage_options)
    result = dg.materialize([asset], instance=dagster_instance, resources={"refiner": manager})
    assert result.success
    assert check_results(result)[VIDEO_INTEGRITY_CHECK].passed
    version = rd.DatasetStorage(base, s3_storage_options).current(["robot"], None)
    assert version is not None
    fs = s3fs.S3FileSystem(**s3_storage_options)
    prefix = f"{s3_bucket}/datasets/robot/{version.name}/"
    keys = sorted(k[len(prefix) :] for k in fs.find(prefix))
    assert [k for k in keys if not k.startswith("_refiner/")] == [
        "data/chunk-000/file-000.parquet",
        "data/chunk-000/file-001.parquet",
        "meta/episodes/chunk-000/file-000.parquet",
        "meta/info.json",
        "meta/stats.json",
        "meta/tasks.parquet",
        f"videos/{CAMERA}/chunk-000/file-000.mp4",
        f"videos/{CAMERA}/chunk-000/file-001.mp4",
    ]
    frames = mdr.read_lerobot(version.url, storage_options=s3_storage_options).materialize()
    assert [r["index"] for r in frames] == list(range(EPISODES * FRAMES))
    assert mdr.verify_video(version.url, storage_options=s3_storage_options).ok


@pytest.mark.parametrize("path", ["io_manager", "fan_out"])
def test_a_drifting_episode_is_never_published(dagster_instance, tmp_path, path):
    drifting: dict[str, int | None] = {"episode": None}
    folder = tmp_path / "videos"

    def pipeline() -> mdr.Pipeline:
        return episodes_pipeline(folder, drifting=drifting["episode"])

    if path == "io_manager":

        @dg.asset(io_manager_key="refiner", metadata=LEROBOT)
        def robot() -> mdr.Pipeline:
            return pipeline()

        assets = [robot, rd.build_finalization_asset(robot)]
    else:
        assets = [
            rd.build_dataset_asset(lambda context: pipeline(), name="robot", metadata=LEROBOT)
        ]
    resources = {"refiner": rd.RefinerBlobIOManager(base_url=str(tmp_path / "out"))}
    assert dg.materialize(assets, instance=dagster_instance, resources=resources).success
    good, _ = published_root(tmp_path / "out", "robot")

    drifting["episode"] = EPISODES - 1  # the last episode's camera clock runs slow
    result = dg.materialize(
        assets, instance=dagster_instance, resources=resources, raise_on_error=False
    )
    assert not result.success
    check = check_results(result)[VIDEO_INTEGRITY_CHECK]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["failed_episodes"].value == [EPISODES - 1]
    assert f"episode {EPISODES - 1}, camera {CAMERA}" in str(check.description)
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.step_failure_data.error.message
    assert VIDEO_INTEGRITY_CHECK in message and f"camera {CAMERA}" in message
    assert published_root(tmp_path / "out", "robot")[0] == good


def test_an_inline_published_lerobot_dataset_is_audited_too(dagster_instance, tmp_path):
    @dg.asset(io_manager_key="refiner", metadata={**LEROBOT, "refiner/finalize_inline": True})
    def robot() -> mdr.Pipeline:
        return episodes_pipeline(tmp_path / "videos", drifting=EPISODES - 1)

    resources = {"refiner": rd.RefinerBlobIOManager(base_url=str(tmp_path / "out"))}
    result = dg.materialize(
        [robot], instance=dagster_instance, resources=resources, raise_on_error=False
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    message = failure.step_failure_data.error.message
    assert f"episode {EPISODES - 1}, camera {CAMERA}" in message
    assert "Readers still see no version" in message
    assert rd.DatasetStorage(str(tmp_path / "out")).current(["robot"], None) is None


def test_lerobot_settings_are_checked_when_the_definitions_load():
    @dg.asset(io_manager_key="refiner", metadata={"refiner/format": "lerobot"})
    def no_fps() -> mdr.Pipeline:
        return mdr.from_items([])

    with pytest.raises(ValueError, match="needs its frame rate; set metadata refiner/lerobot_fps"):
        rd.build_finalization_asset(no_fps)
    with pytest.raises(ValueError, match=r"refiner/lerobot_fps=0 must be a number above 0"):
        rd.build_dataset_asset(
            lambda context: mdr.from_items([]),
            name="zero_fps",
            metadata={"refiner/format": "lerobot", "refiner/lerobot_fps": 0},
        )
    with pytest.raises(ValueError, match="applies only to LeRobot datasets"):
        rd.build_dataset_asset(
            lambda context: mdr.from_items([]),
            name="parquet_fps",
            metadata={"refiner/lerobot_fps": 30},
        )
    with pytest.raises(ValueError, match="refiner/lerobot_chunks_size=2.5 must be a positive"):
        rd.build_dataset_asset(
            lambda context: mdr.from_items([]),
            name="odd_chunks",
            metadata={**LEROBOT, "refiner/lerobot_chunks_size": 2.5},
        )


def lerobot_component_pipeline() -> mdr.Pipeline:
    """The rows the component test declares (module level: the component imports it)."""
    import os

    return episodes_pipeline(Path(os.environ["LEROBOT_COMPONENT_VIDEOS"]))


def test_the_component_declares_a_lerobot_dataset(dagster_instance, tmp_path, monkeypatch):
    monkeypatch.setenv("LEROBOT_COMPONENT_VIDEOS", str(tmp_path / "videos"))
    defs_module = component_package(
        tmp_path,
        "lerobot_component_project",
        f"""
        type: refiner_dagster.RefinerDatasetComponent
        attributes:
          key: robotics/arm
          pipeline: {__name__}:lerobot_component_pipeline
          format: lerobot
          lerobot: {{fps: {FPS}, robot_type: demo_arm, chunks_size: 100}}
          storage:
            base_url: {tmp_path / "out"}
        """,
        "",
    )
    defs = dg.load_defs(defs_root=defs_module, project_root=tmp_path)
    finalized = defs.resolve_assets_def(dg.AssetKey(["robotics", "arm_finalized"]))
    assert VIDEO_INTEGRITY_CHECK in {s.name for s in finalized.check_specs}
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=dagster_instance)
    assert result.success
    assert check_results(result)[VIDEO_INTEGRITY_CHECK].passed
    version = rd.DatasetStorage(str(tmp_path / "out")).current(["robotics", "arm"], None)
    assert version is not None
    assert_episodes_read_back(version.url)
    # format lerobot without its frame rate fails when the definitions load
    with pytest.raises(ValueError, match="format lerobot needs a lerobot block"):
        rd.RefinerDatasetComponent.model_validate(
            {
                "key": "robotics/arm",
                "pipeline": f"{__name__}:lerobot_component_pipeline",
                "format": "lerobot",
            }
        ).build_defs(None)


def test_the_demo_filters_the_drifting_episode_and_publishes_a_verified_dataset(
    demo_home: DemoHome,  # noqa: F811
) -> None:
    out = demo_home.stdout
    assert "robot_episodes: episodes_generated=4, drifting_filtered_out=1" in out
    assert "the episode whose camera clock drifts was filtered out upstream" in out
    lines = [line.strip() for line in out.splitlines()]
    assert (
        "robot_episodes_finalized: missing_assets passed; reference_integrity passed; "
        "video_integrity passed"
    ) in lines
    version = rd.DatasetStorage(str(demo_home.home / "storage" / "refiner")).current(
        ["robot_episodes"], None
    )
    assert version is not None
    episodes = mdr.read_lerobot(version.url, rows="episodes").materialize()
    assert [e["length"] for e in episodes] == [20, 20, 20]
    assert mdr.verify_video(version.url).ok
    assert demo_home.metadata("robot_episodes_finalized")["frames_written"] == 60


@pytest.mark.timeout(3600)
def test_lerobot_loads_the_published_dataset(
    dagster_instance,
    tmp_path,
    lerobot_python,  # noqa: F811
) -> None:
    @dg.asset(io_manager_key="refiner", metadata=LEROBOT)
    def robot() -> mdr.Pipeline:
        return episodes_pipeline(tmp_path / "videos")

    resources = {"refiner": rd.RefinerBlobIOManager(base_url=str(tmp_path / "out"))}
    assets = [robot, rd.build_finalization_asset(robot)]
    assert dg.materialize(assets, instance=dagster_instance, resources=resources).success
    _, root = published_root(tmp_path / "out", "robot")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run(
        [lerobot_python, str(LOAD_SCRIPT), root],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, f"{LOAD_SCRIPT.name} failed:\n{done.stderr[-4000:]}"
    frames = json.loads(done.stdout)["frames"]
    ours = mdr.read_lerobot(root).materialize()
    assert len(frames) == len(ours) == EPISODES * FRAMES
    for got, want in zip(frames, ours, strict=True):
        assert (got["episode_index"], got["frame_index"]) == (
            want["episode_index"],
            want["frame_index"],
        )
        assert got["observation.state"] == pytest.approx(list(want["observation.state"]))
        expected = frame_value(want["episode_index"], want["frame_index"])
        assert abs(got[CAMERA] - expected) <= 3, (want["index"], got[CAMERA], expected)
