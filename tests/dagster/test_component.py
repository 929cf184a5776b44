"""RefinerDatasetComponent: a dataset declared in YAML, scaffolded and checked with ``dg``."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd

ROOT = Path(__file__).resolve().parents[2]
DG = str(Path(sys.executable).with_name("dg"))


def _package(tmp_path: Path, name: str, yaml: str, pipelines: str) -> object:
    """A package ``name`` with ``pipelines.py`` and ``defs/dataset/defs.yaml``; importable."""
    root = tmp_path / "src" / name
    (root / "defs" / "dataset").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "defs" / "__init__.py").write_text("")
    (root / "pipelines.py").write_text(textwrap.dedent(pipelines))
    (root / "defs" / "dataset" / "defs.yaml").write_text(textwrap.dedent(yaml))
    sys.path.insert(0, str(tmp_path / "src"))
    importlib.invalidate_caches()
    return importlib.import_module(f"{name}.defs")


def _dg(args: list[str], cwd: Path, home: str, **env: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "DAGSTER_HOME": home,
        "DAGSTER_DISABLE_TELEMETRY": "1",
        "VIRTUAL_ENV": str(Path(sys.executable).parents[1]),
        **env,
    }
    return subprocess.run(
        [DG, *args], cwd=cwd, env=environment, capture_output=True, text=True, timeout=300
    )


def test_yaml_to_a_published_version(dagster_instance, media, tmp_path, monkeypatch):
    files = media(3)
    monkeypatch.setenv("REFINER_TEST_MEDIA", os.path.dirname(files[0][0]))
    data = tmp_path / "datasets"
    defs_module = _package(
        tmp_path,
        "component_project_a",
        f"""
        type: refiner_dagster.RefinerDatasetComponent
        attributes:
          key: robotics/frames
          pipeline: component_project_a.pipelines:frames
          packing: blobs
          target_bytes: 16
          missing_policy: set_null
          storage:
            base_url: {data}
          partitions:
            static: [left, right]
          automation:
            eager: true
            cron: "0 4 * * *"
          checks:
            max_missing_fraction: 0.5
        """,
        """
        import os
        import refiner_core as mdr

        def frames(partition_key: str) -> mdr.Pipeline:
            folder = os.environ["REFINER_TEST_MEDIA"]
            paths = sorted(os.path.join(folder, n) for n in os.listdir(folder))
            rows = [{"side": partition_key, "image": p} for p in paths]
            return mdr.from_items(rows, dtypes={"image": mdr.datatype.image_path()})
        """,
    )
    defs = dg.load_defs(defs_root=defs_module, project_root=tmp_path)
    dataset_key = dg.AssetKey(["robotics", "frames"])
    final_key = dg.AssetKey(["robotics", "frames_finalized"])
    assert {a.key for a in defs.resolve_all_asset_specs()} == {dataset_key, final_key}
    schedule = defs.resolve_schedule_def("robotics__frames_refresh_schedule")
    assert schedule.cron_schedule == "0 4 * * *"
    assert schedule.job_name == "robotics__frames_refresh"
    assert [s.name for s in defs.schedules] == ["robotics__frames_refresh_schedule"]
    final_spec = next(s for s in defs.resolve_all_asset_specs() if s.key == final_key)
    assert final_spec.automation_condition == dg.AutomationCondition.eager()

    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=dagster_instance, partition_key="right")
    assert result.success
    [mat] = [
        m.materialization
        for m in result.get_asset_materialization_events()
        if m.asset_key == final_key
    ]
    meta = {k: v.value for k, v in mat.metadata.items()}
    assert meta["dagster/partition_row_count"] == 3
    assert meta["dagster/table_name"] == "robotics.frames"
    assert meta["refiner/dataset_folder"] == str(data / "robotics" / "frames" / "right")
    assert meta["refiner/missing_policy"] == "set_null"
    assert meta["blocks_written"] >= 2  # 16-byte blocks
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"missing_assets": True, "reference_integrity": True}

    storage = rd.DatasetStorage(str(data))
    version = storage.current(["robotics", "frames"], "right")
    assert version is not None and meta["dagster/uri"] == version.url
    rows = mdr.read_parquet(version.url).materialize()
    assert sorted(mdr.read_blob(r.image) for r in rows) == sorted(d for _, d in files)
    assert {r.side for r in rows} == {"right"}


def test_a_bad_pipeline_reference_fails_at_load(tmp_path):
    defs_module = _package(
        tmp_path,
        "component_project_b",
        """
        type: refiner_dagster.RefinerDatasetComponent
        attributes:
          key: broken
          pipeline: component_project_b.pipelines:nope
        """,
        "",
    )
    with pytest.raises(Exception) as raised:
        dg.load_defs(defs_root=defs_module, project_root=tmp_path)
    chain, error = [], raised.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    assert any(
        "dataset broken: pipeline 'component_project_b.pipelines:nope' cannot be imported" in m
        for m in chain
    )


def test_dg_scaffold_defs_then_check_defs(tmp_path, dagster_home):
    project = tmp_path / "proj"
    package = project / "src" / "scaffold_project"
    (package / "defs").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
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
            name = "scaffold-project"
            version = "0.1.0"

            [tool.dg]
            directory_type = "project"

            [tool.dg.project]
            root_module = "scaffold_project"
            """
        )
    )
    pythonpath = {"PYTHONPATH": str(project / "src")}
    made = _dg(
        ["scaffold", "defs", "refiner_dagster.RefinerDatasetComponent", "episodes"],
        project,
        dagster_home,
        **pythonpath,
    )
    assert made.returncode == 0, made.stderr
    yaml = (package / "defs" / "episodes" / "defs.yaml").read_text()
    assert "type: refiner_dagster.RefinerDatasetComponent" in yaml and "key: episodes" in yaml
    checked = _dg(["check", "defs"], project, dagster_home, **pythonpath)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully" in checked.stdout + checked.stderr

    # a typo in the YAML is caught by dg check defs
    (package / "defs" / "episodes" / "defs.yaml").write_text(
        yaml.replace("packing: blobs", "packing: blob")
    )
    typo = _dg(["check", "defs"], project, dagster_home, **pythonpath)
    assert typo.returncode != 0 and "packing" in typo.stdout + typo.stderr


def test_dg_check_defs_on_the_demo(dagster_home):
    checked = _dg(["check", "defs"], ROOT, dagster_home)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    from refiner_dagster.demo.definitions import defs

    keys = {spec.key.to_user_string() for spec in defs.resolve_all_asset_specs()}
    assert {"episode_thumbnails", "episode_thumbnails_finalized"} <= keys
