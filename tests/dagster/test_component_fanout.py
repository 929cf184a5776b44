"""A fan-out dataset declared in a component's ``defs.yaml``: checked by ``dg check defs``,
materialized by ``dg launch`` against a real instance, read back from storage."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd

from .test_component import _dg

PIPELINES = """
import os
import refiner_core as mdr

def frames(partition_key: str = "all") -> mdr.Pipeline:
    folder = os.environ["REFINER_FANOUT_COMPONENT_MEDIA"]
    paths = sorted(os.path.join(folder, n) for n in os.listdir(folder))
    rows = [{"side": partition_key, "image": p} for p in paths]
    return mdr.from_items(rows, items_per_shard=1, dtypes={"image": mdr.datatype.image_path()})
"""

FANOUT_YAML = """
type: refiner_dagster.RefinerDatasetComponent
attributes:
  key: robotics/frames
  pipeline: fanout_project.pipelines:frames
  target_bytes: 16
  missing_policy: set_null
  storage:
    base_url: {base}
  partitions:
    static: [left, right]
  automation:
    cron: "0 4 * * *"
  checks:
    max_missing_fraction: 0.5
  fanout:
    max_tasks: 2
    retry_policy: {{max_retries: 2, delay: 0.5}}
    pool: refiner-writes
    op_tags: {{team: robotics}}
"""


def _project(tmp_path: Path, yaml: str, name: str = "fanout_project") -> tuple[Path, Path]:
    """A dg project, package ``name``, with ``defs/frames/defs.yaml``; its folder and defs file.

    In-process loads each use their own ``name``: Python keeps a package imported once.
    """
    project = tmp_path / "proj"
    package = project / "src" / name
    (package / "defs" / "frames").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "pipelines.py").write_text(PIPELINES)
    (package / "definitions.py").write_text(
        textwrap.dedent(
            """
            from pathlib import Path
            import dagster as dg

            @dg.definitions
            def defs():
                return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
            """
        )
    )
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [project]
            name = "fanout-project"
            version = "0.1.0"

            [tool.dg]
            directory_type = "project"

            [tool.dg.project]
            root_module = "{name}"
            """
        ).format(name=name)
    )
    defs_yaml = package / "defs" / "frames" / "defs.yaml"
    defs_yaml.write_text(yaml)
    return project, defs_yaml


def _env(project: Path, media_folder: str) -> dict[str, str]:
    return {
        "PYTHONPATH": str(project / "src"),
        "REFINER_FANOUT_COMPONENT_MEDIA": media_folder,
    }


