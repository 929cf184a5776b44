"""The sharp edges a Dagster user hits: each one fails clearly or behaves as documented."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import tomllib
import uuid
from pathlib import Path

import dagster as dg
import pytest
from dagster_aws.s3 import S3Resource
from packaging.specifiers import SpecifierSet

import refiner_core as mdr
import refiner_dagster as rd
from refiner_core.cpus import available_cpus, cgroup_cpu_limit
from refiner_dagster.settings import validate_asset_metadata
from refiner_dagster.storage import WRITING

from .test_io_manager import episodes_asset, output_metadata, partition_root

ROOT = Path(__file__).resolve().parents[2]


def _failure(result: dg.ExecuteInJobResult) -> str:
    [failure] = result.get_step_failure_events()
    error = failure.step_failure_data.error
    return "\n".join(e.message for e in (error, error.cause) if e is not None)


def _logs(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [e.user_message for e in instance.all_logs(run_id)]


@pytest.mark.parametrize("value", ["false", "False", 0, 1, None])
def test_finalize_inline_takes_booleans_only(dagster_instance, media, value):
    episodes = episodes_asset(media(1), metadata={"refiner/finalize_inline": value})
    with pytest.raises(ValueError, match="refiner/finalize_inline=.* must be a boolean"):
        rd.build_finalization_asset(episodes)  # refused when the definitions load
    result = dg.materialize(
        [episodes],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
        raise_on_error=False,
    )
    assert not result.success  # and never read as "publish inline"
    storage = rd.DatasetStorage(partition_root(dagster_instance))
    assert storage.current(["episodes"], None) is None


def test_num_workers_zero_fails(dagster_instance, media):
    episodes = episodes_asset(media(1), metadata={"refiner/num_workers": 0})
    with pytest.raises(ValueError, match="refiner/num_workers=0 must be a positive integer"):
        validate_asset_metadata(episodes.metadata_by_key[episodes.key], where="asset episodes")
    plain = episodes_asset(media(1), name="plain")
    result = dg.materialize(
        [plain],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=0)},
        raise_on_error=False,
    )
    assert "IO manager field num_workers=0 must be a positive integer" in _failure(result)


def test_default_workers_follow_cpu_affinity():
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("CPU affinity is Linux-only")
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))});"
        "from refiner_dagster.settings import resolve_settings;"
        "d = dict(format='parquet', subdir='assets', missing_policy='error', target_bytes=1,"
        " num_workers=None, max_in_flight=1, finalize_inline=False);"
        "print(resolve_settings(d, {}, where='a').num_workers)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"


def test_cgroup_quota_caps_the_default_workers(tmp_path):
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/jobs/step\n")
    (cgroup / "jobs" / "step").mkdir(parents=True)
    (cgroup / "jobs" / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs for the parent
    (cgroup / "jobs" / "step" / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(cgroup, proc) == 1.5
    assert available_cpus(cgroup, proc) == min(2, len(os.sched_getaffinity(0)))
    (cgroup / "jobs" / "step" / "cpu.max").write_text("50000 100000\n")
    assert available_cpus(cgroup, proc) == 1
    # cgroup v1
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cpus(v1, tmp_path / "none") == 1


def test_another_live_runs_writing_version_is_kept(dagster_instance, media):
    storage = rd.DatasetStorage(partition_root(dagster_instance))
    live, done = str(uuid.uuid4()), str(uuid.uuid4())
    for run_id, status in (
        (live, dg.DagsterRunStatus.STARTED),
        (done, dg.DagsterRunStatus.FAILURE),
    ):
        dagster_instance.add_run(dg.DagsterRun(job_name="other", run_id=run_id, status=status))
    writing_live = storage.begin(["clips"], None, "v-live", {"dagster_run_id": live})
    writing_dead = storage.begin(["clips"], None, "v-dead", {"dagster_run_id": done})
    for version in (writing_live, writing_dead):
        version.folder.write_bytes(f"{version.name}/part.parquet", b"...")
    time.sleep(0.01)

    episodes = episodes_asset(media(1), name="clips")
    finalized = rd.build_finalization_asset(episodes)
    result = dg.materialize(
        [episodes, finalized],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
    )
    assert result.success
    names = {v.name: v.state for v in storage.versions(["clips"], None)}
    assert names.pop("v-live") == WRITING  # still being written by a live run: kept
    assert "v-dead" not in names  # its run failed: its leftovers are removed
    assert list(names.values()) == ["published"]
    assert os.path.exists(os.path.join(writing_live.url, "part.parquet"))


def test_no_asset_columns_warns_and_is_recorded(dagster_instance, media):
    files = media(2)

    @dg.asset(io_manager_key="refiner")
    def untyped() -> mdr.Pipeline:  # paths, but no dtypes=: nothing marks them as assets
        return mdr.from_items([{"image": p} for p, _ in files])

    result = dg.materialize(
        [untyped],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
    )
    meta = output_metadata(result, "untyped")
    assert meta["assets_written"] == 0 and meta["refiner/asset_columns"] == {}
    warnings = [m for m in _logs(dagster_instance, result.run_id) if "no asset columns" in m]
    assert warnings and "dtypes=" in warnings[0]

    typed = episodes_asset(files, name="typed")
    result = dg.materialize(
        [typed],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
    )
    assert output_metadata(result, "typed")["refiner/asset_columns"] == {
        "image": {"kind": "image", "form": "blob", "list": False}
    }


def test_missing_asset_error_names_the_dagster_setting(dagster_instance, media):
    files = media(2)
    os.remove(files[0][0])
    episodes = episodes_asset(files)
    result = dg.materialize(
        [episodes],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
        raise_on_error=False,
    )
    message = _failure(result)
    assert files[0][0] in message
    assert "set metadata {'refiner/missing_policy': 'set_null'}" in message
    assert "on asset episodes, or the IO manager's missing_policy field" in message
    assert "pass missing_policy=" not in message


def test_engine_progress_reaches_the_run_log(dagster_instance, media):
    episodes = episodes_asset(media(3), shards=3)
    result = dg.materialize(
        [episodes],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1, progress_log_seconds=3600)},
    )
    progress = [m for m in _logs(dagster_instance, result.run_id) if m.startswith("[episodes")]
    # rate-limited: the first line of the stage, then its last one
    assert 1 <= len(progress) <= 2
    assert progress[-1].startswith("[episodes stage 0: write_parquet ")
    assert "] 3/3 shards, 3 rows" in progress[-1]


def test_storage_options_read_env_vars_outside_a_run(monkeypatch):
    monkeypatch.setenv("REFINER_TEST_KEY", "AKIA-REAL")
    monkeypatch.setenv("REFINER_TEST_SECRET", "s3cr3t")
    manager = rd.RefinerBlobIOManager(
        base_url="s3://bucket/prefix",
        s3=S3Resource(
            aws_access_key_id=dg.EnvVar("REFINER_TEST_KEY"),
            aws_secret_access_key=dg.EnvVar("REFINER_TEST_SECRET"),
            endpoint_url="http://127.0.0.1:9",
        ),
    )
    options = manager.resolved_storage_options()
    assert options["key"] == "AKIA-REAL" and options["secret"] == "s3cr3t"


def test_typo_in_metadata_fails_definitions_validate(tmp_path):
    module = tmp_path / "typo_defs.py"
    module.write_text(
        textwrap.dedent(
            """
            import dagster as dg, refiner_core as mdr, refiner_dagster as rd

            @dg.asset(io_manager_key="refiner", metadata={"refiner/missing_policy": "set-null"})
            def episodes() -> mdr.Pipeline:
                return mdr.from_items([{"x": 1}])

            defs = dg.Definitions(
                assets=[episodes, rd.build_finalization_asset(episodes)],
                resources={"refiner": rd.RefinerBlobIOManager()},
            )
            """
        )
    )
    env = {**os.environ, "DAGSTER_DISABLE_TELEMETRY": "1", "DAGSTER_HOME": str(tmp_path)}
    dagster = str(Path(sys.executable).with_name("dagster"))
    out = subprocess.run(
        [dagster, "definitions", "validate", "-f", str(module)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode != 0
    assert "refiner/missing_policy='set-null' is not one of 'error', 'set_null'" in (
        out.stdout + out.stderr
    )


def test_python_311_to_313_are_supported():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    supported = SpecifierSet(project["requires-python"])
    assert all(v in supported for v in ("3.11.9", "3.12.4", "3.13.1"))
    assert "3.10.12" not in supported


def test_default_workers_leave_the_cpus_other_work_keeps_busy(monkeypatch):
    from refiner_dagster.settings import resolve_settings

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0, 2.0, 2.0))  # two busy loops
    defaults = dict(
        format="parquet",
        subdir="assets",
        missing_policy="error",
        target_bytes=1,
        num_workers=None,
        max_in_flight=1,
        finalize_inline=False,
    )
    workers = resolve_settings(defaults, {}, where="a").num_workers
    assert workers <= 2  # a cgroup quota of this machine may cap it further
    assert resolve_settings({**defaults, "num_workers": 3}, {}, where="a").num_workers == 3