def test_dg_checks_and_launches_a_fanout_dataset(dagster_instance, dagster_home, media, tmp_path):
    files = media(4)
    base = tmp_path / "datasets"
    project, _ = _project(tmp_path, FANOUT_YAML.format(base=base))
    env = _env(project, os.path.dirname(files[0][0]))

    checked = _dg(["check", "defs"], project, dagster_home, **env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr

    launched = _dg(
        ["launch", "--assets", "robotics/frames", "--partition", "right"],
        project,
        dagster_home,
        **env,
    )
    assert launched.returncode == 0, launched.stdout + launched.stderr

    [run] = dagster_instance.get_runs()
    assert run.status == dg.DagsterRunStatus.SUCCESS
    steps = {
        e.step_key
        for e in dagster_instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
    }
    assert steps == {
        "frames.frames_plan",
        "frames.frames_write[task_00000]",
        "frames.frames_write[task_00001]",  # max_tasks: 2 over 4 shards
        "frames.frames_finalize",
    }
    checks = {
        e.dagster_event.event_specific_data.check_name: e.dagster_event.event_specific_data.passed
        for e in dagster_instance.all_logs(
            run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
        )
    }
    assert checks == {"missing_assets": True, "reference_integrity": True}

    version = rd.DatasetStorage(str(base)).current(["robotics", "frames"], "right")
    assert version is not None
    assert version.url.startswith(str(base / "robotics" / "frames" / "right"))
    rows = mdr.read_parquet(version.url).materialize()
    assert sorted(mdr.read_blob(r.image) for r in rows) == sorted(d for _, d in files)
    assert {r.side for r in rows} == {"right"}
    assert rd.DatasetStorage(str(base)).current(["robotics", "frames"], "left") is None


def test_the_fanout_block_shapes_the_steps(media, tmp_path, monkeypatch):
    files = media(2)
    monkeypatch.setenv("REFINER_FANOUT_COMPONENT_MEDIA", os.path.dirname(files[0][0]))
    project, defs_yaml = _project(tmp_path, FANOUT_YAML.format(base=tmp_path / "datasets"))
    monkeypatch.syspath_prepend(str(project / "src"))
    defs = dg.load_from_defs_folder(path_within_project=project / "src" / "fanout_project")
    key = dg.AssetKey(["robotics", "frames"])
    assert {s.key for s in defs.resolve_all_asset_specs()} == {key}  # no finalization asset
    asset = defs.resolve_assets_def(key)
    assert {s.name for s in asset.check_specs} == {"missing_assets", "reference_integrity"}
    assert isinstance(asset.partitions_def, dg.StaticPartitionsDefinition)
    write = asset.node_def.node_dict["frames_write"].definition
    assert write.pool == "refiner-writes"
    assert write.tags["team"] == "robotics"
    assert write.retry_policy == dg.RetryPolicy(max_retries=2, delay=0.5)
    schedule = defs.resolve_schedule_def("robotics__frames_refresh_schedule")
    assert schedule.cron_schedule == "0 4 * * *"
    assert defs.resolve_job_def("robotics__frames_refresh").asset_layer.selected_asset_keys == {key}


BAD_YAML = [
    ("fanout: {max_task: 2}", "unknown field 'max_task'", "did you mean 'max_tasks'?"),
    ("fanout: {max_tasks: 0}", "fanout.max_tasks=0", "must be a positive number of write steps"),
    ("format: parqet\n  fanout: {max_tasks: 2}", "format", "'parquet', 'jsonl', 'lance'"),
    ("key: raw-frames\n  fanout: {}", "'raw-frames'", "rename it, e.g. raw_frames"),
    # any nested block: the mistake is named, not "not valid under any of the given schemas"
    ("storage: {base_ulr: /data}", "'base_ulr'", "did you mean 'base_url'?"),
]


@pytest.mark.parametrize(
    ("lines", "names", "fix"), BAD_YAML, ids=["typo", "zero", "format", "key", "storage"]
)
def test_dg_check_defs_rejects_a_bad_fanout_block(dagster_home, tmp_path, lines, names, fix):
    yaml = f"""
type: refiner_dagster.RefinerDatasetComponent
attributes:
  pipeline: refiner_dagster.component:example_pipeline
  {lines}
"""
    if "key:" not in lines:
        yaml += "  key: robotics/frames\n"
    if "storage:" not in lines:
        yaml += f"  storage: {{base_url: {tmp_path / 'datasets'}}}\n"
    project, _ = _project(tmp_path, yaml)
    checked = _dg(["check", "defs"], project, dagster_home, **_env(project, str(tmp_path)))
    output = checked.stdout + checked.stderr
    assert checked.returncode != 0, output
    assert names in output and fix in output, output
    assert "defs.yaml" in output  # the file at fault


BAD_ATTRIBUTES = [
    ({"fanout": {"max_tasks": "many"}}, "fanout.max_tasks='many' must be a positive number"),
    ({"fanout": {"static_tasks": -3}}, "fanout.static_tasks=-3 must be a positive number"),
    (
        {"fanout": {"retry_policy": {"max_retries": -1}}},
        "fanout.retry_policy.max_retries=-1 must be a whole number, 0 or more",
    ),
    (
        {"fanout": {"retry_policy": {"delay": "soon"}}},
        "fanout.retry_policy.delay='soon' must be seconds, 0 or more",
    ),
    (
        {"fanout": {"retry_policy": {"max_retry": 2}}},
        "RetrySettings got an unknown field 'max_retry' (did you mean 'max_retries'?)",
    ),
    (
        {"fanout": {"static_tasks": 2, "max_tasks": 4}},
        "fanout.max_tasks=4 cannot exceed fanout.static_tasks=2: lower max_tasks",
    ),
    (
        {"automation": {"eager": True}, "fanout": {}},
        "automation.eager finalizes after each write through a finalization asset",
    ),
    (
        {"format": "lerobot", "fanout": {}},
        "format lerobot needs a lerobot block with its frame rate",
    ),
]


@pytest.mark.parametrize(("attributes", "message"), BAD_ATTRIBUTES)
def test_a_bad_fanout_attribute_fails_at_load_naming_it(tmp_path, attributes, message):
    declared = {
        "key": "robotics/frames",
        "pipeline": "refiner_dagster.component:example_pipeline",
        "storage": {"base_url": str(tmp_path)},
        **attributes,
    }
    with pytest.raises(ValueError) as raised:
        rd.RefinerDatasetComponent.model_validate(declared).dataset_defs()
    assert message in str(raised.value)


def test_templated_numbers_and_explicit_defaults_load(tmp_path):
    declared = {
        "key": "frames",
        "pipeline": "refiner_dagster.component:example_pipeline",
        "storage": {"base_url": str(tmp_path)},
        "automation": {"eager": False},
        "fanout": {"max_tasks": "4", "retry_policy": {"max_retries": "1", "delay": "2.5"}},
    }
    component = rd.RefinerDatasetComponent.model_validate(declared)
    assert component.fanout is not None and component.fanout.max_tasks == 4
    write = component.dataset_defs().resolve_assets_def("frames").node_def.node_dict
    assert write["frames_write"].definition.retry_policy == dg.RetryPolicy(max_retries=1, delay=2.5)


def needs_a_partition(partition_key: str) -> mdr.Pipeline:
    return mdr.from_items([{"part": partition_key}])


@pytest.mark.parametrize("fanout", [None, {"max_tasks": 2}], ids=["io_manager", "fanout"])
def test_a_pipeline_needing_a_partition_key_fails_at_load_without_partitions(tmp_path, fanout):
    declared = {
        "key": "parts",
        "pipeline": f"{__name__}:needs_a_partition",
        "storage": {"base_url": str(tmp_path)},
        **({"fanout": fanout} if fanout is not None else {}),
    }
    with pytest.raises(ValueError, match="the pipeline takes partition_key but the dataset has"):
        rd.RefinerDatasetComponent.model_validate(declared).dataset_defs()
    declared["partitions"] = {"static": ["a", "b"]}
    rd.RefinerDatasetComponent.model_validate(declared).dataset_defs()


def test_dg_launches_a_fanout_dataset_onto_s3(
    dagster_instance, dagster_home, media, tmp_path, s3_server, s3_bucket, s3_storage_options
):
    files = media(3)
    base = f"s3://{s3_bucket}/datasets"
    yaml = f"""
type: refiner_dagster.RefinerDatasetComponent
attributes:
  key: frames
  pipeline: fanout_project.pipelines:frames
  target_bytes: 24
  storage:
    base_url: {base}
    s3: {{endpoint_url: "{{{{ env.REFINER_TEST_S3_ENDPOINT }}}}", region_name: us-east-1}}
  fanout:
    static_tasks: 2
"""
    project, _ = _project(tmp_path, yaml)
    env = {  # credentials: the AWS_* variables
        **_env(project, os.path.dirname(files[0][0])),
        "REFINER_TEST_S3_ENDPOINT": s3_server.endpoint_url,
    }
    launched = _dg(["launch", "--assets", "frames"], project, dagster_home, **env)
    assert launched.returncode == 0, launched.stdout + launched.stderr

    [run] = dagster_instance.get_runs()
    steps = {
        e.step_key
        for e in dagster_instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
    }
    assert steps == {
        "frames.frames_plan",
        "frames.frames_write_00000",
        "frames.frames_write_00001",
        "frames.frames_finalize",
    }
    version = rd.DatasetStorage(base, s3_storage_options).current(["frames"], None)
    assert version is not None and version.url.startswith(f"{base}/frames/v-")
    rows = rd.tables.open_version(version).materialize()
    blobs = [mdr.read_blob(r.image, storage_options=s3_storage_options) for r in rows]
    assert sorted(blobs) == sorted(d for _, d in files)
    # the media were packed into blocks in the bucket, none read from the source folder
    blocks = {r.image["path"] for r in rows}
    assert len(blocks) >= 2 and all(b.startswith(f"{version.url}/assets/") for b in blocks), blocks


def test_templates_inside_blocks_are_rendered(tmp_path, monkeypatch):
    monkeypatch.setenv("REFINER_TEST_BASE", str(tmp_path / "rendered"))
    monkeypatch.setenv("REFINER_TEST_ENDPOINT", "http://127.0.0.1:9000")
    yaml = """
type: refiner_dagster.RefinerDatasetComponent
attributes:
  key: frames
  pipeline: refiner_dagster.component:example_pipeline
  storage:
    base_url: "{{ env.REFINER_TEST_BASE }}"
    s3: {endpoint_url: "{{ env.REFINER_TEST_ENDPOINT }}"}
  checks: {max_missing_fraction: "{{ 1 / 4 }}"}
"""
    project, _ = _project(tmp_path, yaml, name="fanout_templates")
    monkeypatch.syspath_prepend(str(project / "src"))
    defs = dg.load_from_defs_folder(path_within_project=project / "src" / "fanout_templates")
    manager = defs.resources["refiner_frames"]
    assert manager.base_url == str(tmp_path / "rendered")
    assert manager.s3.endpoint_url == "http://127.0.0.1:9000"
    finalized = defs.resolve_assets_def("frames_finalized")
    descriptions = " ".join(spec.description or "" for spec in finalized.check_specs)
    assert "ERROR above 25.00% missing" in descriptions
